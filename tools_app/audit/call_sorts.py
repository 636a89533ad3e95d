"""The sorts of the calls list (`GET /api/calls`, `/calls/`): when a call started, its
duration or its tool, each way, with the id after it as the keyset's tie-break (`SORTS`),
each read in order from an index of its own (`ToolCall.Meta.indexes`), and their
cursors.

A sorted page's ids are read from the sort's index for at most SORT_BUDGET seconds
(matches the index reaches late would be a scan of nearly every call: neither planner
can know), then the database sorts the matches itself, found by the filters' indexes
(`sorted_ids`). The filters and the default newest-first page are call_filters.py.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import OperationalError, connections
from django.db.models import Expression, F, Func, Q, QuerySet

from tools_app.audit.deadline import deadline, stopped
from tools_app.audit.run_filters import FilterError
from tools_app.engine import json_nesting
from tools_app.models import ToolCall
from tools_app.models.sort_keys import DurationKey, moment_key

SORT_BUDGET = 0.05  # seconds a sort's index is read for a page before the matches are sorted


@dataclass(frozen=True)
class Sort:
    """An order of the calls list: a key, its direction, and the id's direction among
    calls with the same key (the keyset's tie-break)."""

    name: str
    label: str
    key: Callable[[], Any]  # the expression (its index is the same expression's)
    descending: bool
    id_descending: bool
    # The key of a call, as the cursor keeps it (JSON) and as the query compares it.
    value: Callable[[ToolCall], Any]
    parse: Callable[[Any], Any]
    # Calls whose key is below this come after all the others (ascending durations:
    # the calls without one, keyed -1, come last rather than first).
    last_below: float | None = None


def _moment_of(call: ToolCall) -> str:
    moment = call.started_at or call.run_created_at
    return moment.isoformat() if moment else ""


def _duration_of(call: ToolCall) -> float:
    return -1.0 if call.duration_ms is None else float(call.duration_ms)


def _parsed_moment(value: Any) -> datetime:
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        raise ValueError(value)
    return moment


def _parsed_number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(value)
    return float(value)


def _parsed_text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(value)
    return value


def _tool_key() -> F:
    return F("tool_name")


SORTS = {sort.name: sort for sort in (
    Sort("started", "Started, oldest first", moment_key, False, False, _moment_of,
         _parsed_moment),
    Sort("-started", "Started, newest first", moment_key, True, True, _moment_of,
         _parsed_moment),
    Sort("duration", "Duration, shortest first", DurationKey, False, False, _duration_of,
         _parsed_number, last_below=0.0),
    Sort("-duration", "Duration, longest first", DurationKey, True, True, _duration_of,
         _parsed_number),
    Sort("tool", "Tool, A to Z", _tool_key, False, True, lambda c: c.tool_name, _parsed_text),
    Sort("-tool", "Tool, Z to A", _tool_key, True, False, lambda c: c.tool_name,
         _parsed_text),
)}


def sort_of(params: Mapping[str, str]) -> Sort | None:
    """The `sort` asked for (None: newest first, by id); a FilterError names the sorts."""
    name = params.get("sort")
    if name is None:
        return None
    if name not in SORTS:
        raise FilterError("sort", f"sort must be one of {', '.join(SORTS)}, not {name[:40]!r}")
    return SORTS[name]


class Unindexed(Func):
    """The same value, which no index provides, so the database reads the filters' own
    indexes and sorts the matches: SQLite's unary plus; on PostgreSQL a no-op of the
    value's type (text || '', a number + 0, a time + 0 seconds)."""

    template = "+(%(expressions)s)"

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        kind = self.output_field.get_internal_type()
        template = ("(%(expressions)s || '')" if kind in ("CharField", "TextField") else
                    "(%(expressions)s + interval '0 seconds')" if kind == "DateTimeField"
                    else "(%(expressions)s + 0)")
        return self.as_sql(compiler, connection, template=template, **extra)


def sorted_ids(calls: QuerySet[ToolCall], sort: Sort, after: tuple[Any, int] | None,
                count: int, *, in_memory: bool,
                first_try: QuerySet[ToolCall] | None = None) -> list[int]:
    """Up to `count` ids of `calls` in `sort`'s order, after the call keyed `after`.
    The database reads the sort's index for at most SORT_BUDGET seconds (matches the
    index reaches late, such as time-outs among the shortest calls first, would be a
    scan of nearly every call: neither planner can know), then sorts the matches itself,
    found by the filters' indexes; with `in_memory` (few matches, counted) it does that
    at once, and so when its plan already sorts (a user's own calls: their index, then
    a sort). `first_try`: the same calls written so that the sort's index is read,
    tried first within the time limit."""
    if in_memory:
        return _ids_in_order(calls, sort, after, count, plain=True)
    if first_try is not None:
        try:
            with deadline(calls.db, SORT_BUDGET):
                return _ids_in_order(first_try, sort, after, count, plain=False)
        except OperationalError as exc:
            if not stopped(exc):
                raise
    if _sorts_itself(_reads(calls, sort, after, count, plain=False)[0]):
        return _ids_in_order(calls, sort, after, count, plain=False)
    try:
        with deadline(calls.db, SORT_BUDGET):
            return _ids_in_order(calls, sort, after, count, plain=False)
    except OperationalError as exc:
        if not stopped(exc):
            raise
    return _ids_in_order(calls, sort, after, count, plain=True)


def _sorts_itself(read: QuerySet[Any]) -> bool:
    """Whether the database's plan for `read` sorts the rows it finds (SQLite: a
    temporary b-tree for the ORDER BY; PostgreSQL: a Sort node) rather than reading them
    in order from the sort's index. Planned, not run."""
    sql, params = read.query.sql_with_params()
    with connections[read.db].cursor() as cursor:
        if connections[read.db].vendor != "postgresql":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            return any("TEMP B-TREE FOR" in str(row[-1]) and "ORDER BY" in str(row[-1])
                       for row in cursor.fetchall())
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    nodes = [(json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]]
    while nodes:
        node = nodes.pop()
        if node.get("Node Type") in ("Sort", "Incremental Sort"):
            return True
        nodes.extend(node.get("Plans", []))
    return False


def _ids_in_order(calls: QuerySet[ToolCall], sort: Sort, after: tuple[Any, int] | None,
                  count: int, *, plain: bool) -> list[int]:
    first, rest = _reads(calls, sort, after, count, plain=plain)
    ids = list(first)
    if rest is not None and len(ids) < count:
        ids += list(rest[:count - len(ids)])
    return ids


def _reads(calls: QuerySet[ToolCall], sort: Sort, after: tuple[Any, int] | None, count: int,
           *, plain: bool) -> tuple[QuerySet[Any], QuerySet[Any] | None]:
    """The read of a page's ids, and the read that completes it (the calls that come
    last) or None. Each comparison is on the key and the id, with `key <= v` (or `>=`)
    first so the index is read from the cursor on; `plain`: the key and the id without
    their index."""
    key: Expression = sort.key()
    pk: Any = F("pk")
    if plain:
        key, pk = Unindexed(key), Unindexed(F("pk"))
    calls = calls.alias(sort_key=key, sort_pk=pk)
    below = sort.last_below
    if below is None:
        return _page_read(calls, sort, after, count), None
    if after is not None and after[0] < below:
        # already among the calls that come last: only they remain, by id
        return _page_read(calls.filter(sort_key__lt=below), sort, after, count), None
    return (_page_read(calls.filter(sort_key__gte=below), sort, after, count),
            _page_read(calls.filter(sort_key__lt=below), sort, None, count))


def _page_read(calls: QuerySet[ToolCall], sort: Sort, after: tuple[Any, int] | None,
               count: int) -> QuerySet[Any]:
    if after is not None:
        value, pk = after
        id_after = Q(sort_pk__lt=pk) if sort.id_descending else Q(sort_pk__gt=pk)
        if sort.descending:
            calls = calls.filter(Q(sort_key__lte=value), Q(sort_key__lt=value) | id_after)
        else:
            calls = calls.filter(Q(sort_key__gte=value), Q(sort_key__gt=value) | id_after)
    key = F("sort_key").desc() if sort.descending else F("sort_key").asc()
    tie = F("sort_pk").desc() if sort.id_descending else F("sort_pk").asc()
    return calls.order_by(key, tie).values_list("pk", flat=True)[:count]


def encode_sorted_cursor(sort: Sort, call: ToolCall) -> str:
    raw = json.dumps(["call", sort.name, sort.value(call), call.pk], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_sorted_cursor(value: str, sort: Sort) -> tuple[Any, int]:
    """The key and id of the last call of the previous page, from a cursor the same
    sort made."""
    try:
        raw = json_nesting.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
        kind, name, key, pk = raw
        if kind != "call" or name != sort.name or not isinstance(pk, int) \
                or isinstance(pk, bool) or not 0 <= pk < 2**63:
            raise ValueError(raw)
        return sort.parse(key), pk
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise FilterError("cursor", "cursor must be a next_cursor this API returned "
                          "for the same sort") from None
