"""Recovery that every kind of worker runs: at start, then periodically."""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
from collections.abc import Callable

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.db.models import Q
from django.utils import timezone

from tools_app.engine.isolation import shutdown_isolated_pools
from tools_app.models import Run
from tools_app.runs.debugger.approvals import expire_waiting_runs
from tools_app.runs.debugger.reexecution import recover_reexecutions
from tools_app.runs.loops.provider_clients import close_at_exit
from tools_app.runs.store.db import drop_broken_connections
from tools_app.runs.store.leases import (
    lease_duration,
    reap_expired_runs,
    release_this_process_runs,
    runs_to_recover_at_start,
)
from tools_app.runs.store.lifecycle import CLAIMABLE
from tools_app.runs.store.outage import DATABASE_ERRORS, Outage
from tools_app.runs.store.planner_stats import analyze_grown_tables
from tools_app.runs.tasks import enqueue_run, execute_run, uses_database_tasks

logger = logging.getLogger(__name__)
_embedded_started = threading.Event()
# The reaper's view of the database: an outage is logged once, not at every sweep.
_reaper_outage = Outage(logger, "run reaper")


Step = Callable[[], object]
_layer_steps: dict[str, list[tuple[str, Step]]] = {"start": [], "sweep": []}


def add_recovery_step(when: str, what: str, step: Step) -> None:
    """A recovery of a layer above runs (the suites' drivers), which runs cannot import:
    registered at app start, run at every worker start ("start") or sweep ("sweep")
    after the runs' own recovery, guarded like it. Registering twice adds it once."""
    steps = _layer_steps[when]
    if all(existing is not step for _, existing in steps):
        steps.append((what, step))


def _run_layer_steps(when: str) -> None:
    for what, step in _layer_steps[when]:
        _guarded(step, what)


def reap_interval() -> float:
    return max(settings.AGENTFORGE_LEASE_SECONDS / 2, 0.2)


def reap_and_enqueue() -> list[str]:
    # Runs past AGENTFORGE_APPROVAL_TIMEOUT get their waiting calls rejected (which
    # queues and enqueues them); a failure there must not stop the reaping below.
    _guarded(expire_waiting_runs, "expiring waiting runs")
    _guarded(lambda: recover_reexecutions(enqueue_pending=False),
             "recovering lost re-executions")
    ids = reap_expired_runs()
    for run_id in ids:
        enqueue_run(run_id)
    if ids:
        logger.info("re-queued %d run(s) whose worker was lost", len(ids))
    if uses_database_tasks():
        orphans = orphaned_runs()
        for run_id in orphans:
            enqueue_run(run_id)
        if orphans:
            logger.warning("enqueued again %d queued run(s) that no task would run (a "
                           "worker that claimed their tasks was lost)", len(orphans))
        ids += orphans
    _run_layer_steps("sweep")
    return ids


def orphaned_runs() -> list[str]:
    """With the database task backend: the runs waiting to be claimed (queued, or
    interrupted) that no task will ever run. A db_worker claims its tasks before their
    runs claim themselves (a claim turn takes as many tasks as it has free slots, up to
    AGENTFORGE_CLAIM_PER_TURN); one
    killed in between leaves those tasks "running" and their runs queued, and nothing
    else would pick them up. A run is orphaned when it is older than a lease and none of
    its tasks is ready or was started within the last lease. Enqueued again, it still
    runs once: the run's own claim (queued -> running, under a lease token) lets one
    task through, and the others end without running it."""
    from django_tasks_db.compat import TaskResultStatus
    from django_tasks_db.models import DBTaskResult

    cutoff = timezone.now() - lease_duration()
    waiting = {str(pk) for pk in Run.objects.filter(
        status__in=CLAIMABLE, created_at__lt=cutoff).values_list("pk", flat=True)}
    if not waiting:
        return []
    live = DBTaskResult.objects.filter(task_path=execute_run.module_path).filter(
        Q(status=TaskResultStatus.READY)
        | Q(status=TaskResultStatus.RUNNING, started_at__gte=cutoff))
    covered = {str(row["args"][0]) for row in live.values_list("args_kwargs", flat=True)
               if row.get("args")}
    return sorted(waiting - covered)


def recover_at_start() -> list[str]:
    """Embedded worker start: resume what a previous server process left behind; the
    runs of one that is gone (killed) at once, not once their leases expire."""
    ids = runs_to_recover_at_start()
    for run_id in ids:
        enqueue_run(run_id)
    recover_reexecutions(enqueue_pending=True)
    _run_layer_steps("start")
    return ids


def sweep() -> None:
    """A worker's periodic care: reap the lost runs, then keep PostgreSQL's statistics
    of the run path's tables up with their growth (runs.store.planner_stats); a failure of
    either is logged and retried at the next sweep. While the database is unavailable
    the sweeps are retried as usual, the outage logged once, its broken connections
    dropped so that the next sweep opens new ones."""
    try:
        _sweep_steps()
    except DATABASE_ERRORS as exc:
        _reaper_outage.failed(exc)
        drop_broken_connections()
        return
    _reaper_outage.succeeded()


def _sweep_steps() -> None:
    _guarded(reap_and_enqueue, "the run reaper")
    _guarded(analyze_grown_tables, "analyzing the run tables")


def _guarded(step: Callable[[], object], what: str) -> None:
    """One step of a sweep: its failure is logged and retried at the next sweep, without
    stopping the steps after it. The database gone is the caller's to handle (`sweep`),
    not one error per step."""
    try:
        step()
    except DATABASE_ERRORS:
        raise
    except Exception:
        logger.exception("%s failed; retrying at the next sweep", what)


async def reap_forever() -> None:
    while True:
        await asyncio.sleep(reap_interval())
        try:
            await sync_to_async(sweep)()
        except Exception:  # never expected (sweep logs its own): the reaper lives on
            logger.exception("run reaper sweep failed; retrying")


def start_embedded_worker() -> None:
    """Called once by the ASGI app when the in-process backend is in use."""
    if _embedded_started.is_set():
        return
    _embedded_started.set()
    from tools_app.runs.loops.process import preload_for_runs
    from tools_app.runs.loops.task_backend import submit

    preload_for_runs()

    async def recover_then_reap() -> None:
        await sync_to_async(recover_at_start)()
        await reap_forever()

    submit(recover_then_reap())
    # daphne stops its reactor on SIGTERM and the interpreter exits: hand the runs in
    # progress back then, so the next start resumes them at once.
    atexit.register(hand_back_at_exit)


def hand_back_at_exit() -> None:
    try:
        released = release_this_process_runs()
    except Exception:  # the database may be gone too; the leases expire then
        logger.exception("could not hand back the runs in progress")
        return
    finally:
        close_at_exit()
        shutdown_isolated_pools()  # isolated tools' worker processes and threads
    if released:
        logger.warning("server stopping: handed back %d run(s) in progress; they resume "
                       "at the next start", len(released))


def _give_back_connections() -> None:
    try:
        close_old_connections()
    except Exception:  # a connection that cannot even be closed: the next sweep opens one
        logger.debug("closing the reaper's connections failed", exc_info=True)


def start_reaper_thread(stop: threading.Event) -> threading.Thread:
    """For `db_worker` processes: reap in a daemon thread while tasks run in the main one."""

    def loop() -> None:
        while not stop.wait(reap_interval()):
            try:
                sweep()
            except Exception:  # never expected (sweep logs its own): the thread lives on
                logger.exception("run reaper sweep failed; retrying")
            finally:
                _give_back_connections()

    thread = threading.Thread(target=loop, name="agentforge-reaper", daemon=True)
    thread.start()
    return thread
