"""Received spans stored and turned into runs, in one transaction per request.

Each trace (or each `gen_ai.conversation.id` / `session.id`) of a user is one run they
own. A span already stored (same trace and span id) is not stored again; one another
user sent is refused. Every run a request touched is rebuilt from all its spans
(`assemble.plan`), its rows brought in line (`rows.sync`), and its viewers told: one
`spans_received` event per round that changed.

A run is received while its spans come in (status running, with no worker and no
lease: nothing claims or reaps it) and ends, succeeded or failed as its spans say, when
the trace's root span arrives; spans arriving later still fill in its rounds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from tools_app.ingest import assemble, rows
from tools_app.ingest import conventions as conv
from tools_app.ingest import snapshot as snapshots
from tools_app.ingest.spans import Refusal, SpanRecord
from tools_app.models import IngestedRunKey, IngestedSpan, Run, RunStatus, ToolCall
from tools_app.runs.store.eventlog import append_events, notify_after_commit
from tools_app.runs.store.lifecycle import create_queued, move_locked
from tools_app.runs.store.sanitize import clean_json, clean_text, fit_column

RECEIVED_EVENT = "spans_received"


@dataclass(frozen=True)
class Received:
    stored: int
    duplicates: int
    runs: list[str]


ATTEMPTS = 3


def receive(records: list[SpanRecord], user: User, refusal: Refusal) -> Received:
    """Store the spans for `user` and rebuild the runs they belong to. Two requests
    that start the same trace's run at once: the later one's unique key fails, and it
    is done again, finding the run the first one made."""
    for attempt in range(ATTEMPTS):
        refused = Refusal()
        try:
            received = _receive(records, user, refused)
        except IntegrityError:
            if attempt == ATTEMPTS - 1:
                raise
            continue
        refusal.count += refused.count
        refusal.reason = refusal.reason or refused.reason
        return received
    raise AssertionError("unreachable")


def _receive(records: list[SpanRecord], user: User, refusal: Refusal) -> Received:
    unique = list({(r.trace_id, r.span_id): r for r in records}.values())
    with transaction.atomic():
        known = _known(unique)
        fresh, duplicates = [], 0
        for record in unique:
            owner = known.get((record.trace_id, record.span_id))
            if owner is None:
                fresh.append(record)
            elif owner != user.pk:
                refusal.add("a span with this trace and span id was sent by another user")
            else:
                duplicates += 1
        runs = _runs_for(fresh, user)
        IngestedSpan.objects.bulk_create(
            [IngestedSpan(run_id=runs[r.trace_id], trace_id=r.trace_id, span_id=r.span_id,
                          start_ns=r.start_ns, data=clean_json(r.stored())) for r in fresh],
            ignore_conflicts=True)
        touched = sorted({str(runs[r.trace_id]) for r in fresh})
        for run_id in touched:
            _rebuild(run_id, user)
    return Received(stored=len(fresh), duplicates=duplicates, runs=touched)


def _known(records: list[SpanRecord]) -> dict[tuple[str, str], Any]:
    """Spans of these traces already stored: (trace, span) -> the run's owner id."""
    traces = {r.trace_id for r in records}
    found = IngestedSpan.objects.filter(trace_id__in=traces).values_list(
        "trace_id", "span_id", "run__created_by")
    return {(trace, span): owner for trace, span, owner in found}


def _runs_for(records: list[SpanRecord], user: User) -> dict[str, Any]:
    """Trace id -> the id of its run: the one its trace or conversation already has,
    else a new one."""
    by_trace: dict[str, list[SpanRecord]] = defaultdict(list)
    for record in records:
        by_trace[record.trace_id].append(record)
    keys = {f"trace:{t}" for t in by_trace} | {f"conversation:{c}" for c in
                                                (_conversation(s) for s in by_trace.values())
                                                if c}
    known = dict(IngestedRunKey.objects.filter(owner=user, key__in=keys)
                 .values_list("key", "run_id"))
    runs: dict[str, Any] = {}
    for trace, spans in by_trace.items():
        conversation = _conversation(spans)
        trace_key, conversation_key = f"trace:{trace}", f"conversation:{conversation}"
        run_id = known.get(trace_key) or (known.get(conversation_key) if conversation else None)
        if run_id is None:
            run_id = _new_run(user).pk
        for key in (trace_key, conversation_key) if conversation else (trace_key,):
            if key not in known:
                IngestedRunKey.objects.create(owner=user, key=fit_column(
                    IngestedRunKey, "key", key), run_id=run_id)
                known[key] = run_id
        runs[trace] = run_id
    return runs


def _conversation(spans: Iterable[SpanRecord]) -> str:
    return next((c for c in map(conv.conversation_id, spans) if c), "")


def _new_run(user: User) -> Run:
    """A run being received: running, with no worker (filled in by `_rebuild`)."""
    username = user.get_username()
    run = create_queued(created_by=user, title="OpenTelemetry trace", snapshot=snapshots.build(
        assemble.plan([]), username=username, layout=[]))
    move_locked(run, RunStatus.RUNNING, {"received": snapshots.VIA}, notify=False)
    return run


def _rebuild(run_id: str, user: User) -> None:
    run = Run.objects.select_for_update().get(pk=run_id)
    spans = [SpanRecord.from_stored(trace, span, data) for trace, span, data in
             IngestedSpan.objects.filter(run_id=run_id).values_list("trace_id", "span_id",
                                                                     "data")]
    plan = assemble.plan(spans)
    layout, touched = rows.sync(run, plan, snapshots.layout_of(run.snapshot))
    stored = snapshots.build(plan, username=user.get_username(), layout=layout)
    Run.objects.filter(pk=run.pk).update(snapshot=stored, **_run_fields(run, plan))
    events = [(RECEIVED_EVENT, {"round_index": index}) for index in sorted(touched)]
    seq, _ = append_events(str(run.pk), None, events or [(RECEIVED_EVENT, {})])
    notify_after_commit(str(run.pk), seq)
    if run.status == RunStatus.RUNNING and _has_root(spans):
        run.refresh_from_db()
        status = RunStatus.FAILED if plan.failed else RunStatus.SUCCEEDED
        error = {"error_type": plan.error_type, "message": plan.error_message} \
            if plan.failed else {}
        move_locked(run, status, error, finished_at=plan.finished_at)


def _run_fields(run: Run, plan: assemble.RunPlan) -> dict[str, Any]:
    calls = ToolCall.objects.filter(run=run)
    round_rows = [r for r in plan.rounds if r.facts]
    input_tokens = sum(r.facts.input_tokens or 0 for r in round_rows if r.facts)
    output_tokens = sum(r.facts.output_tokens or 0 for r in round_rows if r.facts)
    return {
        "title": fit_column(Run, "title", plan.title),
        "final_text": clean_text(plan.final_text),
        "error_type": fit_column(Run, "error_type", plan.error_type),
        "error_message": clean_text(plan.error_message),
        "rounds_count": len(plan.rounds), "tool_calls_count": calls.count(),
        "errors_count": calls.filter(is_error=True).count(),
        "input_tokens": input_tokens, "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
        "started_at": plan.started_at, "wall_ms": plan.wall_ms,
    }


def _has_root(spans: list[SpanRecord]) -> bool:
    return any(not span.parent_id for span in spans)
