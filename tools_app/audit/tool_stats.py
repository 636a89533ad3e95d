"""Statistics of one tool's calls (always over the calls the viewer may see): counts, the
rate of each outcome, duration percentiles, the most frequent errors, and calls and
errors over time as the points of a server-rendered SVG chart.

Every statistic is a fixed number of queries, whatever the number of calls: the
percentiles are PostgreSQL's `percentile_cont` in one aggregate; SQLite has no such
aggregate, so there each percentile reads the (at most) two rows around its rank with an
ordered LIMIT/OFFSET query: the same linear interpolation, one query per percentile.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import Any

from django.db import connections
from django.db.models import (
    Aggregate,
    CharField,
    Count,
    DateTimeField,
    F,
    FloatField,
    Func,
    IntegerField,
    Max,
    Min,
    Q,
    QuerySet,
    Sum,
)
from django.db.models.functions import (
    Cast,
    Coalesce,
    Substr,
    TruncDay,
    TruncHour,
    TruncWeek,
)
from django.db.models.functions.datetime import TruncBase
from django.utils import timezone

from tools_app.audit.call_filters import STATE_LABELS, STATE_NAMES
from tools_app.audit.triggers import ERROR_HEAD_CHARS
from tools_app.models import ToolCall, ToolCallSlot, ToolErrorGroup

PERCENTILES = (0.5, 0.95, 0.99)
TOP_ERRORS = 10
ERROR_GROUP_CHARS = ERROR_HEAD_CHARS  # messages that agree this far are one group
HOUR_SPAN = timedelta(days=2)  # up to this span the chart has a point per hour
DAY_SPAN = timedelta(days=120)  # then per day up to this, then per week


class PercentileCont(Aggregate):
    """PostgreSQL's continuous percentile (linear interpolation between ranks)."""

    function = "PERCENTILE_CONT"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: Any, fraction: float) -> None:
        # A float this module chose (PERCENTILES), never user input, so it is inlined.
        super().__init__(expression, fraction=repr(float(fraction)))


@dataclass(frozen=True)
class OutcomeShare:
    name: str
    label: str
    count: int
    rate: float  # of all the calls, 0..1


@dataclass(frozen=True)
class ErrorGroup:
    error_type: str
    message: str
    count: int
    last_call_id: int


@dataclass(frozen=True)
class Bucket:
    start: datetime
    calls: int
    errors: int


@dataclass(frozen=True)
class ToolStats:
    calls: int
    errors: int
    outcomes: list[OutcomeShare]
    percentiles: dict[str, float | None]  # "p50" -> ms
    top_errors: list[ErrorGroup]
    buckets: list[Bucket]
    bucket_unit: str  # "hour", "day" or "week"

    @property
    def error_rate(self) -> float:
        return self.errors / self.calls if self.calls else 0.0


def tool_stats(calls: QuerySet[ToolCall], *, every_call_of: str | None = None) -> ToolStats:
    """The statistics of `calls` (one tool's visible calls). `every_call_of` names the
    tool when `calls` are all of its calls (staff): the chart and the most frequent
    errors then come from the counts the database keeps (`ToolCallSlot`,
    `ToolErrorGroup`) instead of reading the tool's calls."""
    calls = calls.order_by()
    total, errors, shares = outcomes(calls)
    unit, buckets = over_time(calls, every_call_of=every_call_of)
    return ToolStats(total, errors, shares, duration_percentiles(calls),
                     top_errors(calls, every_call_of=every_call_of), buckets, unit)


def outcomes(calls: QuerySet[ToolCall]) -> tuple[int, int, list[OutcomeShare]]:
    """The number of calls, of errors, and each outcome's count and share, in the
    filters' names (most frequent first): one query, read from the index of a tool's
    calls by state and error flag."""
    counts: dict[str, int] = {}
    total = errors = 0
    # COUNT(*), not of a column: PostgreSQL then reads the index alone
    for state, is_error, count in calls.values_list("state", "is_error").annotate(
            n=Count("*")):
        name = STATE_NAMES.get(state, state)
        counts[name] = counts.get(name, 0) + count
        total += count
        errors += count if is_error else 0
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return total, errors, [OutcomeShare(name, STATE_LABELS.get(name, name), count,
                                        count / total if total else 0.0)
                           for name, count in ordered]


def duration_percentiles(calls: QuerySet[ToolCall]) -> dict[str, float | None]:
    timed = calls.filter(duration_ms__isnull=False)
    keys = [f"p{round(p * 100)}" for p in PERCENTILES]
    if connections[calls.db].vendor == "postgresql":
        found = timed.aggregate(**{key: PercentileCont("duration_ms", p)
                                   for key, p in zip(keys, PERCENTILES, strict=True)})
        return {key: found[key] for key in keys}
    count = timed.count()
    return {key: _interpolated(timed, count, p) for key, p in zip(keys, PERCENTILES, strict=True)}


def _interpolated(timed: QuerySet[ToolCall], count: int, fraction: float) -> float | None:
    """percentile_cont on SQLite: the value at rank (n - 1) * fraction, interpolated
    between the two rows around it, read with one ordered, bounded query."""
    if count == 0:
        return None
    rank = (count - 1) * fraction
    low = math.floor(rank)
    values = [float(v or 0.0) for v in timed.order_by("duration_ms", "pk").values_list(
        "duration_ms", flat=True)[low:low + 2]]  # never None: `timed` has durations
    if len(values) == 1 or rank == low:
        return values[0]
    return values[0] + (values[1] - values[0]) * (rank - low)


def top_errors(calls: QuerySet[ToolCall], *,
               every_call_of: str | None = None) -> list[ErrorGroup]:
    """The most frequent errors, grouped by type and the start of the message: for every
    call of a tool (`every_call_of`), the groups the database triggers keep
    (`ToolErrorGroup`), else counted from `calls`."""
    if every_call_of is not None:
        groups = (ToolErrorGroup.objects.using(calls.db)
                  .filter(tool_name=every_call_of, calls__gt=0)
                  .order_by("-calls", "error_type", "head")[:TOP_ERRORS])
        return [ErrorGroup(g.error_type, g.head, g.calls, g.last_call_id) for g in groups]
    rows = (calls.filter(is_error=True)
            .values("error_type", head=Substr("error_message", 1, ERROR_GROUP_CHARS))
            .annotate(n=Count("pk"), last=Max("pk"))
            .order_by("-n", "error_type", "head")[:TOP_ERRORS])
    return [ErrorGroup(row["error_type"], row["head"], row["n"], row["last"]) for row in rows]


def _moment() -> Coalesce:
    """When a call happened: its start, or its run's creation for a call that never
    started (hallucinated, refused), kept on the call (`run_created_at`): no join."""
    return Coalesce("started_at", "run_created_at", output_field=DateTimeField())


def over_time(calls: QuerySet[ToolCall], *,
              every_call_of: str | None = None) -> tuple[str, list[Bucket]]:
    """Calls and errors per hour, day or week (by the span of the calls), oldest first.
    The span's ends are two queries (SQLite reads a MIN or a MAX from an index only when
    it is alone), each one read of the index of a tool's calls by moment."""
    first = calls.aggregate(first=Min(_moment()))["first"]
    last = calls.aggregate(last=Max(_moment()))["last"]
    if first is None or last is None:
        return "hour", []
    span = last - first
    unit, trunc = (("hour", TruncHour) if span <= HOUR_SPAN else
                   ("day", TruncDay) if span <= DAY_SPAN else ("week", TruncWeek))
    if every_call_of is not None:
        return unit, _slot_buckets(every_call_of, unit, trunc, calls.db)
    if connections[calls.db].vendor == "sqlite":
        return unit, _sqlite_buckets(calls, unit)
    rows = (calls.annotate(at=_moment()).values(bucket=trunc(F("at")))
            .annotate(calls=Count("pk"), errors=Count("pk", filter=Q(is_error=True)))
            .order_by("bucket"))
    return unit, [Bucket(row["bucket"], row["calls"], row["errors"]) for row in rows]


def _slot_buckets(tool_name: str, unit: str, trunc: type[TruncBase],
                  using: str) -> list[Bucket]:
    """The buckets of every call of a tool, from the quarter hours the database triggers
    keep counted (`ToolCallSlot`: a few thousand rows for months of calls; each lies
    inside one local hour): PostgreSQL adds them up per local hour, day or week in SQL,
    SQLite folds them here as `_sqlite_buckets` folds its own."""
    slots = ToolCallSlot.objects.using(using).filter(tool_name=tool_name, calls__gt=0)
    if connections[using].vendor == "postgresql":
        summed = (slots.values(bucket=trunc("slot"))
                  .annotate(n=Sum("calls"), errors=Sum("errors")).order_by("bucket"))
        return [Bucket(row["bucket"], row["n"], row["errors"]) for row in summed]
    if _in_utc():
        return _utc_buckets(slots.annotate(at=Cast("slot", CharField())), unit,
                            Sum("calls"), Sum("errors"))
    # the stored UTC text, parsed here: Django's datetime converter per row costs more
    rows = slots.values_list(Cast("slot", CharField()), "calls", "errors").order_by("slot")
    return _folded(((datetime.fromisoformat(f"{text}+00:00"), int(n), int(errors))
                    for text, n, errors in rows), unit)


def _in_utc() -> bool:
    """Whether the current time zone is UTC, where SQLite can cut its stored UTC text to
    hours, days or weeks itself (any other zone's hours are folded in Python)."""
    return str(timezone.get_current_timezone()) in ("UTC", "Etc/UTC")


class _SqliteWeek(Func):
    """The Monday on or before a stored "YYYY-MM-DD ..." text, as "YYYY-MM-DD"."""

    template = "date(substr(%(expressions)s, 1, 10), '-6 days', 'weekday 1')"
    output_field = CharField()


def _utc_buckets(rows: QuerySet[Any], unit: str, calls: Any, errors: Any) -> list[Bucket]:
    """SQLite, in UTC: `rows` annotated with their moment as stored text (`at`) added up
    per hour ("YYYY-MM-DD HH"), day or week in SQL: a few hundred rows, no Python per
    call or slot."""
    key = (Substr("at", 1, 13) if unit == "hour" else
           Substr("at", 1, 10) if unit == "day" else _SqliteWeek("at"))
    summed = rows.values(key=key).annotate(n=calls, e=errors).order_by("key")
    suffix = ":00:00+00:00" if unit == "hour" else " 00:00:00+00:00"
    return [Bucket(datetime.fromisoformat(f"{row['key']}{suffix}"), int(row["n"]),
                   int(row["e"])) for row in summed]


def _folded(slots: Iterable[tuple[datetime, int, int]], unit: str) -> list[Bucket]:
    """Quarter hours (aware) added up per local hour, day or week (`_local_start`); the
    local start of each is made aware once (thousands of slots, a few hundred buckets)."""
    zone = timezone.get_current_timezone()
    totals: dict[datetime, list[int]] = {}
    for slot, n, errors in slots:
        found = totals.setdefault(_local_naive_start(slot, unit, zone), [0, 0])
        found[0] += n
        found[1] += errors
    return [Bucket(timezone.make_aware(naive, zone), n, errors)
            for naive, (n, errors) in sorted(totals.items())]


def _sqlite_buckets(calls: QuerySet[ToolCall], unit: str) -> list[Bucket]:
    """The buckets on SQLite: counted per quarter hour of UTC in SQL, from the stored
    text ("YYYY-MM-DD HH:MM:SS..."), with no function call per row (Django's
    TruncWeek there is a Python function: seconds for 100,000 calls), then folded into
    local hours, days or weeks here (every time zone's offset is a whole number of
    quarter hours, so a slot lies inside one local hour; a few thousand slots at most
    per 120 days). In UTC, added up per hour, day or week in SQL instead."""
    if _in_utc():
        return _utc_buckets(calls.annotate(at=Cast(_moment(), CharField())), unit,
                            Count("pk"), Count("pk", filter=Q(is_error=True)))
    rows = (calls.values(hour=Substr(_moment(), 1, 13),
                         quarter=Cast(Substr(_moment(), 15, 2), IntegerField()) / 15)
            .annotate(calls=Count("pk"), errors=Count("pk", filter=Q(is_error=True)))
            .order_by("hour", "quarter"))
    return _folded(((datetime.fromisoformat(f"{row['hour']}:{row['quarter'] * 15:02d}:00+00:00"),
                     row["calls"], row["errors"]) for row in rows), unit)


def _local_start(moment: datetime, unit: str) -> datetime:
    """The start of the local hour, day or week (Monday) holding `moment`, as Django's
    TruncHour / TruncDay / TruncWeek give it (aware, in the current time zone)."""
    zone = timezone.get_current_timezone()
    return timezone.make_aware(_local_naive_start(moment, unit, zone), zone)


def _local_naive_start(moment: datetime, unit: str, zone: tzinfo) -> datetime:
    """The same start as `_local_start`, as a naive local time."""
    local = moment.astimezone(zone).replace(tzinfo=None)
    if unit == "hour":
        return local.replace(minute=0, second=0, microsecond=0)
    naive = local.replace(hour=0, minute=0, second=0, microsecond=0)
    if unit == "week":
        naive -= timedelta(days=naive.weekday())
    return naive
