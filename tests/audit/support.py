"""Helpers of the audit-log tests: runs and rounds written row by row, and what the
database triggers keep (each call's copy of its run's creation time, the quarter-hour
slots and the error groups) next to what the calls themselves say."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

from tools_app.models import Round, Run, ToolCall, ToolCallSlot, ToolErrorGroup


def make_copy_run(title: str = "r", owner: Any = None) -> tuple[Run, Round]:
    run = Run.objects.create(title=title, status="succeeded", snapshot={}, created_by=owner)
    return run, Round.objects.create(run=run, index=0)


def stored(call: ToolCall) -> datetime | None:
    return ToolCall.objects.values_list("run_created_at", flat=True).get(pk=call.pk)


T0 = datetime(2026, 3, 1, 9, 59, 59, tzinfo=UTC)  # in the quarter hour 09:45


def quarter(moment: datetime) -> datetime:
    moment = moment.astimezone(UTC)
    return moment.replace(minute=moment.minute // 15 * 15, second=0, microsecond=0)


def recount() -> dict[tuple[str, datetime], tuple[int, int]]:
    """The slots as the calls themselves say they are."""
    counts: Counter[tuple[str, datetime]] = Counter()
    errors: Counter[tuple[str, datetime]] = Counter()
    # Only the columns it needs: a migration test calls it before later columns exist.
    for call in ToolCall.objects.values("tool_name", "started_at", "run__created_at",
                                        "is_error"):
        moment = call["started_at"] or call["run__created_at"]
        key = (call["tool_name"], quarter(moment))
        counts[key] += 1
        errors[key] += call["is_error"]
    return {key: (n, errors[key]) for key, n in counts.items()}


def regroup() -> dict[tuple[str, str, str], tuple[int, int]]:
    """The error groups as the calls themselves say they are: count and newest id."""
    found: dict[tuple[str, str, str], tuple[int, int]] = {}
    # Only the columns it needs, as recount: a migration test calls it before later
    # columns exist.
    for pk, tool_name, error_type, message in ToolCall.objects.filter(
            is_error=True).order_by("pk").values_list("pk", "tool_name", "error_type",
                                                      "error_message"):
        key = (tool_name, error_type, message[:300])
        found[key] = (found.get(key, (0, 0))[0] + 1, pk)
    return found


def groups() -> dict[tuple[str, str, str], tuple[int, int]]:
    return {(g.tool_name, g.error_type, g.head): (g.calls, g.last_call_id)
            for g in ToolErrorGroup.objects.filter(calls__gt=0)}


def slots() -> dict[tuple[str, datetime], tuple[int, int]]:
    return {(s.tool_name, s.slot): (s.calls, s.errors)
            for s in ToolCallSlot.objects.filter(calls__gt=0)}


def make_slot_run(created: datetime) -> tuple[Run, Round]:
    run = Run.objects.create(title="r", status="running", snapshot={})
    Run.objects.filter(pk=run.pk).update(created_at=created)
    run.refresh_from_db()
    return run, Round.objects.create(run=run, index=0)
