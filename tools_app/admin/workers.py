"""The db_workers' heartbeat rows and each process's OTLP export counts, read-only:
what `manage.py worker_status` reports, for a look from the browser
(runs.store.worker_beats and otlp_export.exporter write them)."""

from __future__ import annotations

from django.contrib import admin
from django.utils import timezone

from tools_app.runs.store.worker_beats import DEFAULT_STALE_AFTER

from ..models import TraceExportStatus, WorkerHeartbeat
from .audit import ReadOnlyAdmin


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(ReadOnlyAdmin[WorkerHeartbeat]):
    list_display = ("worker_id", "hostname", "pid", "state", "running", "concurrency",
                    "claimed", "last_seen_at", "last_claimed_at", "started_at")
    list_filter = ("hostname",)
    search_fields = ("worker_id", "hostname")
    ordering = ("-last_seen_at",)

    @admin.display(description="state")
    def state(self, obj: WorkerHeartbeat) -> str:
        """"stopped", "alive" (a recent heartbeat) or "silent" (none for a while)."""
        if obj.stopped_at is not None:
            return "stopped"
        silent_for = (timezone.now() - obj.last_seen_at).total_seconds()
        return "alive" if silent_for < DEFAULT_STALE_AFTER else f"silent for {silent_for:.0f} s"


@admin.register(TraceExportStatus)
class TraceExportStatusAdmin(ReadOnlyAdmin[TraceExportStatus]):
    list_display = ("process", "endpoint", "sent", "dropped", "failed", "last_error",
                    "updated_at")
    ordering = ("-updated_at",)
