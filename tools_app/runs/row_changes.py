"""The row changes of one batch of a run's events, folded into few statements.

A round's events touch the same rows again and again (its Round row four times, each
ToolCall row three times, the Run's counters per call). Written one event at a time
that was 3-6 ORM statements per event, and the ORM's cost per statement was most of
the application's CPU per round (docs/benchmarks/product-path.md). The recorder folds
a batch's changes here instead, then writes them in a fixed order, all inside the
batch's transaction:

1. rounds started in the batch: one upsert (INSERT ... ON CONFLICT (run, index) DO
   UPDATE), carrying every later change of the batch to those rounds;
2. other rounds: one UPDATE per round, with its changes merged;
3. calls proposed in the batch: one INSERT (a call stored before, by a run resumed
   from its history, is left as it is, as `get_or_create` did);
4. calls: one UPDATE per call, its start and end merged;
5. the run: one UPDATE of its counters.

The order is the events' order where it matters (a row exists before it is updated;
a call's started then finished fields, in that order, win over earlier ones).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.db.models import F

from ..models import Round, Run, ToolCall

ROUND_START_FIELDS = ("status", "started_at", "attempts", "finished_at")


@dataclass
class RowChanges:
    """What one batch changes; `write()` applies it (inside the batch's transaction)."""

    run_id: str
    known_rounds: dict[int, int]  # round index -> pk, of rounds committed before
    started_rounds: dict[int, dict[str, Any]] = field(default_factory=dict)
    round_updates: dict[int, dict[str, Any]] = field(default_factory=dict)
    proposed_calls: list[tuple[int, ToolCall]] = field(default_factory=list)
    call_updates: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)
    call_starts: Counter[tuple[int, str]] = field(default_factory=Counter)
    run_counters: Counter[str] = field(default_factory=Counter)
    rounds_count: int | None = None
    new_rounds: dict[int, int] = field(default_factory=dict)  # written by this batch

    # -- folding -------------------------------------------------------------------------

    def start_round(self, index: int, fields: dict[str, Any]) -> None:
        self.started_rounds[index] = dict(fields)
        self.round_updates.pop(index, None)  # superseded: the upsert carries the rest
        self.rounds_count = index + 1

    def update_round(self, index: int, fields: dict[str, Any]) -> None:
        target = self.started_rounds.get(index)
        if target is None:
            target = self.round_updates.setdefault(index, {})
        target.update(fields)

    def pending_round_value(self, index: int, name: str) -> Any:
        """A round field's value as this batch leaves it so far, if it sets it."""
        for fields in (self.started_rounds.get(index), self.round_updates.get(index)):
            if fields is not None and name in fields:
                return fields[name]
        return None

    def propose_call(self, round_index: int, call: ToolCall) -> None:
        self.proposed_calls.append((round_index, call))

    def update_call(self, round_index: int, call_id: str, fields: dict[str, Any],
                    *, started: bool = False) -> None:
        self.call_updates.setdefault((round_index, call_id), {}).update(fields)
        if started:
            self.call_starts[(round_index, call_id)] += 1

    def count(self, **deltas: int) -> None:
        self.run_counters.update(deltas)

    # -- writing -------------------------------------------------------------------------

    def write(self) -> None:
        self._write_started_rounds()
        for index, fields in self.round_updates.items():
            Round.objects.filter(pk=self.round_id(index)).update(**fields)
        self._write_proposed_calls()
        for (round_index, call_id), fields in self.call_updates.items():
            starts = self.call_starts[(round_index, call_id)]
            if starts:
                fields = {**fields, "attempts": F("attempts") + starts}
            ToolCall.objects.filter(round_id=self.round_id(round_index),
                                    call_id=call_id).update(**fields)
        self._write_run()

    def round_id(self, index: int) -> int:
        known = self.new_rounds.get(index, self.known_rounds.get(index))
        if known is None:
            # A round this process did not start (a run resumed mid-round): look it up
            # once, or create its row as the recorder always did.
            known = Round.objects.get_or_create(run_id=self.run_id, index=index)[0].pk
            self.new_rounds[index] = known
        return known

    def _write_started_rounds(self) -> None:
        if not self.started_rounds:
            return
        # Rounds that changed the same columns share one upsert, which sets only those
        # on a row that exists (a round asked again on resume keeps the rest, as
        # update_or_create did).
        groups: dict[tuple[str, ...], list[Round]] = {}
        for index, fields in self.started_rounds.items():
            groups.setdefault(tuple(sorted(fields)), []).append(
                Round(run_id=self.run_id, index=index, **fields))
        for changed, rows in groups.items():
            Round.objects.bulk_create(rows, update_conflicts=True,
                                      unique_fields=["run", "index"], update_fields=changed)
            for row in rows:
                if row.pk is None:  # a database that cannot return upserted ids
                    row.pk = Round.objects.only("pk").get(run_id=self.run_id,
                                                          index=row.index).pk
                self.new_rounds[row.index] = row.pk

    def _write_proposed_calls(self) -> None:
        if not self.proposed_calls:
            return
        rows = []
        for round_index, call in self.proposed_calls:
            call.round_id = self.round_id(round_index)
            rows.append(call)
        ToolCall.objects.bulk_create(rows, ignore_conflicts=True)

    def _write_run(self) -> None:
        fields: dict[str, Any] = {name: F(name) + delta
                                  for name, delta in self.run_counters.items() if delta}
        if self.rounds_count is not None:
            fields["rounds_count"] = self.rounds_count
        if fields:
            Run.objects.filter(pk=self.run_id).update(**fields)
