"""Finding tool calls across runs: the filters of `GET /api/calls` and the `/calls/` page.

The run filters of `filters.py` (status, endpoint, user, since, until), plus what a call
is: its tool, its state (the outcome stored on the row, under the names people use), its
duration and the error handler that decided. The same strictness: an unknown filter or a
bad value is a `FilterError` naming it. Pages are keyset pages, never OFFSET scans: on the
call's id (newest first: ids grow as calls are proposed), or with `sort` on when a call
started, its duration or its tool, and the id after it (the sorts and how a sorted page
is read are call_sorts.py).
"""

from __future__ import annotations

import base64
import binascii
import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Exists, F, Max, Min, OuterRef, QuerySet
from django.db.models.expressions import OrderBy

from tools_app.audit.call_sorts import (
    Unindexed,
    decode_sorted_cursor,
    encode_sorted_cursor,
    sort_of,
    sorted_ids,
)
from tools_app.audit.run_filters import MAX_QUERY, FilterError, _limit, _moment, apply_filters
from tools_app.audit.search import search_calls
from tools_app.models import IN_PROGRESS_CALL_STATES, Run, RunStatus, ToolCall, ToolCallState
from tools_app.models.sort_keys import DurationKey

# The states a person filters on, mapped to the ToolCall.state values they cover.
CALL_STATES: dict[str, tuple[str, ...]] = {
    "ok": (ToolCallState.SUCCEEDED,),
    "arguments_error": (ToolCallState.ARGUMENTS_ERROR,),
    "execution_error": (ToolCallState.EXECUTION_ERROR,),
    "timeout": (ToolCallState.TIMED_OUT,),
    "hallucinated": (ToolCallState.HALLUCINATED,),
    "rejected": (ToolCallState.REJECTED,),
    "unknown_outcome": (ToolCallState.UNKNOWN_OUTCOME,),
    "cancelled": (ToolCallState.CANCELLED,),
    "in_progress": tuple(sorted(IN_PROGRESS_CALL_STATES)),
}
STATE_LABELS = {"ok": "OK", "arguments_error": "Arguments error",
                "execution_error": "Execution error", "timeout": "Timed out",
                "hallucinated": "Hallucinated", "rejected": "Rejected",
                "unknown_outcome": "Unknown outcome", "cancelled": "Cancelled",
                "in_progress": "In progress"}
# The reverse: a stored state -> the name filters and exports use.
STATE_NAMES = {stored: name for name, states in CALL_STATES.items() for stored in states}

CALL_EXPORT_FILTERS = ("status", "endpoint", "tool", "user", "q", "since", "until", "state",
                       "min_ms", "max_ms", "handler")
CALL_FILTERS = (*CALL_EXPORT_FILTERS, "sort", "cursor", "limit")
MAX_MS = 1e9  # about eleven days: any larger bound is a typo
# Up to this many matching calls (counted: `filtered_calls`' `matches`), SQLite sorts
# them itself rather than walk a sort's index past every call that does not match.
FEW_TO_SORT = 10_000


@dataclass(frozen=True)
class CallPage:
    calls: list[ToolCall]
    next_cursor: str | None


def matching_calls(calls: QuerySet[ToolCall], params: Mapping[str, str],
                   allowed: tuple[str, ...] = CALL_FILTERS) -> QuerySet[ToolCall]:
    """`calls` (already limited to what the caller may see) that match the filters in
    `params`, newest first; a parameter not in `allowed` is refused (`sort`, `cursor`
    and `limit` are a page's, read by `filtered_calls`)."""
    calls = apply_filters(calls, params, allowed, _FILTERS)
    _check_duration_range(params)
    return calls.order_by("-pk")


def filtered_calls(calls: QuerySet[ToolCall], params: Mapping[str, str],
                   rows: Callable[[QuerySet[ToolCall]], QuerySet[ToolCall]] = lambda c: c,
                   *, matches: int | None = None) -> CallPage:
    """One page of the matching calls, newest first or in the `sort` asked for, and the
    next page's cursor (None on the last). `rows` adds what a row shows (joins, deferred
    columns) to the query that reads the page's rows. `matches`: how many calls match,
    if the caller knows (the calls page: staff's per-tool counts), which lets SQLite
    choose how to sort them."""
    visible, calls = calls, matching_calls(calls, params)
    limit = _limit(params.get("limit"))
    sort = sort_of(params)
    cursor = params.get("cursor")
    if sort is None:
        if cursor is not None:
            calls = calls.filter(pk__lt=_decode_cursor(cursor))
        # The page's ids first, from the calls alone (a join there lets SQLite start from
        # the runs and sort every call they have: seconds for a time bound far back), then
        # its rows by id, without the filters again (a search would be read twice).
        ids = calls.order_by(_page_order(calls, params)).values("pk")[:limit + 1]
        page = list(rows(ToolCall.objects.filter(pk__in=ids)).order_by("-pk"))
        more = len(page) > limit
        page = page[:limit]
        return CallPage(page, _encode_cursor(page[-1]) if more else None)
    # A sorted page: its ids in order (read as the default page's are), then its rows.
    after = decode_sorted_cursor(cursor, sort) if cursor is not None else None
    first_try = None
    if (sort.key is DurationKey and "tool" in params and matches is not None
            and matches > FEW_TO_SORT):
        # A tool's many calls by duration: SQLite would read them by their tool's index
        # and sort them all; the filter without its index makes it read the sort's
        # index instead, where a tool of more than FEW_TO_SORT calls is not rare.
        first_try = apply_filters(visible, params, CALL_FILTERS,
                                  _FILTERS | {"tool": _tool_unindexed})
    found_ids = sorted_ids(calls, sort, after, limit + 1, first_try=first_try,
                           in_memory=matches is not None and matches <= FEW_TO_SORT)
    found = {call.pk: call for call in rows(ToolCall.objects.filter(pk__in=found_ids[:limit]))}
    page = [found[pk] for pk in found_ids[:limit] if pk in found]
    more = len(found_ids) > limit and bool(page)
    return CallPage(page, encode_sorted_cursor(sort, page[-1]) if more else None)


def _page_order(calls: QuerySet[ToolCall], params: Mapping[str, str]) -> OrderBy:
    """Newest first, by id. Ids follow time, which the planners cannot know: walking the
    id index newest first, an `until` far back rejects every newer call before the first
    match (five sixths of a million calls for the oldest sixth). So when `until` leaves
    less than half of the calls' time span before it, the order is by an expression of
    the id, which no index gives: the databases then read the bound's own index
    (`run_created_at`, under `run_owner_id` for a user), only the matching calls, and
    sort them. (The span is the first and last `run_created_at`: one index read each.)"""
    if "until" in params:
        until = _moment("until", params["until"])
        moments = ToolCall.objects.using(calls.db).filter(run_created_at__isnull=False)
        # two queries: SQLite reads MIN or MAX from the index only when it is alone
        first = moments.aggregate(first=Min("run_created_at"))["first"]
        last = moments.aggregate(last=Max("run_created_at"))["last"]
        if first is None or last is None or until <= first + (last - first) / 2:
            return (F("pk") + 0).desc()
    return F("pk").desc()


def _of_runs(calls: QuerySet[ToolCall], **lookups: Any) -> QuerySet[ToolCall]:
    """Calls whose run matches `lookups`, as a correlated EXISTS rather than a join: a
    join lets SQLite start from the matching runs and sort all their calls (a quarter of
    a million for one endpoint), where the list wants the newest calls first and stops
    after a page; EXISTS keeps the calls' own order in charge (PostgreSQL plans either
    form as a semi-join)."""
    return calls.filter(Exists(Run.objects.filter(pk=OuterRef("run_id"), **lookups)))


def _from_runs(calls: QuerySet[ToolCall], **lookups: Any) -> QuerySet[ToolCall]:
    """Calls whose run matches `lookups`, read from the matching runs (`run_id IN`): to
    count them, where no order matters, the runs' indexes find the runs and the calls'
    run index their calls, instead of a check of every call's run."""
    return calls.filter(run_id__in=Run.objects.filter(**lookups).values("pk"))


def _status(calls: QuerySet[ToolCall], value: str,
            of_runs: Callable[..., QuerySet[ToolCall]] = _of_runs) -> QuerySet[ToolCall]:
    """The status of the call's run."""
    return of_runs(calls, status__in=_names("status", value, RunStatus.values))


def _state(calls: QuerySet[ToolCall], value: str) -> QuerySet[ToolCall]:
    wanted = _names("state", value, list(CALL_STATES))
    return calls.filter(state__in=[state for name in wanted for state in CALL_STATES[name]])


def _names(field: str, value: str, allowed: list[str]) -> list[str]:
    wanted = [v.strip() for v in value.split(",") if v.strip()]
    if not wanted or any(v not in allowed for v in wanted):
        raise FilterError(field, f"{field} must be one or more of {', '.join(allowed)} "
                          f"(comma-separated), not {value!r}")
    return wanted


def _endpoint(calls: QuerySet[ToolCall], value: str,
              of_runs: Callable[..., QuerySet[ToolCall]] = _of_runs) -> QuerySet[ToolCall]:
    try:
        return of_runs(calls, endpoint_id=uuid.UUID(value))
    except ValueError:
        return of_runs(calls, endpoint__name=value)


def _tool(calls: QuerySet[ToolCall], value: str) -> QuerySet[ToolCall]:
    return calls.filter(tool_name=value)


def _tool_unindexed(calls: QuerySet[ToolCall], value: str) -> QuerySet[ToolCall]:
    """`_tool` that no index serves (SQLite: `filtered_calls`' first try)."""
    return calls.alias(tool_unindexed=Unindexed(F("tool_name"))).filter(
        tool_unindexed=value)


def _user(calls: QuerySet[ToolCall], value: str) -> QuerySet[ToolCall]:
    """Calls of the runs this user started, by the creator kept on each call
    (`run_owner_id`: its index gives them in id order, and counts them, with no check of
    each call's run)."""
    users = get_user_model().objects.using(calls.db)
    return calls.filter(run_owner_id=users.filter(username=value).values("pk")[:1])


def _text(calls: QuerySet[ToolCall], value: str) -> QuerySet[ToolCall]:
    """Words in the call's own text: its arguments, result and error (`audit.search`)."""
    text = value.strip()
    if not text or len(text) > MAX_QUERY:
        raise FilterError("q", f"q must be 1 to {MAX_QUERY} characters")
    return search_calls(calls, text)


def _since(calls: QuerySet[ToolCall], value: str) -> QuerySet[ToolCall]:
    """When the call's run was created: every call has one (a hallucinated or refused
    call never starts, so it has no start time of its own). Kept on the call itself
    (`run_created_at`, copied by triggers: `audit.triggers`), so no join is needed."""
    return calls.filter(run_created_at__gte=_moment("since", value))


def _until(calls: QuerySet[ToolCall], value: str) -> QuerySet[ToolCall]:
    return calls.filter(run_created_at__lt=_moment("until", value))


def _min_ms(calls: QuerySet[ToolCall], value: str) -> QuerySet[ToolCall]:
    return calls.filter(duration_ms__gte=_milliseconds("min_ms", value))


def _max_ms(calls: QuerySet[ToolCall], value: str) -> QuerySet[ToolCall]:
    return calls.filter(duration_ms__lte=_milliseconds("max_ms", value))


def _handler(calls: QuerySet[ToolCall], value: str) -> QuerySet[ToolCall]:
    """The error handler that decided, as stored (`-` for calls no handler decided)."""
    return calls.filter(handled_by="" if value == "-" else value)


_FILTERS: dict[str, Callable[[QuerySet[ToolCall], str], QuerySet[ToolCall]]] = {
    "status": _status, "endpoint": _endpoint, "tool": _tool, "user": _user, "q": _text,
    "since": _since, "until": _until, "state": _state, "min_ms": _min_ms, "max_ms": _max_ms,
    "handler": _handler,
}
# The same filters for a count (`counted_calls`): a run's status and endpoint read from
# the runs.
_COUNTING_FILTERS = _FILTERS | {
    "status": lambda calls, value: _status(calls, value, _from_runs),
    "endpoint": lambda calls, value: _endpoint(calls, value, _from_runs)}


def counted_calls(calls: QuerySet[ToolCall], params: Mapping[str, str]) -> QuerySet[ToolCall]:
    """The calls `matching_calls` finds, unordered and written for counting them; the
    filters of an export only (a page's `sort`, `cursor` and `limit` are refused)."""
    calls = apply_filters(calls, params, CALL_EXPORT_FILTERS, _COUNTING_FILTERS)
    _check_duration_range(params)
    return calls.order_by()


def _milliseconds(field: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (0 <= number <= MAX_MS):  # NaN fails too
        raise FilterError(field, f"{field} must be a number of milliseconds from 0 to "
                          f"{MAX_MS:.0f}, not {value[:40]!r}")
    return number


def _check_duration_range(params: Mapping[str, str]) -> None:
    low, high = params.get("min_ms"), params.get("max_ms")
    if low is not None and high is not None and float(low) > float(high):
        raise FilterError("min_ms", "min_ms must not be above max_ms")


def _encode_cursor(call: ToolCall) -> str:
    return base64.urlsafe_b64encode(f"call|{call.pk}".encode()).decode().rstrip("=")


def _decode_cursor(value: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode()
        kind, pk = raw.split("|")
        if kind != "call" or not (pk.isascii() and pk.isdigit() and len(pk) <= 19):
            raise ValueError(raw)
        return int(pk)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise FilterError("cursor", "cursor must be a next_cursor this API returned") from None
