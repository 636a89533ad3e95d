"""`manage.py worker_status`: the db_workers' heartbeats, and whether runs wait unclaimed;
then each process's OTLP export counts (spans sent, dropped, failed), if it exports.

A health check for a supervisor or a monitor: it exits 1 when tasks have been ready for
longer than --stale-after seconds and no worker claimed any in that time (the workers
are gone, stuck, or all busy), 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from tools_app.models import TraceExportStatus, WorkerHeartbeat
from tools_app.runs.store.worker_beats import DEFAULT_STALE_AFTER, WorkerHealth, worker_health


def positive_seconds(value: str) -> float:
    seconds = float(value)
    if not seconds > 0:
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return seconds


def _age(now: datetime, moment: datetime | None) -> float | None:
    return None if moment is None else round((now - moment).total_seconds(), 1)


def _ago(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.0f} s ago"


def worker_state(health: WorkerHealth, worker: WorkerHeartbeat, now: datetime) -> str:
    if worker.stopped_at is not None:
        return "stopped"
    return "alive" if health.alive(worker, now) else "silent"


def verdict(health: WorkerHealth, now: datetime) -> str:
    if not health.stuck:
        return "OK"
    stale = f"{health.stale_after:g} s"
    alive = [w for w in health.workers if health.alive(w, now)]
    why = ("no worker is alive" if not alive
           else "every worker is busy" if all(w.running >= w.concurrency for w in alive)
           else "the workers alive are not claiming")
    return (f"STUCK: {health.waiting} run(s)/task(s) waiting, the oldest for "
            f"{health.oldest_wait or 0:.0f} s, but no worker has claimed for {stale} "
            f"({why})")


class Command(BaseCommand):
    help = ("Show each db_worker's last heartbeat and claim; exit 1 if runs are waiting "
            "but no worker has claimed for --stale-after seconds.")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--stale-after", type=positive_seconds, default=DEFAULT_STALE_AFTER,
            help="seconds without a claim (or a heartbeat) after which waiting runs, or a "
                 "worker, count as stuck (default: %(default)g)")
        parser.add_argument("--json", action="store_true", help="print JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        now = timezone.now()
        health = worker_health(options["stale_after"], now=now)
        if options["json"]:
            self.stdout.write(json.dumps(as_json(health, now), indent=2))
        else:
            self._print(health, now)
        if health.stuck:
            raise CommandError(verdict(health, now), returncode=1)

    def _print(self, health: WorkerHealth, now: datetime) -> None:
        if not health.workers:
            self.stdout.write("No db_worker has sent a heartbeat in the last day.")
        for worker in health.workers:
            self.stdout.write(
                f"{worker.worker_id}  {worker_state(health, worker, now)}  "
                f"{worker.hostname}:{worker.pid}  running {worker.running}/"
                f"{worker.concurrency}  claimed {worker.claimed}  "
                f"heartbeat {_ago(_age(now, worker.last_seen_at))}  "
                f"last claim {_ago(_age(now, worker.last_claimed_at))}")
        waiting = (f"{health.waiting} waiting, the oldest for {health.oldest_wait:.0f} s"
                   if health.oldest_wait is not None else "none waiting")
        self.stdout.write(f"Tasks ready to claim: {waiting}. Last claim by any worker: "
                          f"{_ago(health.last_claim_age)}.")
        for export in export_statuses(now):
            self.stdout.write(
                f"OTLP export {export.process} to {export.endpoint}: sent {export.sent}, "
                f"dropped {export.dropped}, failed {export.failed}"
                + (f" (last failure: {export.last_error})" if export.last_error else ""))
        if not health.stuck:
            self.stdout.write(verdict(health, now))


def export_statuses(now: datetime) -> list[TraceExportStatus]:
    """The OTLP export counts of the processes that exported in the last day."""
    return list(TraceExportStatus.objects.filter(updated_at__gte=now - timedelta(days=1))
                .order_by("-updated_at"))


def as_json(health: WorkerHealth, now: datetime) -> dict[str, Any]:
    return {
        "ok": not health.stuck,
        "verdict": verdict(health, now),
        "waiting": health.waiting,
        "oldest_wait_seconds": health.oldest_wait,
        "last_claim_seconds_ago": health.last_claim_age,
        "stale_after_seconds": health.stale_after,
        "workers": [{
            "worker_id": w.worker_id, "state": worker_state(health, w, now),
            "hostname": w.hostname, "pid": w.pid, "running": w.running,
            "concurrency": w.concurrency, "claimed": w.claimed,
            "started_at": w.started_at.isoformat(),
            "heartbeat_seconds_ago": _age(now, w.last_seen_at),
            "last_claim_seconds_ago": _age(now, w.last_claimed_at),
        } for w in health.workers],
        "otlp_export": [{
            "process": e.process, "endpoint": e.endpoint, "sent": e.sent,
            "dropped": e.dropped, "failed": e.failed, "last_error": e.last_error,
            "updated_at": e.updated_at.isoformat(),
        } for e in export_statuses(now)],
    }
