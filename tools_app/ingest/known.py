"""Which of a batch's spans are stored already, and whose runs they are in.

Looked up by trace and span ids (the unique index), so a long trace's earlier spans are
not read: one condition per trace (an IN of traces with an IN of span ids would probe
every trace with every span id), a bounded number of ids per query. Then the runs'
owners by key: two index lookups rather than one join, as a planner without statistics
on the spans (a new table, PostgreSQL's autovacuum not yet round) expects a third of
the table for the IN and hashes the whole run table to join it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from django.db import connection

from tools_app.ingest.spans import SpanRecord
from tools_app.models import IngestedSpan, Run
from tools_app.runs.store.eventlog import run_key

MAX_IDS = 2_000  # trace and span ids in one lookup of the stored spans

Group = list[tuple[str, list[str]]]  # traces, each with some of its span ids


def owners(records: list[SpanRecord]) -> dict[tuple[str, str], Any]:
    """The spans of `records` stored already: (trace, span) -> their run's owner id."""
    by_trace: dict[str, set[str]] = defaultdict(set)
    for record in records:
        by_trace[record.trace_id].add(record.span_id)
    found = [row for group in _groups(by_trace) for row in _stored_of(group)]
    if not found:
        return {}
    owner_of = {run_key(run): owner for run, owner in Run.objects.filter(
        pk__in={run_key(run) for _, _, run in found}).values_list("pk", "created_by")}
    return {(trace, span): owner_of[run_key(run)] for trace, span, run in found
            if run_key(run) in owner_of}  # else deleted meanwhile, its spans with it


def _stored_of(group: Group) -> list[tuple[str, str, Any]]:
    """(trace, span, run id as the database returns it) of the stored spans among these
    traces' span ids. SQL of its own: the ORM builds a condition per trace slowly."""
    quote = connection.ops.quote_name
    table = quote(IngestedSpan._meta.db_table)
    conditions = " OR ".join(
        f"({quote('trace_id')} = %s AND {quote('span_id')} IN "
        f"({', '.join(['%s'] * len(span_ids))}))" for _, span_ids in group)
    params = [value for trace, span_ids in group for value in (trace, *span_ids)]
    columns = ", ".join(map(quote, ("trace_id", "span_id", "run_id")))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM {table} WHERE {conditions}",  # noqa: S608
                       params)  # (names and placeholders only: the ids are parameters)
        return [tuple(row) for row in cursor.fetchall()]


def _groups(by_trace: dict[str, set[str]]) -> Iterable[Group]:
    """The traces with their span ids, in groups of at most MAX_IDS ids."""
    group: Group = []
    size = 0
    for trace, span_ids in by_trace.items():
        ids = sorted(span_ids)
        for start in range(0, len(ids), MAX_IDS):
            part = ids[start:start + MAX_IDS]
            if group and size + len(part) + 1 > MAX_IDS:
                yield group
                group, size = [], 0
            group.append((trace, part))
            size += len(part) + 1
    if group:
        yield group
