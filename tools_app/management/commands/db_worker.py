"""django-tasks-db's `db_worker`, plus what runs need: several runs at once, the reaper,
and a graceful SIGTERM that checkpoints the runs in progress instead of running them to
the end, and never exits from inside its signal handler."""

from __future__ import annotations

import argparse
import inspect
import logging
import os
import random
import signal
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from types import FrameType
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import OperationalError, close_old_connections, connections
from django.utils import timezone
from django_tasks_db.compat import TaskResultStatus, task_finished, task_started
from django_tasks_db.management.commands import db_worker
from django_tasks_db.models import DBTaskResult
from django_tasks_db.utils import exclusive_transaction, is_locked_database_exception

from tools_app.engine.isolation import shutdown_isolated_pools
from tools_app.runs.loops import task_backend
from tools_app.runs.loops.process import freeze_startup_objects, preload_for_runs
from tools_app.runs.loops.provider_clients import close_at_exit
from tools_app.runs.loops.task_wakeup import StopSignal, TaskWakeups
from tools_app.runs.store.db import drop_broken_connections
from tools_app.runs.store.leases import release_this_process_runs
from tools_app.runs.store.outage import DATABASE_ERRORS, Outage
from tools_app.runs.store.sql import rowsql
from tools_app.runs.store.worker_beats import BEAT_EVERY, WorkerBeat, forget_old_workers
from tools_app.runs.sweeps import reap_and_enqueue, start_reaper_thread
from tools_app.runs.tasks import enqueue_run
from tools_app.runs.worker import runner

logger = logging.getLogger(__name__)

# The shortest time between two claim turns of a worker woken by enqueues (seconds): a
# burst of 100 runs then costs each worker no more claim queries than polling every
# 0.05 s did (both workers wake for every enqueue), while a lone run is claimed at once.
CLAIM_TURN_GAP = 0.05


class RunWorker(db_worker.Worker):
    """django-tasks-db's worker, running up to `concurrency` tasks at once.

    A run spends most of its time waiting for a model or a tool, so one process can
    drive many: async tasks (runs, re-executions, probes) are tasks of ONE event loop
    (`task_backend`'s, as in the embedded server), their database work on its few
    lane threads, so a process holds --db-threads connections and one
    HTTP pool per endpoint however many runs it drives (a thread, an event loop and a
    connection per run exhausted PostgreSQL's connections at 100 runs). A sync task
    gets a thread of its own. The claim loop takes the next task only while a slot is
    free, so a busy worker leaves queued runs to others.

    The claim loop outlives its database: a turn that fails for want of it (a restart,
    a failover, dropped connections) drops the broken connections, waits a growing,
    jittered delay and tries again; the outage and the recovery are logged once each.
    It writes this process's heartbeat row every few seconds (runs.store.worker_beats),
    which `manage.py worker_status` reads.
    """

    concurrency = 1  # set by the command before the worker is built

    def __init__(self, **kwargs: Any) -> None:
        self._in_flight = 0
        self._count_lock = threading.Lock()
        super().__init__(**kwargs)
        self._slots = threading.BoundedSemaphore(self.concurrency)
        self._pool = (ThreadPoolExecutor(self.concurrency, thread_name_prefix="agentforge-run")
                      if self.concurrency > 1 else None)
        self._on_loop: set[Future[Any]] = set()
        self._outage = Outage(logger, f"worker {self.worker_id}")
        self._beat = WorkerBeat(self.worker_id, self.concurrency)
        self._stop: StopSignal | None = None  # while the claim loop runs

    @property
    def running_task(self) -> bool:
        return self._in_flight > 0

    @running_task.setter
    def running_task(self, value: bool) -> None:
        """django-tasks-db sets this around each task; with several tasks at once the
        number in flight is what counts, kept in run_task instead."""

    def run_task(self, db_task_result: DBTaskResult[..., Any]) -> None:
        if self._pool is None:
            self._count(+1)
            try:
                super().run_task(db_task_result)
            finally:
                self._count(-1)
            return
        self._slots.acquire()
        self._count(+1)
        if inspect.iscoroutinefunction(db_task_result.task.func):
            future = task_backend.submit(self._run_on_loop(db_task_result))
            self._on_loop.add(future)
            future.add_done_callback(self._loop_task_done)
        else:
            self._pool.submit(self._run_in_slot, db_task_result)
        # Claim the next task only once a slot is free again; meanwhile keep the
        # heartbeat up (a busy worker is alive).
        while not self._slots.acquire(timeout=BEAT_EVERY):
            self._beat_safely()
        self._slots.release()

    async def _run_on_loop(self, db_task_result: DBTaskResult[..., Any]) -> None:
        """django-tasks-db's run_task for an async task, awaited on the shared loop
        (its own calls the task through async_to_sync: a new event loop per task)."""
        task = db_task_result.task
        task_result = db_task_result.task_result
        try:
            # On the task's lane, not the claiming thread: a write there (a log line)
            # gives up the GIL to the busy loop, and the claim turn's other tasks wait
            # for it to come back (measured: the scale-out 100 runs' tail grew).
            await sync_to_async(task_started.send)(sender=type(task.get_backend()),
                                                   task_result=task_result)
            value = await task.acall(*task_result.args, **task_result.kwargs)
        except Exception as exc:
            logger.exception("task %s failed", db_task_result.id)
            await sync_to_async(_store_outcome)(db_task_result, error=exc)
            return
        await sync_to_async(_store_outcome)(db_task_result, value=value)

    def _loop_task_done(self, future: Future[Any]) -> None:
        self._on_loop.discard(future)
        self._count(-1)
        self._run_tasks += 1
        self._slots.release()

    def _run_in_slot(self, db_task_result: DBTaskResult[..., Any]) -> None:
        try:
            super().run_task(db_task_result)
        finally:
            connections.close_all()  # this thread's; the thread may sit idle a long time
            self._count(-1)
            self._slots.release()

    def _count(self, delta: int) -> None:
        with self._count_lock:
            self._in_flight += delta

    def run(self) -> None:
        self._stop = StopSignal()
        try:
            self._claim_loop()
        finally:
            if self._pool is not None:
                # After a stop signal: the runs in flight checkpoint at their next step.
                self._pool.shutdown(wait=True)
                wait(list(self._on_loop))
            self._beat_safely(stopped=True)
            self._stop.close()

    def _claim_loop(self) -> None:
        """django-tasks-db's loop (`Worker.run`: the same turns, stops and log lines),
        but each turn claims as many ready tasks as there are free slots (at most
        AGENTFORGE_CLAIM_PER_TURN, so that a burst is shared between workers), with one query
        and one UPDATE in one transaction, where django-tasks-db's takes one task a
        turn: its ORM query and its claim's save were about a sixth of a busy worker's
        CPU at 100 runs, paid again for every run of a burst
        (docs/benchmarks/product-path.md). A turn that claimed nothing is followed by a
        wait for the next enqueue, not a blind sleep (runs/loops/task_wakeup.py)."""
        wakeups = TaskWakeups(connections[DBTaskResult.objects.db], self._stop)
        try:
            self._claim_turns(wakeups)
        finally:
            wakeups.close()

    def _claim_turns(self, wakeups: TaskWakeups) -> None:
        db_worker.logger.info("Starting worker worker_id=%s queues=%s", self.worker_id,
                              ",".join(self.queue_names))
        if self.startup_delay and self.interval:
            self._sleep(random.random())  # noqa: S311 (against a thundering herd)
        # Before the first claim: a task enqueued after a turn found nothing still wakes
        # the wait that follows it (runs/loops/task_wakeup.py).
        wakeups.listen()
        while self.running:
            turn_started = time.monotonic()
            try:
                claimed = self._claim_turn()
            except DATABASE_ERRORS as exc:
                self._database_failed(exc, wakeups)
                continue
            if claimed is None:
                return
            if claimed and claimed >= settings.AGENTFORGE_CLAIM_PER_TURN:
                # A full turn: more may be ready. Leave the other workers (woken by
                # the same enqueues) their turn before this one claims again.
                self._sleep(CLAIM_TURN_GAP)
                continue
            # Until a task is enqueued (PostgreSQL), or the poll interval passes.
            if self.running and not claimed and self._idle_wait(wakeups):
                self._gather_burst(wakeups, turn_started)

    def _claim_turn(self) -> int | None:
        """One turn: claim what the free slots allow, start it, keep the heartbeat up.
        The number of tasks claimed, or None once the worker is to stop (--batch,
        --max-tasks). A database error is the caller's (`_database_failed`)."""
        claimed, retrieved = self.claim_ready(self._claimable())
        self._outage.succeeded()
        self._beat.record_claims(len(claimed))
        for db_task_result in claimed:
            self.run_task(db_task_result)
        if self.batch and retrieved and not claimed:
            db_worker.logger.info("No more tasks to run for worker_id=%s - exiting "
                                  "gracefully.", self.worker_id)
            return None
        if self.max_tasks is not None and self._run_tasks >= self.max_tasks:
            db_worker.logger.info("Run maximum tasks (%d) on worker=%s - exiting "
                                  "gracefully.", self._run_tasks, self.worker_id)
            return None
        if self._beat.due(timezone.now()):
            self._beat.write(self._in_flight)
        # Between turns, as after a request: the connection is given back (to the
        # pool, on PostgreSQL), or replaced if it broke.
        close_old_connections()
        return len(claimed)

    def _database_failed(self, exc: Exception, wakeups: TaskWakeups) -> None:
        """A turn failed for want of the database: logged at the first failure only;
        the broken connections dropped, so the next turn opens new ones; the LISTEN
        connection too (it listens again at the next wait); then a backoff."""
        delay = self._outage.failed(exc)
        drop_broken_connections()
        wakeups.close()
        self._sleep(delay)

    def _sleep(self, seconds: float) -> None:
        """Sleep, but no longer than the worker is running (a stop signal ends it: the
        handler clears `running`, then sets the stop)."""
        if self.running and self._stop is not None:
            self._stop.sleep(seconds)

    def _idle_wait(self, wakeups: TaskWakeups) -> bool:
        """Wait for an enqueue (True) or the poll interval (False), writing the
        heartbeat every BEAT_EVERY seconds meanwhile; a heartbeat that fails ends the
        wait, so that the next claim turn meets the outage and backs off."""
        deadline = time.monotonic() + self.interval
        while True:
            left = deadline - time.monotonic()
            if wakeups.wait(max(min(left, BEAT_EVERY), 0.0)):
                return True
            if left <= BEAT_EVERY or not self.running or not self._beat_safely():
                return False

    def _beat_safely(self, *, stopped: bool = False) -> bool:
        """Write the heartbeat row if it is due (or to mark the process stopped);
        False, with the broken connections dropped, if the database is unavailable.
        Nothing is written during a known outage: it would only wait for a connection."""
        if self._outage.down:
            return False
        try:
            if stopped or self._beat.due(timezone.now()):
                self._beat.write(self._in_flight, stopped=stopped)
        except DATABASE_ERRORS:
            drop_broken_connections()
            return False
        close_old_connections()
        return True

    @staticmethod
    def _gather_burst(wakeups: TaskWakeups, turn_started: float) -> None:
        """Runs started at once (a script, a rerun of many) are enqueued one by one, a
        notification each, and every worker wakes for each: claim turns at least
        CLAIM_TURN_GAP apart take them a turn for many, not a turn (and a query by
        every worker) for each. A run enqueued while the worker was idle is claimed at
        once."""
        wait_more = CLAIM_TURN_GAP - (time.monotonic() - turn_started)
        if wait_more > 0:
            time.sleep(wait_more)
            wakeups.drain()

    def _claimable(self) -> int:
        """Tasks this turn may claim: the free slots, at most AGENTFORGE_CLAIM_PER_TURN
        (a fair share of a burst: other workers take the rest), and no more than
        `--max-tasks` leaves room for with those already running."""
        with self._count_lock:
            room = min(self.concurrency - self._in_flight, settings.AGENTFORGE_CLAIM_PER_TURN)
            if self.max_tasks is not None:
                room = min(room, self.max_tasks - self._run_tasks - self._in_flight)
        return max(room, 0)

    def claim_ready(self, limit: int) -> tuple[list[DBTaskResult[..., Any]], bool]:
        """Claim up to `limit` ready tasks, in django-tasks-db's order (priority, then
        run_after, then enqueue time), as `DBTaskResult.claim` does each: running, its
        start time, this worker's id added to its worker ids. Returns them, and whether
        the database answered (a locked SQLite database is retried next turn). Any
        other database error is raised: the claim loop backs off and retries."""
        if limit < 1:
            return [], False
        tasks = DBTaskResult.objects.ready().filter(backend_name=self.backend_name)
        if not self.process_all_queues:
            tasks = tasks.filter(queue_name__in=self.queue_names)
        if self.excluded_queue_names:
            tasks = tasks.exclude(queue_name__in=self.excluded_queue_names)
        try:
            with exclusive_transaction(tasks.db):
                claimed = list(tasks.select_for_update(skip_locked=True)[:limit])
                started = timezone.now()
                for db_task_result in claimed:
                    db_task_result.status = TaskResultStatus.RUNNING
                    db_task_result.started_at = started
                    db_task_result.worker_ids = [*db_task_result.worker_ids, self.worker_id]
                # One precompiled UPDATE ... FROM (VALUES ...) for them all: the ORM's
                # bulk_update builds a CASE of one WHEN a task for each column, about
                # half a millisecond of CPU a task claimed.
                rowsql.update_many(DBTaskResult, ("id",), [
                    {"id": task.id, "status": task.status, "started_at": started,
                     "worker_ids": task.worker_ids} for task in claimed])
        except OperationalError as exc:
            if is_locked_database_exception(exc):
                return [], False
            raise
        return claimed, True

    def shutdown(self, signum: int, frame: FrameType | None) -> None:
        """SIGTERM/SIGINT: stop claiming, and ask the runs in progress to stop at their
        next step. The claim loop ends at its next turn (its wait is woken). The handler
        never exits itself (django-tasks-db's does when idle): it runs wherever the main
        thread is, and a SystemExit raised between a claim query's send and its answer
        leaves the connection busy, so closing the claim's transaction fails with an
        error instead of the clean exit. A second signal forces the exit: at once
        (os._exit, as a crash would) while runs are in progress, whose leases run out
        and other workers' reapers resume them; otherwise django-tasks-db's
        SystemExit(1). (django-tasks-db would raise SystemExit in the task instead, but
        a run is an async task: its event loop thread would wait forever.)"""
        if not self.running:
            if self.running_task:
                logger.warning("Received a second stop signal: exiting now; the runs in "
                               "progress will be resumed by other workers when their "
                               "leases expire")
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(1)
            super().shutdown(signum, frame)  # SystemExit(1)
            return
        db_worker.logger.warning("Received %s - shutting down gracefully... (press Ctrl+C "
                                 "again to force)", signal.strsignal(signum))
        self.running = False
        if self._stop is not None:
            self._stop.set()
        runner.shutdown_requested.set()
        # Also when idle: a task claimed in the turn under way starts after the signal.
        _hand_back_after(settings.AGENTFORGE_SHUTDOWN_GRACE_SECONDS)


def _store_outcome(db_task_result: DBTaskResult[..., Any], value: Any = None,
                   error: Exception | None = None) -> None:
    """A task's outcome stored and told, as django-tasks-db's run_task does after the
    task: one trip to a database lane for both (a run's end is on every run's path)."""
    if error is None:
        try:
            db_task_result.set_successful(value)
        except Exception as exc:
            logger.exception("task %s failed", db_task_result.id)
            error = exc
    if error is not None:
        db_task_result.set_failed(error)
    task_finished.send(sender=type(db_task_result.task.get_backend()),
                       task_result=db_task_result.task_result)


def _hand_back_after(grace: float) -> None:
    """If the runs in progress have not stopped within `grace` seconds (a tool that takes
    minutes, or never returns), hand them back as they are and exit: other workers resume
    them now, not once their leases expire (a call in flight is then in doubt, as after a
    crash). Before a service manager's own deadline kills the process (systemd's default
    is 90 s, Kubernetes' 30 s)."""
    if grace <= 0:
        return

    def expire() -> None:
        try:
            released = release_this_process_runs()
            for run_id in released:
                enqueue_run(run_id)  # for the other workers
            logger.warning("stop grace of %gs is over: handed back %d run(s) in progress",
                           grace, len(released))
        except Exception:
            logger.exception("could not hand back the runs in progress; their leases expire")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    timer = threading.Timer(grace, expire)
    timer.daemon = True
    timer.start()


def positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


class Command(db_worker.Command):
    help = (db_worker.Command.help + " Runs several runs at once (--concurrency), and "
            "reaps and resumes runs whose worker was lost.")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--concurrency", type=positive_int, default=None,
            help="runs executed at once by this process (default: "
                 "AGENTFORGE_WORKER_CONCURRENCY)")
        parser.add_argument(
            "--db-threads", type=positive_int, default=None,
            help="threads (so database connections) doing the database work of the runs "
                 "(default: AGENTFORGE_DB_WORKER_DB_THREADS)")

    def handle(self, *args: Any, **options: Any) -> None:
        at_once: int = options.pop("concurrency") or settings.AGENTFORGE_WORKER_CONCURRENCY
        task_backend.use_database_lanes(options.pop("db_threads")
                                        or settings.AGENTFORGE_DB_WORKER_DB_THREADS)
        preload_for_runs()
        freeze_startup_objects()
        reap_and_enqueue()
        forget_old_workers()
        stop = threading.Event()
        start_reaper_thread(stop)

        class ConfiguredRunWorker(RunWorker):
            concurrency = at_once

        # django-tasks-db's command builds its module's Worker: make that ours. (mypy
        # refuses any assignment to a class name, hence the ignores.)
        original, db_worker.Worker = db_worker.Worker, ConfiguredRunWorker  # type: ignore[misc]
        try:
            super().handle(*args, **options)
        finally:
            db_worker.Worker = original  # type: ignore[misc]
            stop.set()
            close_at_exit()  # the shared loop's provider HTTP clients
            shutdown_isolated_pools()  # isolated tools' worker processes and threads
