"""Finding runs: the filters of `GET /api/runs`, checked one by one (an unknown filter or
a bad value names itself), and keyset pagination (no OFFSET scans): newest first, on
(created_at, id), or with `sort` by when the run was created, its duration or its
errors, and the id after it (`SORTS`), each read in order from an index
(`Run.Meta.indexes`)."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.models import Exists, Expression, F, Func, Model, OuterRef, Q, QuerySet, TextField
from django.db.models.functions import Cast
from django.utils.dateparse import parse_datetime
from django.utils.timezone import is_naive, make_aware

from tools_app.audit.search import search_runs
from tools_app.engine import json_nesting
from tools_app.models import ErrorPolicy, Run, RunStatus, ToolCall
from tools_app.models.sort_keys import DurationKey

EXPORT_FILTERS = ("status", "endpoint", "tool", "user", "q", "since", "until", "tool_version",
                  "policy", "error_type", "has_errors", "waiting_for_me", "loop_detected", "tryit")
RUN_FILTERS = (*EXPORT_FILTERS, "sort", "cursor", "limit")
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
MAX_QUERY = 200
# Up to this many matching runs (counted: `filtered_runs`' `matches`), SQLite sorts them
# itself rather than walk a sort's index past every run that does not match.
FEW_TO_SORT = 10_000


class FilterError(ValueError):
    """A filter the caller cannot use; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field

    @property
    def sentence(self) -> str:
        """The message, naming its field once (most messages begin with it)."""
        text = str(self)
        return text if text.startswith(self.field) else f"{self.field}: {text}"


@dataclass(frozen=True)
class Page:
    runs: list[Run]
    next_cursor: str | None


def apply_filters[M: Model](rows: QuerySet[M], params: Mapping[str, str],
                            allowed: tuple[str, ...],
                            filters: Mapping[str, Callable[[QuerySet[M], str], QuerySet[M]]],
                            ) -> QuerySet[M]:
    """`rows` narrowed by each filter given in `params`; a parameter not in `allowed` is
    refused, naming itself and the filters there are (shared by runs and calls)."""
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise FilterError(unknown[0], f"unknown filter {', '.join(unknown)}: the filters are "
                          f"{', '.join(allowed)}")
    for name, apply in filters.items():
        value = params.get(name)
        if value is not None:
            rows = apply(rows, value)
    return rows


@dataclass(frozen=True)
class Sort:
    """An order of the runs list: a key and its direction (the id, the keyset's
    tie-break, goes the same way)."""

    name: str
    label: str
    key: Callable[[], Any]  # the expression (its index is the same expression's)
    descending: bool
    # The key of a run, as the cursor keeps it (JSON) and as the query compares it.
    value: Callable[[Run], Any]
    parse: Callable[[Any], Any]
    # Runs whose key is below this come after all the others (ascending durations: the
    # runs without one, keyed -1, come last rather than first).
    last_below: float | None = None


def _parsed_moment(value: Any) -> datetime:
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        raise ValueError(value)
    return moment


def _parsed_number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(value)
    return float(value)


def _created_key() -> F:
    return F("created_at")


def _errors_key() -> F:
    return F("errors_count")


def _duration_key() -> DurationKey:
    return DurationKey("wall_ms")


def _duration_of(run: Run) -> float:
    return -1.0 if run.wall_ms is None else float(run.wall_ms)


# "-started" is the default order (newest first), whose pages keep their own cursor.
NEWEST_FIRST = "-started"
SORTS = {sort.name: sort for sort in (
    Sort("-started", "Started, newest first", _created_key, True,
         lambda r: r.created_at.isoformat(), _parsed_moment),
    Sort("started", "Started, oldest first", _created_key, False,
         lambda r: r.created_at.isoformat(), _parsed_moment),
    Sort("-duration", "Duration, longest first", _duration_key, True, _duration_of,
         _parsed_number),
    Sort("duration", "Duration, shortest first", _duration_key, False, _duration_of,
         _parsed_number, last_below=0.0),
    Sort("-errors", "Errors, most first", _errors_key, True, lambda r: r.errors_count,
         _parsed_number),
    Sort("errors", "Errors, fewest first", _errors_key, False, lambda r: r.errors_count,
         _parsed_number),
)}


def matching_runs(runs: QuerySet[Run], params: Mapping[str, str],
                  allowed: tuple[str, ...] = RUN_FILTERS) -> QuerySet[Run]:
    """`runs` (already limited to what the caller may see) that match the filters in
    `params`, newest first; a parameter not in `allowed` is refused (`sort`, `cursor`
    and `limit` are a page's, read by `filtered_runs`)."""
    return apply_filters(runs, params, allowed, _FILTERS).order_by("-created_at", "-pk")


def sort_of(params: Mapping[str, str]) -> Sort:
    """The `sort` asked for (newest first when none); a FilterError names the sorts."""
    name = params.get("sort", NEWEST_FIRST)
    if name not in SORTS:
        raise FilterError("sort", f"sort must be one of {', '.join(SORTS)}, not {name[:40]!r}")
    return SORTS[name]


def filtered_runs(runs: QuerySet[Run], params: Mapping[str, str], *,
                  matched: QuerySet[Run] | None = None, matches: int | None = None) -> Page:
    """One page of the matching runs, newest first or in the `sort` asked for, and the
    cursor of the next page (None on the last). `matched`: `matching_runs(runs, params)`
    if the caller has it already (a search is then not looked up twice); `matches`: how
    many runs match, if the caller counted them (`run_totals`), which lets SQLite sort
    a few itself."""
    visible = runs
    runs = matching_runs(runs, params) if matched is None else matched
    limit = _limit(params.get("limit"))
    sort = sort_of(params)
    if sort.name != NEWEST_FIRST:
        return _sorted_page(visible, runs, sort, params.get("cursor"), limit,
                            in_memory=matches is not None and matches <= FEW_TO_SORT)
    if "cursor" in params:
        created, pk = _decode_cursor(params["cursor"])
        # The bound on created_at alone first: an OR of the two cases only would keep
        # SQLite from seeking the index to the cursor (it read every newer run).
        runs = runs.filter(Q(created_at__lte=created),
                           Q(created_at__lt=created) | Q(pk__lt=pk))
    page = list(runs[:limit + 1])
    more = len(page) > limit
    page = page[:limit]
    return Page(page, _encode_cursor(page[-1]) if more else None)


def _sorted_page(visible: QuerySet[Run], runs: QuerySet[Run], sort: Sort,
                 cursor: str | None, limit: int, *, in_memory: bool) -> Page:
    """A sorted page: its ids in order, then their rows as `visible` gives them (its
    joins), without the filters again (a search would be read twice)."""
    after = _decode_sorted_cursor(cursor, sort) if cursor is not None else None
    found_ids = _sorted_ids(runs, sort, after, limit + 1, in_memory=in_memory)
    found = {run.pk: run for run in visible.filter(pk__in=found_ids[:limit]).order_by()}
    page = [found[pk] for pk in found_ids[:limit] if pk in found]
    more = len(found_ids) > limit and bool(page)
    return Page(page, _encode_sorted_cursor(sort, page[-1]) if more else None)


class _Unindexed(Func):
    """SQLite's unary plus: the same value, which no index provides (SQLite then reads
    the filters' own indexes and sorts the matches)."""

    template = "+(%(expressions)s)"


def _sorted_ids(runs: QuerySet[Run], sort: Sort, after: tuple[Any, uuid.UUID] | None,
                count: int, *, in_memory: bool) -> list[uuid.UUID]:
    """Up to `count` ids of `runs` in `sort`'s order, after the run keyed `after`. Each
    comparison is on the key and the id, with `key <= v` (or `>=`) first so the index is
    read from the cursor on. `in_memory` (SQLite, few matches): the key and the id
    without their index, so the filters' indexes find the matches."""
    key: Expression = sort.key()
    pk: Any = F("pk")
    if in_memory and connections[runs.db].vendor == "sqlite":
        key, pk = _Unindexed(key), _Unindexed(F("pk"))
    runs = runs.alias(sort_key=key, sort_pk=pk)
    below = sort.last_below
    if below is not None and after is not None and after[0] < below:
        # already among the runs that come last: only they remain, in their order
        return _page_ids(runs.filter(sort_key__lt=below), sort, after, count)
    first = runs.filter(sort_key__gte=below) if below is not None else runs
    ids = _page_ids(first, sort, after, count)
    if below is not None and len(ids) < count:
        ids += _page_ids(runs.filter(sort_key__lt=below), sort, None, count - len(ids))
    return ids


def _page_ids(runs: QuerySet[Run], sort: Sort, after: tuple[Any, uuid.UUID] | None,
              count: int) -> list[uuid.UUID]:
    if after is not None:
        value, pk = after
        if sort.descending:
            runs = runs.filter(Q(sort_key__lte=value), Q(sort_key__lt=value) | Q(sort_pk__lt=pk))
        else:
            runs = runs.filter(Q(sort_key__gte=value), Q(sort_key__gt=value) | Q(sort_pk__gt=pk))
    order = (F("sort_key").desc(), F("sort_pk").desc()) if sort.descending else \
        (F("sort_key").asc(), F("sort_pk").asc())
    return list(runs.order_by(*order).values_list("pk", flat=True)[:count])


def _status(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    wanted = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in wanted if v not in RunStatus.values]
    if bad or not wanted:
        raise FilterError("status", f"status must be one or more of "
                          f"{', '.join(RunStatus.values)} (comma-separated), not {value!r}")
    return runs.filter(status__in=wanted)


def _endpoint(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    try:
        return runs.filter(endpoint_id=uuid.UUID(value))
    except ValueError:
        return runs.filter(endpoint__name=value)


def _tool(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    """Runs in which the model called this tool."""
    return runs.filter(Exists(ToolCall.objects.filter(run_id=OuterRef("pk"), tool_name=value)))


def _user(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    return runs.filter(created_by__username=value)


def _text(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    """Words in the user's message (the title), the final answer, the error, or in any
    tool call's arguments, result or error (`audit.search`: the databases' full-text
    indexes)."""
    text = value.strip()
    if not text or len(text) > MAX_QUERY:
        raise FilterError("q", f"q must be 1 to {MAX_QUERY} characters")
    return search_runs(runs, text)


def _since(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    return runs.filter(created_at__gte=_moment("since", value))


def _until(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    return runs.filter(created_at__lt=_moment("until", value))


def _tool_version(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    """Runs whose snapshot froze a tool with this version hash. Matched in the stored JSON
    text, key and value together: both databases write `"version_hash": "<hash>"`, and
    the same characters inside any string of the snapshot (a message quoting them) are
    stored escaped (\\"), so they never match."""
    if not (len(value) == 64 and all(c in "0123456789abcdef" for c in value)):
        raise FilterError("tool_version", "tool_version must be a tool version hash "
                          "(64 lowercase hex digits)")
    as_text = Cast("snapshot", TextField())
    return runs.alias(snapshot_text=as_text).filter(
        snapshot_text__contains=f'"version_hash": "{value}"')


POLICY_NAME_MAX = ErrorPolicy._meta.get_field("name").max_length or 100
ERROR_TYPE_MAX = Run._meta.get_field("error_type").max_length or 200
BOOLEANS = {"true": True, "false": False}


def _policy(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    """The error policy's name as frozen in the run's snapshot: a policy renamed or
    deleted since still finds the runs that used it under the name they used."""
    name = _bounded("policy", value, POLICY_NAME_MAX, "an error policy's name")
    return runs.filter(snapshot__policy__name=name)


def _error_type(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    """The run's error type, or any of its calls' (exactly, as stored: `ZeroDivisionError`,
    `ToolArgumentsError`, ...)."""
    kind = _bounded("error_type", value, ERROR_TYPE_MAX, "an error type")
    in_calls = ToolCall.objects.filter(run_id=OuterRef("pk"), error_type=kind)
    return runs.filter(Q(error_type=kind) | Exists(in_calls))


def _has_errors(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    """true: the run failed or one of its calls ended in an error; false: neither."""
    if value not in BOOLEANS:
        raise FilterError("has_errors", f"has_errors must be true or false, not {value[:40]!r}")
    erring = Q(status=RunStatus.FAILED) | Exists(
        ToolCall.objects.filter(run_id=OuterRef("pk"), is_error=True))
    return runs.filter(erring if BOOLEANS[value] else ~erring)


def _waiting_for_me(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    """true: the runs waiting for a decision the caller may take (an approval or a
    breakpoint: status waiting), the navigation's "Waiting for you"; false: the others.
    `runs` are those the caller may see, and whoever may see a run may decide on it
    (its owner; staff: any run). Every such run, of every kind: a list that hides
    some kinds by default must not hide these from this filter."""
    if value not in BOOLEANS:
        raise FilterError("waiting_for_me",
                          f"waiting_for_me must be true or false, not {value[:40]!r}")
    waiting = Q(status=RunStatus.WAITING)
    return runs.filter(waiting if BOOLEANS[value] else ~waiting)


def _loop_detected(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    """true: runs in which loop health flagged a round (a repeated call, ping-pong, no
    progress), whatever it did then; false: the others. Read from the run's count, which
    the recorder keeps with the events (a partial index holds the flagged runs)."""
    if value not in BOOLEANS:
        raise FilterError("loop_detected",
                          f"loop_detected must be true or false, not {value[:40]!r}")
    if BOOLEANS[value]:
        return runs.filter(loop_detections__gt=0)
    return runs.filter(loop_detections=0)


def _tryit(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    """Try-it runs (one call of a tool from its page, and reruns of one): true only
    them, false none of them, any both. The API lists every run unless asked; the runs
    page hides them unless asked (web/pages/runs/run_list.run_list)."""
    if value not in TRYIT_VALUES:
        raise FilterError("tryit", f"tryit must be one of {', '.join(TRYIT_VALUES)}, "
                          f"not {value[:40]!r}")
    return of_kind(runs, value)


TRYIT_VALUES = ("any", "true", "false")


def of_kind(runs: QuerySet[Run], tryit: str) -> QuerySet[Run]:
    """`runs` narrowed by a checked `tryit` value (any: all of them)."""
    if tryit == "any":
        return runs
    if BOOLEANS[tryit]:
        return runs.filter(is_tryit=True)
    # Not among the try-it runs (few: a partial index holds them), rather than a test of
    # each run's column: a list then reads its own index, with the ids alone.
    return runs.exclude(pk__in=tryit_ids(runs.db))


def tryit_ids(using: str) -> QuerySet[Run, Any]:
    """The try-it runs' ids, as a subquery read from their partial index."""
    return Run.objects.using(using).filter(is_tryit=True).values("pk")


def _bounded(field: str, value: str, limit: int, what: str) -> str:
    text = value.strip()
    if not text or len(text) > limit:
        raise FilterError(field, f"{field} must be {what}: 1 to {limit} characters")
    return text


_FILTERS = {"status": _status, "endpoint": _endpoint, "tool": _tool, "user": _user,
            "q": _text, "since": _since, "until": _until, "tool_version": _tool_version,
            "policy": _policy, "error_type": _error_type, "has_errors": _has_errors,
            "waiting_for_me": _waiting_for_me, "loop_detected": _loop_detected,
            "tryit": _tryit}


def _moment(field: str, value: str) -> datetime:
    try:
        moment = parse_datetime(value)
    except ValueError:
        moment = None
    if moment is None:
        raise FilterError(field, f"{field} must be an ISO 8601 date and time, like "
                          "2026-12-01T09:30:00Z")
    return make_aware(moment) if is_naive(moment) else moment


def _limit(value: str | None) -> int:
    if value is None:
        return DEFAULT_LIMIT
    if not (value.isascii() and value.isdigit() and len(value) <= 3
            and 1 <= int(value) <= MAX_LIMIT):
        raise FilterError("limit", f"limit must be a whole number from 1 to {MAX_LIMIT}")
    return int(value)


def _encode_cursor(run: Run) -> str:
    raw = f"{run.created_at.isoformat()}|{run.pk}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _encode_sorted_cursor(sort: Sort, run: Run) -> str:
    raw = json.dumps(["run", sort.name, sort.value(run), str(run.pk)], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_sorted_cursor(value: str, sort: Sort) -> tuple[Any, uuid.UUID]:
    """The key and id of the last run of the previous page, from a cursor the same sort
    made."""
    try:
        raw = json_nesting.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
        kind, name, key, pk = raw
        if kind != "run" or name != sort.name or not isinstance(pk, str):
            raise ValueError(raw)
        return sort.parse(key), uuid.UUID(pk)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise FilterError("cursor", "cursor must be a next_cursor this API returned "
                          "for the same sort") from None


def _decode_cursor(value: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode()
        created, pk = raw.split("|")
        moment = parse_datetime(created)
        if moment is None:
            raise ValueError(created)
        return moment, uuid.UUID(pk)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise FilterError("cursor", "cursor must be a next_cursor this API returned") from None
