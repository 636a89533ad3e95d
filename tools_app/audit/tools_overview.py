"""The tools index (`/tools/`): every tool with its calls and errors, the 95th percentile
of its latest calls' durations and its calls and errors per hour of the last day (a
sparkline), over the calls the viewer may see.

A fixed number of queries, whatever the number of calls: staff read the counts the
database triggers keep per tool and quarter hour (`ToolCallSlot`); anyone else's counts
come from the index of their own calls. The percentile reads each tool's latest
`RECENT_TIMED` timed calls, newest first from the index of a tool's calls by id, in one
statement for all the tools.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connections
from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone

from tools_app.audit.costs import tool_costs
from tools_app.models import ToolCall, ToolCallSlot, ToolRegistration
from tools_app.models.sort_keys import moment_key

RECENT_TIMED = 500  # the percentile is over each tool's latest this many timed calls
HOURS = 24  # the sparkline's span, an hour a bar, the current hour the last
_PER_STATEMENT = 100  # tools whose latest calls one UNION ALL statement reads


@dataclass(frozen=True)
class Hour:
    start: datetime
    calls: int = 0
    errors: int = 0


@dataclass(frozen=True)
class ToolRow:
    name: str
    registration: ToolRegistration | None
    calls: int
    errors: int
    p95_ms: float | None = None
    timed: int = 0  # how many durations the percentile is over
    hours: list[Hour] = field(default_factory=list)
    cost_usd: Decimal | None = None  # its priced calls' shares; None: none is priced

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.calls if self.calls else None

    @property
    def last_day(self) -> tuple[int, int]:
        """Calls and errors of the sparkline's hours."""
        return sum(h.calls for h in self.hours), sum(h.errors for h in self.hours)


def tools_overview(calls: QuerySet[ToolCall], *, every_call: bool,
                   now: datetime | None = None) -> list[ToolRow]:
    """Every registered tool and every other name the visible `calls` used (hallucinated
    ones), by name. `every_call`: `calls` are all the calls (staff)."""
    calls = calls.order_by()
    counts = _slot_counts(calls.db) if every_call else _counts(calls)
    registrations = {t.name: t for t in ToolRegistration.objects.order_by("name")}
    used = sorted(name for name, (n, _) in counts.items() if n)
    durations = recent_durations(calls, used, by_id=every_call)
    hours = last_hours(calls, used, every_call=every_call, now=now)
    costs = tool_costs(calls)
    rows = []
    for name in sorted(set(registrations) | set(counts)):
        timed = sorted(durations.get(name, []))
        n, errors = counts.get(name, (0, 0))
        rows.append(ToolRow(name, registrations.get(name), n, errors,
                            percentile(timed, 0.95), len(timed), hours.get(name, []),
                            costs.get(name)))
    return rows


def _counts(calls: QuerySet[ToolCall]) -> dict[str, tuple[int, int]]:
    rows = (calls.exclude(tool_name="").values_list("tool_name")
            .annotate(n=Count("pk"), errors=Count("pk", filter=Q(is_error=True))))
    return {name: (n, errors) for name, n, errors in rows}


def _slot_counts(using: str) -> dict[str, tuple[int, int]]:
    rows = (ToolCallSlot.objects.using(using).exclude(tool_name="").values_list("tool_name")
            .annotate(n=Sum("calls"), errors=Sum("errors")).order_by())
    return {name: (int(n or 0), int(errors or 0)) for name, n, errors in rows}


def recent_durations(calls: QuerySet[ToolCall], names: list[str], *,
                     by_id: bool = True) -> dict[str, list[float]]:
    """The durations of each named tool's latest RECENT_TIMED timed calls among `calls`:
    one statement per _PER_STATEMENT tools, each tool's part a bounded read newest
    first (UNION ALL of the ORM's own queries: SQLite takes no LIMIT inside a compound
    query unless it is wrapped). Newest by id (all the calls: the index of a tool's
    calls by id), or, `by_id` false (a user's calls), by their runs' creation, which
    the index of a user's calls of a tool holds beside the duration: PostgreSQL then
    reads that index alone instead of every call's row for its id."""
    found: dict[str, list[float]] = defaultdict(list)
    connection = connections[calls.db]
    newest = "-pk" if by_id else "-run_created_at"
    for start in range(0, len(names), _PER_STATEMENT):
        parts: list[str] = []
        params: list[Any] = []
        for name in names[start:start + _PER_STATEMENT]:
            latest = (calls.filter(tool_name=name, duration_ms__isnull=False)
                      .order_by(newest).values_list("tool_name", "duration_ms")[:RECENT_TIMED])
            sql, part_params = latest.query.sql_with_params()
            parts.append(f"SELECT * FROM ({sql}) AS t{len(parts)}")  # noqa: S608 (ORM SQL)
            params.extend(part_params)
        with connection.cursor() as cursor:
            cursor.execute(" UNION ALL ".join(parts), params)
            for name, duration in cursor.fetchall():
                found[name].append(float(duration))
    return found


def percentile(ordered: list[float], fraction: float) -> float | None:
    """The continuous percentile of sorted values (linear interpolation between ranks,
    as PostgreSQL's percentile_cont and the tool page compute it)."""
    if not ordered:
        return None
    rank = (len(ordered) - 1) * fraction
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def hour_starts(now: datetime | None = None) -> list[datetime]:
    """The starts of the sparkline's hours in the current time zone, oldest first; the
    last is the hour now is in."""
    local = timezone.localtime(now or timezone.now())
    # counted back in UTC, so an hour is an hour across a change of daylight saving time
    current = local.replace(minute=0, second=0, microsecond=0).astimezone(UTC)
    return [timezone.localtime(current - timedelta(hours=HOURS - 1 - i)) for i in range(HOURS)]


def last_hours(calls: QuerySet[ToolCall], names: list[str], *, every_call: bool,
               now: datetime | None = None) -> dict[str, list[Hour]]:
    """Each named tool's calls and errors per hour of the last HOURS hours: for all the
    calls from the quarter hours the triggers count (each lies inside one hour of any
    time zone), else from the calls themselves (their moment: start, or run's creation)."""
    if not names:
        return {}
    starts = hour_starts(now)
    first = starts[0]
    moments: Iterable[tuple[str, datetime, int, int]]
    if every_call:
        moments = ToolCallSlot.objects.using(calls.db).filter(
            tool_name__in=names, slot__gte=first, calls__gt=0).values_list(
            "tool_name", "slot", "calls", "errors")
    else:
        moments = ((name, moment, 1, int(error)) for name, moment, error in
                   calls.filter(tool_name__in=names).annotate(moment=moment_key())
                   .filter(moment__gte=first).values_list("tool_name", "moment", "is_error"))
    totals: dict[str, list[list[int]]] = {name: [[0, 0] for _ in starts] for name in names}
    for name, moment, n, errors in moments:
        index = int((moment - first) // timedelta(hours=1))
        if 0 <= index < HOURS and name in totals:
            totals[name][index][0] += n
            totals[name][index][1] += errors
    return {name: [Hour(start, n, errors) for start, (n, errors) in zip(starts, hours,
                                                                        strict=True)]
            for name, hours in totals.items()}
