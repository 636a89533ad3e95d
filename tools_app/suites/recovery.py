"""Suite runs whose driver was lost, picked up again. A suite run's driver is a task
(`tasks.drive_suite_run`); a server or db_worker stopped mid-run takes it along, and
its suite run would stay "running" with nobody evaluating its runs or starting more.

The runs' sweeps (`runs.sweeps`) call these, registered by the app at start
(`tools_app.apps`): at a worker's start every active suite run gets a driver again (a
second driver of a suite run still alive elsewhere is harmless: starting runs locks
the suite run's row and each evaluation is claimed once); at each sweep, the suite runs
that look lost (nothing done for a lease) are advanced one step and get a driver.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db.models import Max
from django.utils import timezone

from tools_app.models import TERMINAL_STATUSES, SuiteCellRun, SuiteRun, SuiteRunStatus
from tools_app.runs.store.leases import lease_duration

from .runner import advance
from .tasks import drive_suite_run

logger = logging.getLogger(__name__)


def drive_again_at_start() -> list[str]:
    """Every active suite run: advanced one step and given a driver."""
    ids = [str(pk) for pk in SuiteRun.objects.filter(
        status=SuiteRunStatus.RUNNING).values_list("pk", flat=True)]
    _resume(ids, "at start")
    return ids


def drive_lost_suite_runs() -> list[str]:
    """The active suite runs whose driver looks lost: advanced one step, given a driver."""
    ids = lost_suite_runs()
    _resume(ids, "whose driver was lost")
    return ids


def lost_suite_runs() -> list[str]:
    """Active suite runs older than a lease where a driver would have acted by now: a
    run of theirs that ended over a lease ago is not evaluated yet, or none of their
    runs is in flight and nothing happened to them for a lease. (A live driver evaluates
    an ended run within a poll, and starts the next ones then.)"""
    cutoff = timezone.now() - lease_duration()
    lost: list[str] = []
    for suite_run in SuiteRun.objects.filter(status=SuiteRunStatus.RUNNING,
                                             created_at__lt=cutoff):
        if _looks_lost(suite_run, cutoff):
            lost.append(str(suite_run.pk))
    return lost


def _looks_lost(suite_run: SuiteRun, cutoff: datetime) -> bool:
    unevaluated = SuiteCellRun.objects.filter(cell__suite_run=suite_run,
                                              passed__isnull=True)
    if unevaluated.filter(run__status__in=TERMINAL_STATUSES,
                          run__finished_at__lt=cutoff).exists():
        return True
    if unevaluated.exclude(run__status__in=TERMINAL_STATUSES).exists():
        return False  # runs in flight: the run reaper sees to them, then the above
    latest = SuiteCellRun.objects.filter(cell__suite_run=suite_run).aggregate(
        started=Max("run__created_at"), ended=Max("run__finished_at"),
        evaluated=Max("evaluated_at"))
    recent = [t for t in latest.values() if t is not None]
    return all(t < cutoff for t in recent)


def _resume(ids: list[str], why: str) -> None:
    for suite_run_id in ids:
        suite_run = SuiteRun.objects.filter(pk=suite_run_id).first()
        if suite_run is None:
            continue
        advance(suite_run)  # progress now, even before the driver's task is picked up
        if suite_run.is_active:
            drive_suite_run.enqueue(suite_run_id)
    if ids:
        logger.warning("drove again %d suite run(s) %s", len(ids), why)


