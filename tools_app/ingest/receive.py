"""Received spans stored and turned into runs, in one transaction per request.

Each trace (or each `gen_ai.conversation.id` / `session.id`) of a user is one run they
own. A span already stored (same trace and span id, `known`) is not stored again; one
another user sent is refused. Every run a request touched is rebuilt from all its spans
(`assemble.plan`; the runs, layouts, span ids and rows of all of them read in a query
each; the earlier spans taken from this process's `span_cache`, the JSON of the others
read in one more), its rows brought in line (`rows.sync`, writing only the rows that
changed, found again through the run's `layouts`; its snapshot only when what it is
built from changed), and its viewers told: one `spans_received` event per round that
changed.

A run is received while its spans come in (status running, with no worker and no
lease: nothing claims or reaps it) and ends, succeeded or failed as its spans say, when
the trace's root span arrives; spans arriving later still fill in its rounds.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from tools_app.ingest import assemble, idle, known, layouts, rows, span_cache
from tools_app.ingest import conventions as conv
from tools_app.ingest import snapshot as snapshots
from tools_app.ingest.spans import Refusal, SpanRecord
from tools_app.models import IngestedRunKey, IngestedSpan, Run, RunStatus
from tools_app.runs.store.eventlog import (
    Append,
    append_many,
    notify_many_after_commit,
    run_key,
)
from tools_app.runs.store.lifecycle import (
    ReceivedRun,
    check_move,
    close_unfinished_of,
    create_received_many,
)
from tools_app.runs.store.sanitize import Encoded, clean_json_encoded, clean_text, fit_column
from tools_app.runs.store.sql import rowsql

RECEIVED_EVENT = "spans_received"


@dataclass(frozen=True)
class Received:
    stored: int
    duplicates: int
    runs: list[str]


ATTEMPTS = 3
READ_CHUNK = 2_000  # span rows read by id in one query
_READ = ("status", "lease_token", "error_type", "error_message")
VIA = "snapshot__imported__via"


def receive(records: list[SpanRecord], user: User, refusal: Refusal, *,
            via: str = snapshots.VIA) -> Received:
    """Store the spans for `user` and rebuild the runs they belong to; `via`: how they
    came (the runs' label: OTLP, or the recording proxy's spans). Two requests
    that start the same trace's run at once: the later one's unique key fails, and it
    is done again, finding the run the first one made."""
    for attempt in range(ATTEMPTS):
        refused = Refusal()
        try:
            received = _receive(records, user, refused, via)
        except IntegrityError:
            if attempt == ATTEMPTS - 1:
                raise
            continue
        refusal.count += refused.count
        refusal.reason = refusal.reason or refused.reason
        return received
    raise AssertionError("unreachable")


def _receive(records: list[SpanRecord], user: User, refusal: Refusal, via: str,
             ) -> Received:
    unique = list({(r.trace_id, r.span_id): r for r in records}.values())
    with transaction.atomic():
        owners = known.owners(unique)
        fresh, duplicates = [], 0
        for record in unique:
            owner = owners.get((record.trace_id, record.span_id))
            if owner is None:
                fresh.append(record)
            elif owner != user.pk:
                refusal.add("a span with this trace and span id was sent by another user")
            else:
                duplicates += 1
        runs, made = _runs_for(fresh, user)
        by_run: dict[str, list[SpanRecord]] = defaultdict(list)
        for record in fresh:
            by_run[runs[record.trace_id]].append(record)
        work = _Work(user, via)
        # A run this request makes and ends is neither rebuilt nor kept: its spans'
        # JSON is not held past their INSERT.
        done = {run for run in made if _has_root(by_run[run])}
        work.stored = _store(fresh, runs, done)
        work.rebuild_all(sorted(set(by_run) - made))
        for run_id in sorted(made):
            work.create(run_id, by_run[run_id])  # it has no spans but these
        work.create_all()
        work.save_layouts()
        work.new_rows.flush()
        work.end_runs()
        work.keep_spans()
    return Received(stored=len(fresh), duplicates=duplicates, runs=sorted(by_run))


def _store(records: list[SpanRecord], runs: dict[str, str], done: set[str],
           ) -> dict[span_cache.RowKey, tuple[str, dict[str, Any]]]:
    """Store the spans; returns each one's run and JSON as stored (cleaned), by row,
    but for those of the runs `done`."""
    now = timezone.now()
    records = sorted(records, key=lambda r: (r.trace_id, r.span_id))  # as the run keys
    data: dict[tuple[str, str], Any] = {}
    column: dict[tuple[str, str], Any] = {}  # stored as its JSON text when clean already
    for r in records:
        value, text = clean_json_encoded(r.stored())
        data[r.trace_id, r.span_id] = value
        column[r.trace_id, r.span_id] = value if text is None else Encoded(value, text)
    inserted = rowsql.insert(IngestedSpan, [
        {"run": runs[r.trace_id], "trace_id": r.trace_id, "span_id": r.span_id,
         "start_ns": r.start_ns, "data": column[r.trace_id, r.span_id],
         "received_at": now} for r in records],
        conflict=("trace_id", "span_id"),
        returning=("id", "trace_id", "span_id", "received_at"))
    return {(pk, trace, span, at): (runs[trace], data[trace, span])
            for pk, trace, span, at in inserted if runs[trace] not in done}


def _runs_for(records: list[SpanRecord], user: User) -> tuple[dict[str, str], set[str]]:
    """Trace id -> the id of its run (the one its trace or conversation already has,
    else a new id, for a run made in this request), and the new ids."""
    by_trace: dict[str, list[SpanRecord]] = defaultdict(list)
    for record in records:
        by_trace[record.trace_id].append(record)
    keys = {f"trace:{t}" for t in by_trace} | {f"conversation:{c}" for c in
                                                (_conversation(s) for s in by_trace.values())
                                                if c}
    known = {key: run_key(run_id) for key, run_id in IngestedRunKey.objects.filter(
        owner=user, key__in=keys).values_list("key", "run_id")}
    runs: dict[str, str] = {}
    made: set[str] = set()
    new_keys: list[dict[str, Any]] = []
    for trace, spans in by_trace.items():
        conversation = _conversation(spans)
        trace_key, conversation_key = f"trace:{trace}", f"conversation:{conversation}"
        run_id = known.get(trace_key) or (known.get(conversation_key) if conversation else None)
        if run_id is None:
            run_id = uuid.uuid4().hex
            made.add(run_id)
        for key in (trace_key, conversation_key) if conversation else (trace_key,):
            if key not in known:
                new_keys.append({"owner": user.pk, "run": run_id,
                                 "key": fit_column(IngestedRunKey, "key", key)})
                known[key] = run_id
        runs[trace] = run_id
    # In one order for every request: two requests making runs of the same traces wait
    # on each other's keys (the unique index) in that order, never in a cycle.
    rowsql.insert(IngestedRunKey, sorted(new_keys, key=lambda row: str(row["key"])))
    return runs, made


def _conversation(spans: Iterable[SpanRecord]) -> str:
    return next((c for c in map(conv.conversation_id, spans) if c), "")


class _Work:
    """What a request does to its runs: made or rebuilt, their new rows in one batch,
    then the ends of those whose root span came."""

    def __init__(self, user: User, via: str) -> None:
        self.user = user
        self.via = via
        self.username = user.get_username()
        self.registered = snapshots.Registered()
        self.new_rows = rows.NewRows()
        self.ending: dict[str, RunStatus] = {}  # run id -> the status it ends with
        self.appends: list[Append] = []  # the events of the rebuilt runs that go on
        self.made: list[ReceivedRun] = []  # the runs this request makes
        self.notices: dict[str, int] = {}  # run id -> the last seq viewers are told of
        # This request's spans by row: their run and JSON as stored, and as records
        # once a rebuild took them; the earlier spans it read back, with their runs.
        self.stored: dict[span_cache.RowKey, tuple[str, dict[str, Any]]] = {}
        self.records: dict[span_cache.RowKey, SpanRecord] = {}
        self.read: list[tuple[span_cache.RowKey, str, SpanRecord]] = []
        self.open: set[str] = set()  # runs still receiving after this request
        self.layouts: list[dict[str, Any]] = []  # the layout rows that changed

    def keep_spans(self) -> None:
        """Once the request commits, the spans of the runs still receiving (this
        request's and those it read) kept for their later rebuilds in this process, and
        those of the runs it ended forgotten: such a run is rebuilt again only by a
        late span."""
        kept = [(row, run, self._record(row)) for row, (run, _) in self.stored.items()
                if run in self.open]
        kept += [(row, run, record) for row, run, record in self.read if run in self.open]
        ended = list(self.ending)

        def keep() -> None:
            span_cache.spans.put_many(kept)
            span_cache.spans.drop_runs(ended)

        if kept or ended:
            transaction.on_commit(keep)

    def _record(self, row: span_cache.RowKey) -> SpanRecord:
        """One of this request's spans as stored."""
        record = self.records.get(row)
        if record is None:
            record = self.records[row] = SpanRecord.from_stored(row[1], row[2],
                                                                self.stored[row][1])
        return record

    def create(self, run_id: str, spans: list[SpanRecord]) -> None:
        """A run made by this request (stored with the others, by `create_all`)."""
        plan = assemble.plan(spans)
        layout, touched = rows.sync(run_id, plan, [], self.new_rows)
        self._layout(run_id, layout, self._inputs(plan))
        ended = _has_root(spans)
        status = (RunStatus.FAILED if plan.failed else RunStatus.SUCCEEDED) if ended \
            else RunStatus.RUNNING
        if not ended:
            self.open.add(run_id)
        self.made.append(ReceivedRun(status, _events(touched), {
            "id": uuid.UUID(run_id), "created_by": self.user,
            "snapshot": self._snapshot(plan),
            **_run_fields(plan) | ({"finished_at": plan.finished_at} if ended else {})}))

    def create_all(self) -> None:
        for run in create_received_many(self.made):
            self.notices[str(run.pk)] = run.last_seq

    def save_layouts(self) -> None:
        """The changed layouts written (after the runs this request makes are in)."""
        layouts.save(self.layouts)

    def rebuild_all(self, run_ids: list[str]) -> None:
        """Rebuild these runs from all their spans: the runs (locked, in id order), their
        spans and their rows read in one query each, for them all."""
        if not run_ids:
            return
        # The fields read here and by `end_runs` (not the snapshot: a rebuild writes it
        # or leaves it). Locked before their layouts, spans and rows are read: a request
        # of another process rebuilding the same runs has then committed, and the reads
        # below see what it wrote.
        runs = list(Run.objects.select_for_update().filter(pk__in=run_ids).order_by(
            "pk").only(*_READ).annotate(via=F(VIA)))
        kept = layouts.of(run_ids)
        spans = self._spans_of(run_ids)
        existing = rows.Existing.of(run_ids)
        for run in runs:
            self.rebuild(run, spans[run_key(run.pk)], existing, kept[run_key(run.pk)])
        if self.appends:
            appended = append_many(self.appends, expect={})
            for append, (seq, _) in zip(self.appends, appended, strict=True):
                self.notices[str(uuid.UUID(append.run_id))] = seq
        if self.ending:  # the ends' token bumps: their appends were fenced on the token
            rowsql.update(Run, {"id": rowsql.In(tuple(self.ending))},
                          {"lease_token": rowsql.Add(1)})

    def _spans_of(self, run_ids: list[str]) -> dict[str, list[SpanRecord]]:
        """Each run's spans (by run key): this request's in hand, earlier ones from this
        process's cache (`span_cache`), the others' rows read and parsed, and kept in
        the cache once the request commits."""
        spans: dict[str, list[SpanRecord]] = defaultdict(list)
        missing: dict[int, tuple[str, span_cache.RowKey]] = {}
        for run_id, pk, trace, span, at in rowsql.select(
                IngestedSpan, ("run", "id", "trace_id", "span_id", "received_at"),
                {"run": rowsql.In(tuple(run_ids))}):
            row = (pk, trace, span, at)
            record = self._record(row) if row in self.stored else span_cache.spans.get(row)
            if record is None:
                missing[row[0]] = (run_key(run_id), row)
            else:
                spans[run_key(run_id)].append(record)
        ids = list(missing)
        for start in range(0, len(ids), READ_CHUNK):
            for pk, data in IngestedSpan.objects.filter(
                    pk__in=ids[start:start + READ_CHUNK]).values_list("id", "data"):
                run, row = missing[pk]
                record = SpanRecord.from_stored(row[1], row[2], data)
                spans[run].append(record)
                self.read.append((row, run, record))
        return spans

    def rebuild(self, run: Run, spans: list[SpanRecord], existing: rows.Existing,
                old: layouts.Stored) -> None:
        run_id = run_key(run.pk)
        plan = assemble.plan(spans)
        layout, touched = rows.sync(run_id, plan, old.entries, self.new_rows, existing)
        inputs = self._inputs(plan)
        # "" (a registered tool named): its snapshot is built again every time.
        snapshot_changed = not inputs or inputs != old.snapshot_digest
        if not old.has_row or layout != old.entries or snapshot_changed:
            self._layout(run_id, layout, inputs)
        events = _events(touched) or [(RECEIVED_EVENT, {})]
        fields = _run_fields(plan)
        if idle.ended_by_sweep(run):  # these spans came after it was ended
            events = [(kind, payload | {"late": True}) for kind, payload in events]
            fields |= idle.late_fields(run, plan, _has_root(spans))
        changes: dict[str, Any] = dict(fields)
        if snapshot_changed:
            changes["snapshot"] = self._snapshot(plan)
        if run.status == RunStatus.RUNNING and not _has_root(spans):
            self.open.add(run_id)
        if run.status == RunStatus.RUNNING and _has_root(spans):
            changes |= self._end(run_id, plan, events)
        # Appended with the other runs' (`rebuild_all`), fenced by its token (read under
        # the run's lock, so it holds).
        self.appends.append(Append(run_id, run.lease_token, events, changes))

    def _end(self, run_id: str, plan: assemble.RunPlan,
             events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        """The root span came: the run's end goes with its rebuild (the move
        `lifecycle.move_locked` makes: a run_status event after its others, no lease,
        the token bumped by `rebuild_all` once the appends are in, for all the runs
        ending; what it left in flight closed by `end_runs`). Returns the run's
        changes."""
        status = RunStatus.FAILED if plan.failed else RunStatus.SUCCEEDED
        check_move(RunStatus.RUNNING, status)
        error = {"error_type": plan.error_type, "message": plan.error_message} \
            if plan.failed else {}
        last_round = {"round_index": len(plan.rounds) - 1} if plan.rounds else {}
        events.append(("run_status", {"status": status, **error, **last_round}))
        self.ending[run_id] = status
        return {"status": status, "finished_at": plan.finished_at, "lease_owner": "",
                "lease_expires_at": None}

    def end_runs(self) -> None:
        """After the rows are in: what the ended runs left in flight closed (nothing, as
        received rows are never proposed or started, but as every end does), then the
        runs' viewers told."""
        if self.ending:
            close_unfinished_of({run_id: (status, {}) for run_id, status in
                                 self.ending.items()})
        notify_many_after_commit(self.notices)

    def _snapshot(self, plan: assemble.RunPlan) -> dict[str, Any]:
        return snapshots.build(plan, username=self.username, registered=self.registered,
                               via=self.via)

    def _inputs(self, plan: assemble.RunPlan) -> str:
        return snapshots.inputs_digest(plan, username=self.username,
                                       registered=self.registered, via=self.via)

    def _layout(self, run_id: str, layout: rows.Layout, inputs: str) -> None:
        self.layouts.append({"run": run_id, "rows": layout, "snapshot_digest": inputs})


def _events(touched: set[int]) -> list[tuple[str, dict[str, Any]]]:
    return [(RECEIVED_EVENT, {"round_index": index}) for index in sorted(touched)]


def _run_fields(plan: assemble.RunPlan) -> dict[str, Any]:
    calls = [c for r in plan.rounds for c in r.calls]
    facts = [r.facts for r in plan.rounds if r.facts]
    input_tokens = sum(f.input_tokens or 0 for f in facts)
    output_tokens = sum(f.output_tokens or 0 for f in facts)
    return {
        "title": fit_column(Run, "title", plan.title),
        "final_text": clean_text(plan.final_text),
        "error_type": fit_column(Run, "error_type", plan.error_type),
        "error_message": clean_text(plan.error_message),
        "rounds_count": len(plan.rounds), "tool_calls_count": len(calls),
        "errors_count": sum(c.is_error for c in calls),
        "input_tokens": input_tokens, "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
        "started_at": plan.started_at, "wall_ms": plan.wall_ms,
    }


def _has_root(spans: list[SpanRecord]) -> bool:
    return any(span.root for span in spans)
