"""How many calls the calls list's filters select, and how many of them are errors,
without letting a count at a million calls slow the page.

- Staff with no filter, or only `tool`: exact, from the counts the database triggers
  keep per tool and quarter hour (`ToolCallSlot`: a row per tool and quarter hour with
  calls: a seventh as many rows as calls in the audit benchmark).
- Otherwise counted (`call_filters.counted_calls`: the list's filters, a run's status
  or endpoint read from the runs), up to `CAP` calls (then "more than CAP") and within
  `BUDGET` seconds (then "not counted"): a rare match that no index finds would
  otherwise be a scan of every call, so the database is told to stop
  (`audit.deadline`). Errors are counted the same way, once more when the calls were
  more than the cap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from django.db import OperationalError
from django.db.models import Count, Q, QuerySet, Sum

from tools_app.audit.call_filters import counted_calls
from tools_app.audit.deadline import deadline, stopped
from tools_app.models import ToolCall, ToolCallSlot

CAP = 10_000
BUDGET = 0.08  # seconds for all the counting of one page


@dataclass(frozen=True)
class Tally:
    """A count: `value`, or more than it (`more`: the cap was reached), or not known
    (`value` None: the time ran out)."""

    value: int | None
    more: bool = False

    @property
    def exact(self) -> bool:
        return self.value is not None and not self.more


@dataclass(frozen=True)
class CallTotals:
    calls: Tally
    errors: Tally

    @property
    def error_rate(self) -> float | None:
        """The errors' share, when both counts are exact."""
        if not (self.calls.exact and self.errors.exact) or not self.calls.value:
            return None
        return (self.errors.value or 0) / self.calls.value


def call_totals(visible: QuerySet[ToolCall], params: Mapping[str, str], *,
                every_call: bool) -> CallTotals:
    """The totals of the calls `params`' filters select among `visible` (all the calls
    when `every_call`: staff). Raises FilterError as the list does."""
    filters = {k: v for k, v in params.items() if k not in ("sort", "cursor", "limit")}
    if every_call and set(filters) <= {"tool"}:
        return _from_slots(visible.db, filters.get("tool"))
    calls = counted_calls(visible, filters)
    found: dict[str, int] = {}
    try:
        with deadline(calls.db, BUDGET):
            # calls and errors among at most CAP + 1 matches, in one query
            first = calls[:CAP + 1].aggregate(n=Count("*"),
                                              errors=Count("pk", filter=Q(is_error=True)))
            found |= {"calls": int(first["n"]), "errors": int(first["errors"])}
            if found["calls"] > CAP:  # then errors alone, up to the cap
                found["erring"] = int(calls.filter(is_error=True)[:CAP + 1]
                                      .aggregate(n=Count("*"))["n"])
    except OperationalError as exc:
        if not stopped(exc):
            raise
    return _totals(found)


def _totals(found: dict[str, int]) -> CallTotals:
    if "calls" not in found:
        return CallTotals(Tally(None), Tally(None))
    if found["calls"] <= CAP:
        return CallTotals(Tally(found["calls"]), Tally(found["errors"]))
    erring = found.get("erring")
    errors = Tally(None) if erring is None else Tally(min(erring, CAP), more=erring > CAP)
    return CallTotals(Tally(CAP, more=True), errors)


def _from_slots(using: str, tool: str | None) -> CallTotals:
    summed = _slots(using, tool).aggregate(calls=Sum("calls"), errors=Sum("errors"))
    return CallTotals(Tally(int(summed["calls"] or 0)), Tally(int(summed["errors"] or 0)))


def slot_count(using: str, tool: str | None) -> int:
    """Every call, or every call of `tool`, from the per-tool counts (one read)."""
    return int(_slots(using, tool).aggregate(calls=Sum("calls"))["calls"] or 0)


def _slots(using: str, tool: str | None) -> QuerySet[ToolCallSlot]:
    slots = ToolCallSlot.objects.using(using)
    return slots.filter(tool_name=tool) if tool is not None else slots
