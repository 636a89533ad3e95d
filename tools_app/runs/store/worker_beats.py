"""Each `db_worker` process's heartbeat row, and the health read from those rows.

A worker whose claim loop died, or that lost its database and never came back, looks
like an idle one from outside: the process is up, no error is shown, runs just stay
queued. The claim loop writes a row a process (`WorkerHeartbeat`) at most every
BEAT_EVERY seconds; `worker_health` compares it with the tasks waiting to be claimed.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Case, Count, F, Min, When
from django.db.models.functions import Greatest
from django.utils import timezone
from django_tasks_db.models import DBTaskResult, get_date_max

from tools_app.models import WorkerHeartbeat

BEAT_EVERY = 5.0  # seconds between two writes of a worker's row
# Seconds without a heartbeat (or, runs waiting, without a claim) that count as stuck.
DEFAULT_STALE_AFTER = 60.0
FORGET_AFTER = timedelta(days=7)  # rows of workers not seen for this long are deleted


@dataclass
class WorkerBeat:
    """This process's heartbeat: what its row says, and when it was last written."""

    worker_id: str
    concurrency: int
    hostname: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    started_at: datetime = field(default_factory=timezone.now)
    claimed: int = 0
    last_claimed_at: datetime | None = None
    written_at: datetime | None = None

    def record_claims(self, count: int) -> None:
        if count:
            self.claimed += count
            self.last_claimed_at = timezone.now()

    def due(self, now: datetime) -> bool:
        return (self.written_at is None
                or (now - self.written_at).total_seconds() >= BEAT_EVERY)

    def write(self, running: int, *, stopped: bool = False) -> None:
        """Upsert this process's row (one UPDATE, an INSERT the first time)."""
        now = timezone.now()
        values: dict[str, Any] = {
            "hostname": self.hostname[:255], "pid": self.pid,
            "concurrency": self.concurrency, "running": running, "claimed": self.claimed,
            "started_at": self.started_at, "last_seen_at": now,
            "last_claimed_at": self.last_claimed_at, "stopped_at": now if stopped else None,
        }
        if not WorkerHeartbeat.objects.filter(worker_id=self.worker_id).update(**values):
            WorkerHeartbeat.objects.update_or_create(worker_id=self.worker_id,
                                                     defaults=values)
        self.written_at = now


def forget_old_workers() -> int:
    """Delete the rows of workers not seen for FORGET_AFTER (a worker id is random per
    process unless given, so rows would pile up)."""
    cutoff = timezone.now() - FORGET_AFTER
    deleted, _ = WorkerHeartbeat.objects.filter(last_seen_at__lt=cutoff).delete()
    return deleted


@dataclass(frozen=True)
class WorkerHealth:
    """What `manage.py worker_status` reports."""

    workers: list[WorkerHeartbeat]
    waiting: int  # tasks ready to be claimed
    oldest_wait: float | None  # seconds the longest-waiting of them has been ready
    last_claim_age: float | None  # seconds since any worker last claimed a task
    stale_after: float

    @property
    def stuck(self) -> bool:
        """Tasks have waited longer than `stale_after` and no worker claimed any in
        that time: the workers are gone, stuck, or all busy."""
        if self.oldest_wait is None or self.oldest_wait < self.stale_after:
            return False
        return self.last_claim_age is None or self.last_claim_age >= self.stale_after

    def alive(self, worker: WorkerHeartbeat, now: datetime) -> bool:
        return (worker.stopped_at is None
                and (now - worker.last_seen_at).total_seconds() < self.stale_after)


def worker_health(stale_after: float, seen_within: timedelta = timedelta(days=1),
                  now: datetime | None = None) -> WorkerHealth:
    now = now or timezone.now()
    workers = list(WorkerHeartbeat.objects.filter(last_seen_at__gte=now - seen_within)
                   .order_by("-last_seen_at"))
    # django-tasks-db's tasks a worker would claim now (any backend, any queue); each
    # ready since it was enqueued, or since its run_after if it has one (its "none" is
    # the largest date) and that is later.
    stats = DBTaskResult.objects.ready().aggregate(count=Count("pk"), ready_since=Min(Case(
        When(run_after=get_date_max(), then=F("enqueued_at")),
        default=Greatest("enqueued_at", "run_after"))))
    count: int = stats["count"]
    ready_since: datetime | None = stats["ready_since"]
    oldest_wait = (max((now - ready_since).total_seconds(), 0.0)
                   if ready_since is not None else None)
    claims = [w.last_claimed_at for w in workers if w.last_claimed_at is not None]
    last_claim_age = (now - max(claims)).total_seconds() if claims else None
    return WorkerHealth(workers, count, oldest_wait, last_claim_age, stale_after)
