"""Each worker process's heartbeat."""

from __future__ import annotations

from django.db import models


class WorkerHeartbeat(models.Model):
    """A `db_worker` process's last sign of life, written by its claim loop every few
    seconds (runs.store.worker_beats): `manage.py worker_status` and the admin read it
    to tell a worker that stopped taking work from one that has nothing to take."""

    worker_id = models.CharField(max_length=64, unique=True)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    concurrency = models.PositiveIntegerField()
    running = models.PositiveIntegerField(default=0, help_text="tasks in progress")
    claimed = models.PositiveBigIntegerField(default=0, help_text="tasks claimed since start")
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField(db_index=True)
    last_claimed_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"worker {self.worker_id} ({self.hostname}:{self.pid})"


class TraceExportStatus(models.Model):
    """One process's export of runs to the operator's OTLP endpoint
    (tools_app.otlp_export): spans sent, dropped because the queue was full, failed
    after the exporter's retries, and the last failure. Written by the exporter's thread
    after each batch; read by the admin and `manage.py worker_status`."""

    process = models.CharField(max_length=120, unique=True, help_text="host:pid")
    endpoint = models.CharField(max_length=300)
    sent = models.PositiveBigIntegerField(default=0)
    dropped = models.PositiveBigIntegerField(default=0, help_text="the queue was full")
    failed = models.PositiveBigIntegerField(default=0, help_text="the endpoint refused "
                                            "or could not be reached, retries included")
    last_error = models.TextField(blank=True)
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"OTLP export of {self.process}"
