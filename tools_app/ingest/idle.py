"""Received runs whose spans stopped coming before their root span came: the workers'
sweeps end them as incomplete (`end_idle_runs`, registered as a recovery step by the
app), so none stays running forever.

Such a run ends `succeeded`, not failed (nothing says the agent failed: the trace is
short of its end), with error type `incomplete_trace` and a note saying why, in its
run_status event and on the run. A span arriving later still fills in its rounds
(`receive`), and the note then says so (`late_fields`).

The recording proxy's runs have no root span by design (each exchange is a round; no
exchange says the conversation is over): they end here the same way, once idle, but as
their last exchange says: failed with its error if it failed (a provider's error), else
succeeded, with no note. An exchange coming later still fills in its rounds, and the
run keeps its end: its status and error as its last exchange then said (`late_fields`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from tools_app.ingest import assemble
from tools_app.ingest import conventions as conv
from tools_app.ingest.snapshot import PROXY_VIA
from tools_app.ingest.spans import SpanRecord
from tools_app.models import IngestedSpan, Run, RunStatus
from tools_app.runs.store.lifecycle import move_locked
from tools_app.runs.store.sanitize import clean_text, fit_column

INCOMPLETE = "incomplete_trace"  # the error type of a run ended for want of spans


def end_idle_runs(now: datetime | None = None) -> list[str]:
    """End every received run still running whose last span came more than
    AGENTFORGE_OTLP_IDLE_SECONDS before `now`; returns their ids."""
    idle_seconds = settings.AGENTFORGE_OTLP_IDLE_SECONDS
    cutoff = (now or timezone.now()) - timedelta(seconds=idle_seconds)
    idle = Run.objects.filter(status=RunStatus.RUNNING, lease_owner="").annotate(
        last_span=Max("ingested_spans__received_at")).filter(last_span__lt=cutoff)
    ended = []
    for run_id in idle.values_list("pk", flat=True):
        with transaction.atomic():
            if _end(str(run_id), cutoff, idle_seconds):
                ended.append(str(run_id))
    return ended


def _end(run_id: str, cutoff: datetime, idle_seconds: int) -> bool:
    """End one run under its row lock, unless a span came (or it ended) meanwhile."""
    run = Run.objects.select_for_update().filter(pk=run_id, status=RunStatus.RUNNING,
                                                 lease_owner="").first()
    if run is None:
        return False
    last = IngestedSpan.objects.filter(run_id=run_id).aggregate(last=Max("received_at"))
    if last["last"] is None or last["last"] >= cutoff:
        return False
    plan = assemble.plan(stored_spans(run_id))
    if _proxied(run):
        _end_conversation(run, plan)
        return True
    note = incomplete_note(idle_seconds)
    move_locked(run, RunStatus.SUCCEEDED, {"incomplete": True, "note": note},
                error_type=INCOMPLETE, error_message=note,
                finished_at=plan.finished_at or timezone.now())
    return True


def _proxied(run: Run) -> bool:
    imported = run.snapshot.get("imported") if isinstance(run.snapshot, dict) else None
    return isinstance(imported, dict) and imported.get("via") == PROXY_VIA


def _end_conversation(run: Run, plan: assemble.RunPlan) -> None:
    """A proxied conversation gone idle: failed if its last exchange failed, else
    succeeded."""
    last = plan.rounds[-1] if plan.rounds else None
    event: dict[str, Any] = {"round_index": len(plan.rounds) - 1} if last else {}
    finished_at = plan.finished_at or timezone.now()
    if last is None or last.span is None or not last.span.failed:
        move_locked(run, RunStatus.SUCCEEDED, event, finished_at=finished_at)
        return
    error_type, message = conv.error_of(last.span)
    move_locked(run, RunStatus.FAILED,
                event | {"error_type": error_type or "", "message": message or ""},
                error_type=fit_column(Run, "error_type", error_type or ""),
                error_message=clean_text(message or ""), finished_at=finished_at)


def incomplete_note(idle_seconds: int) -> str:
    idle = f"{idle_seconds // 60} min" if idle_seconds % 60 == 0 else f"{idle_seconds} s"
    return f"No spans for {idle} and its root span never came: ended as incomplete."


def stored_spans(run_id: str) -> list[SpanRecord]:
    return [SpanRecord.from_stored(trace, span, data) for trace, span, data in
            IngestedSpan.objects.filter(run_id=run_id).values_list(
                "trace_id", "span_id", "data")]


def ended_incomplete(run: Run) -> bool:
    return run.status != RunStatus.RUNNING and run.error_type == INCOMPLETE


def ended_by_sweep(run: Run) -> bool:
    """Ended here: as incomplete, or a proxied conversation gone idle (which only
    this sweep ends)."""
    if run.status == RunStatus.RUNNING:
        return False
    if ended_incomplete(run):
        return True
    if hasattr(run, "via"):  # annotated by the rebuild, which reads no whole snapshot
        return bool(run.via == PROXY_VIA)
    return _proxied(run)


def late_fields(run: Run, plan: assemble.RunPlan, has_root: bool) -> dict[str, Any]:
    """A run ended here that spans reached later: it keeps its end. A conversation keeps
    its error (or none) as its last exchange then said, so its status and error agree;
    one ended as incomplete keeps its note, which now says what came (and what its root
    span said, if it came)."""
    if not ended_incomplete(run):
        return {"error_type": run.error_type, "error_message": run.error_message}
    note = (run.error_message or "").split("\n")[0]
    late = "Spans that came after it was ended are filled in"
    if has_root and plan.failed:
        late += (f"; its root span came with them and failed: {plan.error_type}"
                 f" {plan.error_message}".rstrip())
    elif has_root:
        late += "; its root span came with them"
    return {"error_type": INCOMPLETE, "error_message": clean_text(f"{note}\n{late}.")}
