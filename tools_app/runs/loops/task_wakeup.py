"""Waking the db_workers when a task is enqueued, instead of making it wait for their poll.

django-tasks-db's workers poll their table every `--interval` seconds (1 s by default),
so on the scale-out configuration a run started with POST /api/runs sat queued for half
a second on average before a worker even looked, and a worker polling more often to cut
that burned CPU while idle (at `--interval 0.05`, tens of ms of CPU a second per idle
worker, and as many queries a second on PostgreSQL).

On PostgreSQL, enqueueing a task also sends `NOTIFY` on one channel
(`WakingDatabaseBackend`), and each db_worker LISTENs on it between its claim turns
(`TaskWakeups.wait`): the poll interval becomes a fallback (a task deferred with
`run_after`, a notification lost with a dropped connection), not the latency of every
run. The notification is sent after the enqueue's transaction commits, once the task's
row is visible, never if it rolls back, and once for all the tasks a transaction
enqueued (`transaction.on_commit`), in a statement of its own: a transaction that
NOTIFYs takes a lock of the whole database cluster at its commit and keeps it through
its WAL flush, so 100 runs started at once, each NOTIFYing in its own transaction,
committed one after another (measured: docs/benchmarks/product-path.md); sent alone, the
notification's transaction writes no WAL and holds that lock for a moment. A process
that dies between the commit and the notification leaves the task to the poll.
A worker LISTENs before its first claim, so a task enqueued between a claim turn and
the wait that follows still wakes it (PostgreSQL keeps the notification for the
listening connection until it is read). On other databases (SQLite has no NOTIFY) the
workers poll as before. Either wait also ends at once when the worker is told to stop
(`StopSignal`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import time
from collections.abc import Callable
from functools import cache
from typing import Any

import psycopg
from asgiref.sync import sync_to_async
from django.db import DEFAULT_DB_ALIAS, connections, router, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django_tasks_db import DatabaseBackend
from django_tasks_db.compat import normalize_json
from django_tasks_db.models import DBTaskResult

from tools_app.runs.store.outage import Outage
from tools_app.runs.store.sql import rowsql

logger = logging.getLogger(__name__)

CHANNEL = "agentforge_tasks"
# Seconds a (re)connection of the LISTEN connection may take: an unreachable server
# must not hold the worker's claim loop longer than that.
LISTEN_CONNECT_TIMEOUT = 10


def wake_workers(alias: str) -> None:
    """Tell the db_workers listening on `alias`'s database that a task is ready: after
    the commit of the caller's transaction (at once outside one), once a transaction
    (module docstring)."""
    connection = connections[alias]
    if connection.vendor != "postgresql":
        return
    waking = _notifier(alias)
    if any(entry[1] is waking for entry in connection.run_on_commit):
        return  # this transaction wakes them already
    # Robust: a failed notification (the connection lost after the commit) is logged,
    # never raised to the request whose run is stored; the poll finds the task.
    transaction.on_commit(waking, using=alias, robust=True)


@cache
def _notifier(alias: str) -> Callable[[], None]:
    """The one wake-up callback of `alias`'s database (`wake_workers` finds it among a
    transaction's commit callbacks)."""
    def notify() -> None:
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [CHANNEL])
    return notify


class WakingDatabaseBackend(DatabaseBackend):
    """django-tasks-db's backend, whose every enqueue wakes the workers (module doc)."""

    def _task_to_db_task(self, task: Any, args: Any, kwargs: Any) -> Any:
        if self.options.get("id_function") or \
                router.db_for_write(DBTaskResult) != DEFAULT_DB_ALIAS:
            db_task = super()._task_to_db_task(task, args, kwargs)
        else:
            # The row django-tasks-db's `objects.create` writes, by a statement built
            # once (`rowsql.insert_as_saved`, its pre_save receiver included): the ORM's
            # create was a sixth of a POST /api/runs (docs/benchmarks/product-path.md).
            db_task = DBTaskResult(
                id=self._get_id(), args_kwargs=normalize_json({"args": args, "kwargs": kwargs}),
                priority=task.priority, task_path=task.module_path,
                queue_name=task.queue_name, run_after=task.run_after,
                backend_name=self.alias)
            rowsql.insert_as_saved(db_task)
        wake_workers(db_task._state.db or DEFAULT_DB_ALIAS)
        return db_task

    async def _atask_to_db_task(self, task: Any, args: Any, kwargs: Any) -> Any:
        db_task = await super()._atask_to_db_task(task, args, kwargs)
        await sync_to_async(wake_workers)(db_task._state.db or "default")
        return db_task


class StopSignal:
    """A worker's stop as its waits see it: once `set` (by a signal handler), a wait on
    it, and every later one, ends at once. A pipe: a signal handler may write to it
    safely (taking a lock there, as threading.Event.set does, can deadlock against the
    code it interrupted), and a wait on it misses no stop set just before it began."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._closed = False

    def set(self) -> None:
        if self._closed:
            return
        with contextlib.suppress(BlockingIOError):  # the pipe is full: it is set already
            os.write(self._write, b"!")

    def fileno(self) -> int:
        return self._read

    def sleep(self, seconds: float) -> None:
        """Sleep `seconds`, or until the stop is set."""
        _ready([self._read], seconds)

    def close(self) -> None:
        """Close the pipe; a later `set` does nothing (the flag first, so that a handler
        running between the two never writes to a closed, or reused, descriptor)."""
        if self._closed:
            return
        self._closed = True
        os.close(self._write)
        os.close(self._read)


def _ready(descriptors: list[int], timeout: float) -> set[int]:
    """Those of `descriptors` with data to read within `timeout` seconds (none when it
    passes). A selector, not `select.select`, which refuses descriptors numbered 1024 or
    more, as a process with many files open is given."""
    with selectors.DefaultSelector() as selector:
        for descriptor in descriptors:
            selector.register(descriptor, selectors.EVENT_READ)
        return {key.fd for key, _ in selector.select(max(timeout, 0.0))}


class TaskWakeups:
    """A worker's wait between claim turns: until a task is enqueued, `timeout` passes,
    or the worker's `stop` is set.

    On PostgreSQL, a connection of its own (outside Django's pool: it must stay open and
    LISTENing for the worker's life) in autocommit mode; elsewhere a plain sleep. A
    connection lost (a database restart) is opened again, and LISTENs again, at the
    next wait; until then the worker polls. The loss and the return are logged once.
    """

    def __init__(self, connection: BaseDatabaseWrapper, stop: StopSignal | None = None) -> None:
        self._stop = stop
        self._params: dict[str, Any] | None = None
        if connection.vendor == "postgresql":
            params = connection.get_connection_params()
            params.pop("cursor_factory", None)  # Django's cursor classes need its wrapper
            params.setdefault("connect_timeout", LISTEN_CONNECT_TIMEOUT)
            self._params = params
        self._listener: Any = None
        self._outage = Outage(logger, "listening for enqueued tasks")

    @property
    def listening(self) -> bool:
        return self._listener is not None

    def listen(self) -> bool:
        """Start listening (before the first claim turn); False where it cannot."""
        if self._params is None:
            return False
        if self._listener is not None:
            return True
        try:
            listener = psycopg.connect(**self._params, autocommit=True)
            listener.execute(f"LISTEN {CHANNEL}")
        except psycopg.Error as exc:
            self._outage.failed(exc)  # polling meanwhile; logged at the first failure
            return False
        self._outage.succeeded()
        self._listener = listener
        return True

    def wait(self, timeout: float) -> bool:
        """Whether a task was enqueued before `timeout` seconds passed (False as soon as
        the stop is set)."""
        if not self.listen():
            self._readable([], timeout)
            return False
        try:
            return self._notified_within(timeout)
        except psycopg.Error as exc:
            # A dropped connection (a database restart): poll this turn, listen again
            # at the next one (a notification sent meanwhile is lost: the poll finds its
            # task).
            self._outage.failed(exc)
            self.close()
            return True

    def _notified_within(self, timeout: float) -> bool:
        """Read the notifications (psycopg's) whenever the LISTEN connection's socket
        has data, a wait which also ends at a stop (psycopg's own wait could not)."""
        deadline = time.monotonic() + timeout
        while not list(self._listener.notifies(timeout=0, stop_after=1)):
            left = deadline - time.monotonic()
            if left <= 0 or not self._readable([self._listener.fileno()], left):
                return False
        return True

    def _readable(self, descriptors: list[int], timeout: float) -> bool:
        """Wait for one of `descriptors` to have data (True), the stop or `timeout`."""
        if self._stop is None:
            return bool(_ready(descriptors, timeout))
        ready = _ready([*descriptors, self._stop.fileno()], timeout)
        return bool(ready) and self._stop.fileno() not in ready

    def drain(self) -> None:
        """Consume the notifications already arrived (their tasks are claimed next)."""
        if self._listener is None:
            return
        try:
            list(self._listener.notifies(timeout=0))
        except psycopg.Error:
            self.close()  # the next wait listens again

    def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(Exception):
                listener.close()
