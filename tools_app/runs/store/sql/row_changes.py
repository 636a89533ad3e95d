"""The row changes of one batch of a run's events, folded into few statements.

A round's events touch the same rows again and again (its Round row four times, each
ToolCall row three times, the Run's counters per call). The recorder folds a batch's
changes here, then writes them in a fixed order, all inside the batch's transaction:

1. the run: its counters folded into the UPDATE that allocates the batch's seqs
   (`eventlog.append_events`, before everything else: it is the lease's fence);
2. rounds started in the batch: one upsert (INSERT ... ON CONFLICT (run, index) DO
   UPDATE), carrying every later change of the batch to those rounds;
3. other rounds: one UPDATE per round, with its changes merged;
4. calls proposed in the batch: one INSERT, carrying the batch's later changes to
   them (a call usually starts in the batch that proposes it); a call stored before,
   by a run resumed from its history, is left as it is (as `get_or_create` would), and
   gets those changes by UPDATE;
5. other calls: one UPDATE per call, its start and end merged.

The statements are `rowsql`'s, built once per shape. The order is the events' order
where it matters (a row exists before it is updated; a call's started then finished
fields, in that order, win over earlier ones).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from tools_app.models import Round, ToolCall
from tools_app.runs.store.sql import rowsql
from tools_app.runs.store.sql.rowsql import Add


@dataclass
class RowChanges:
    """What one batch changes: `run_changes()` goes with the batch's seqs, `write()`
    applies the rest (inside the batch's transaction)."""

    run_id: str
    known_rounds: dict[int, int]  # round index -> pk, of rounds committed before
    call_defaults: dict[str, Any] = field(default_factory=dict)  # copied from the run
    started_rounds: dict[int, dict[str, Any]] = field(default_factory=dict)
    round_updates: dict[int, dict[str, Any]] = field(default_factory=dict)
    proposed_calls: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    call_updates: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)
    call_tools: dict[tuple[int, str], str] = field(default_factory=dict)
    call_starts: Counter[tuple[int, str]] = field(default_factory=Counter)
    run_counters: Counter[str] = field(default_factory=Counter)  # values: ints, Decimal dollars
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

    def propose_call(self, round_index: int, call: dict[str, Any]) -> None:
        self.proposed_calls.append((round_index, call))

    def update_call(self, round_index: int, call_id: str, tool_name: str,
                    fields: dict[str, Any], *, started: bool = False) -> None:
        self.call_updates.setdefault((round_index, call_id), {}).update(fields)
        self.call_tools[(round_index, call_id)] = tool_name
        if started:
            self.call_starts[(round_index, call_id)] += 1

    def count(self, **deltas: int | Decimal) -> None:
        self.run_counters.update(deltas)

    # -- writing -------------------------------------------------------------------------

    def run_changes(self) -> dict[str, Any]:
        """The run row's changes, for the UPDATE that allocates the batch's seqs."""
        changes: dict[str, Any] = {name: Add(delta)
                                   for name, delta in self.run_counters.items() if delta}
        if self.rounds_count is not None:
            changes["rounds_count"] = self.rounds_count
        return changes

    def write(self) -> None:
        """Rounds and calls (the run's own row is written with the batch's seqs)."""
        write_all([self])

    def round_id(self, index: int) -> int:
        known = self.new_rounds.get(index, self.known_rounds.get(index))
        if known is None:
            # A round this process did not start (a run resumed mid-round): look it up
            # once, or create its row as the recorder always did.
            known = Round.objects.get_or_create(run_id=self.run_id, index=index)[0].pk
            self.new_rounds[index] = known
        return known


def write_all(batches: list[RowChanges]) -> None:
    """The rounds and calls of several runs' batches (each run at most once), phase by
    phase, each phase's rows in as few statements as their shapes allow: what one
    batch's statements cost, a group of batches costs about once."""
    _write_started_rounds(batches)
    _write_round_updates(batches)
    updates = _write_proposed_calls(batches)
    # In tool order: the triggers keeping each tool's counts (audit.triggers) lock
    # its rows, and two batches taking them in opposite orders could deadlock.
    for changes, (round_index, call_id), fields in sorted(
            updates, key=lambda item: (item[0].call_tools[item[1]], item[0].run_id, item[1])):
        starts = changes.call_starts[(round_index, call_id)]
        if starts:
            fields = {**fields, "attempts": Add(starts)}
        rowsql.update(ToolCall, {"round": changes.round_id(round_index), "call_id": call_id},
                      fields)


def _write_started_rounds(batches: list[RowChanges]) -> None:
    # Rounds that changed the same columns share one upsert, which sets only those on
    # a row that exists (a round asked again on resume keeps the rest, as
    # update_or_create did).
    groups: dict[tuple[str, ...], list[tuple[RowChanges, int]]] = {}
    for changes in batches:
        for index, fields in changes.started_rounds.items():
            groups.setdefault(tuple(sorted(fields)), []).append((changes, index))
    for changed, started in groups.items():
        rows = [{"run": changes.run_id, "index": index, **changes.started_rounds[index]}
                for changes, index in started]
        ids = rowsql.insert(Round, rows, conflict=("run", "index"),
                            on_conflict_update=changed, returning="id")
        for (changes, index), round_id in zip(started, ids, strict=True):
            changes.new_rounds[index] = round_id


def _write_round_updates(batches: list[RowChanges]) -> None:
    """Rounds started before their batch: one UPDATE for those changing the same
    columns the same way."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for changes in batches:
        for index, fields in changes.round_updates.items():
            groups.setdefault(tuple(fields), []).append(
                {"id": changes.round_id(index), **fields})
    for rows in groups.values():
        rowsql.update_many(Round, ("id",), rows)


CallUpdate = tuple["RowChanges", tuple[int, str], dict[str, Any]]


def _write_proposed_calls(batches: list[RowChanges]) -> list[CallUpdate]:
    """INSERT the proposed calls with their later changes in their batch; returns the
    call changes still to be written by UPDATE."""
    updates = {(id(changes), key): (changes, key, fields)
               for changes in batches for key, fields in changes.call_updates.items()}
    # (round pk, index) -> the update it carries
    carried: dict[tuple[int, int], tuple[int, tuple[int, str]]] = {}
    rows = []
    # In tool order, as the updates are (the count triggers' locks); stable, so one
    # tool's calls keep their order.
    proposed = [(changes, round_index, call) for changes in batches
                for round_index, call in changes.proposed_calls]
    for changes, round_index, call in sorted(proposed, key=lambda item: item[2]["tool_name"]):
        row = {**changes.call_defaults, **call, "round": changes.round_id(round_index)}
        key = (round_index, call["call_id"])
        if key in changes.call_updates:
            row.update(changes.call_updates[key], attempts=changes.call_starts[key])
            carried[(row["round"], call["call_index"])] = (id(changes), key)
        rows.append(row)
    # A call stored before (a run resumed from its history) stays as it is: the INSERT
    # skips it, and the changes it would have carried go by UPDATE.
    inserted = rowsql.insert(ToolCall, rows, conflict=("round", "call_index"),
                             returning=("round", "call_index"))
    for round_id, call_index in inserted:
        written = carried.get((round_id, call_index))
        if written is not None:
            # Two calls with one id (a provider that repeats ids) both carried it.
            updates.pop(written, None)
    return list(updates.values())
