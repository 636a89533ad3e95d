"""The embedded task backend: an in-process worker, no extra process or service.

`make run` needs only daphne. Tasks run on one private event loop in a daemon thread of
the server process ("agentforge-worker"), not on the loop that serves requests: a tool
that blocks its loop can then never freeze the WebSockets. Live notifications still
have to be published on the serving loop, because the in-memory channel layer is not
safe across event loops: consumers record that loop (`remember_server_loop`) and
`publish()` hops onto it. A `db_worker` drives its runs on the same kind of loop: uvloop's
(cheaper for a busy worker) unless AGENTFORGE_WORKER_EVENT_LOOP says "asyncio".

Database lanes: a task's synchronous (database) work runs on one of a few "lane"
threads (`database_lanes()`: AGENTFORGE_WORKER_DB_THREADS, or a db_worker's own
count), each an asgiref ThreadSensitiveContext held
open for the loop's life, so a process holds that many connections however many runs
it drives (a thread and a connection per run would exhaust PostgreSQL's connections,
and the threads would fight over the GIL). A task keeps its lane to its end, so
its calls stay ordered on one thread and one connection; a new task takes the lane
with the fewest tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
import weakref
from collections.abc import Awaitable, Coroutine
from concurrent.futures import Future
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskResult, TaskResultStatus
from django.utils.crypto import get_random_string

from tools_app.runs.store.db import drop_broken_connections

logger = logging.getLogger(__name__)

WORKER_THREAD_NAME = "agentforge-worker"
LANE_TASK_NAME = "agentforge-db-lane"  # the tasks that hold the lanes open (never end)
_server_loop: asyncio.AbstractEventLoop | None = None
_worker_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()
_running: set[Future[Any]] = set()


def remember_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    global _server_loop
    _server_loop = loop


def server_loop() -> asyncio.AbstractEventLoop | None:
    loop = _server_loop
    return loop if loop is not None and not loop.is_closed() else None


def worker_loop() -> asyncio.AbstractEventLoop:
    global _worker_loop
    with _lock:
        if _worker_loop is None or _worker_loop.is_closed():
            _worker_loop = new_worker_loop()
            threading.Thread(target=_worker_loop.run_forever, name=WORKER_THREAD_NAME,
                             daemon=True).start()
        return _worker_loop


def new_worker_loop() -> asyncio.AbstractEventLoop:
    """An event loop of the kind AGENTFORGE_WORKER_EVENT_LOOP names: uvloop's where it is
    installed (it is not on Windows; the standard loop stands in there, as it does when
    "asyncio" is chosen)."""
    if settings.AGENTFORGE_WORKER_EVENT_LOOP == "uvloop":
        try:
            import uvloop
        except ImportError:
            logger.warning("uvloop is not installed: the runs' event loop is asyncio's")
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def current_worker_loop() -> asyncio.AbstractEventLoop | None:
    """The in-process worker's loop if it was started and is not closed."""
    loop = _worker_loop
    return loop if loop is not None and not loop.is_closed() else None


def on_worker_loop() -> bool:
    """Whether the running event loop is the in-process worker's (long-lived) one."""
    return asyncio.get_running_loop() is _worker_loop


def submit(coroutine: Coroutine[Any, Any, Any]) -> Future[Any]:
    """Run a coroutine on the in-process worker loop; returns a concurrent Future.

    The task starts in its lane's context, not the enqueuing request's: it must not
    inherit the request's context variables (asgiref's per-request thread among them),
    or every run would do its database work on the thread of the request that started it.
    """
    future = asyncio.run_coroutine_threadsafe(_in_a_lane(coroutine), worker_loop())
    _running.add(future)
    future.add_done_callback(_running.discard)
    return future


class _Lane:
    """A thread (and so a connection) for the database work of the tasks in it."""

    def __init__(self, context: contextvars.Context, holder: asyncio.Task[None]) -> None:
        self.context = context
        self.holder = holder  # the task keeping the lane open (referenced, or collected)
        self.tasks = 0


class _Lanes:
    """The lanes of one event loop (a test or a restarted worker may start another)."""

    def __init__(self) -> None:
        self.lanes: list[_Lane] = []
        self.lock = asyncio.Lock()


_lanes_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Lanes] = \
    weakref.WeakKeyDictionary()


async def _in_a_lane(coroutine: Coroutine[Any, Any, Any]) -> Any:
    lane = min(await _open_lanes(), key=lambda candidate: candidate.tasks)
    lane.tasks += 1
    try:
        task = asyncio.get_running_loop().create_task(_guarded(coroutine),
                                                      context=lane.context.copy())
        return await task
    finally:
        lane.tasks -= 1


# A db_worker's lane count (`use_database_lanes`); None: the setting's.
_lanes_wanted: int | None = None


def database_lanes() -> int:
    """How many database lanes (threads, connections) each loop of this process opens,
    and so how many event writers it runs (batch_writer)."""
    return _lanes_wanted or int(settings.AGENTFORGE_WORKER_DB_THREADS)


def use_database_lanes(count: int | None) -> None:
    """This process's lane count from now on (a db_worker's, set before its loop
    starts); None: AGENTFORGE_WORKER_DB_THREADS again."""
    global _lanes_wanted
    if count is not None and count < 1:
        raise ValueError(f"a loop needs at least one database lane, got {count}")
    _lanes_wanted = count


async def _open_lanes() -> list[_Lane]:
    loop = asyncio.get_running_loop()
    lanes = _lanes_by_loop.get(loop)
    if lanes is None:
        lanes = _lanes_by_loop[loop] = _Lanes()
    async with lanes.lock:
        # A lane whose holder ended (cancelled) has no thread left: open another.
        lanes.lanes = [lane for lane in lanes.lanes if not lane.holder.done()]
        while len(lanes.lanes) < database_lanes():
            ready: asyncio.Future[contextvars.Context] = loop.create_future()
            # Started in an empty context, so a lane inherits nothing from its opener.
            holder = loop.create_task(_hold_lane(ready), name=LANE_TASK_NAME,
                                      context=contextvars.Context())
            lanes.lanes.append(_Lane(await ready, holder))
    return lanes.lanes


async def _hold_lane(ready: asyncio.Future[contextvars.Context]) -> None:
    """Keep a ThreadSensitiveContext open for the loop's life: the tasks created in a
    copy of the context captured inside it share its one thread."""
    lane = ThreadSensitiveContext()
    await lane.__aenter__()  # type: ignore[no-untyped-call]
    try:
        ready.set_result(contextvars.copy_context())
        await asyncio.Event().wait()  # until the loop stops
    finally:
        # A loop closed with the lane open ends it from outside its task's context,
        # where asgiref cannot reset its context variable: nothing is left to reset then.
        with contextlib.suppress(ValueError):
            await lane.__aexit__(None, None, None)  # type: ignore[no-untyped-call]


async def _guarded(coroutine: Awaitable[Any]) -> Any:
    try:
        # A connection broken by the last task (a database restart) is replaced before
        # this task uses it; a healthy one is kept for the lane's life. (Django's
        # `close_old_connections` would close it every time where CONN_MAX_AGE is 0
        # (PostgreSQL's pool): every run's claim would open a connection, and every
        # other task on the lane would lose its connection too.)
        await sync_to_async(drop_broken_connections)()
        return await coroutine
    except Exception:
        logger.exception("in-process task failed")
        raise


def running_count() -> int:
    return len(_running)


async def on_server_loop(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Await `coroutine` on the serving loop (directly if we are already on it)."""
    target = server_loop()
    if target is None or target is asyncio.get_running_loop():
        return await coroutine
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, target))


class InProcessBackend(BaseTaskBackend):
    supports_async_task = True

    def enqueue[**P, R](self, task: Task[P, R], args: list[Any],
                        kwargs: dict[str, Any]) -> TaskResult[P, R]:
        self.validate_task(task)
        result: TaskResult[P, R] = TaskResult(
            task=task, id=get_random_string(32), status=TaskResultStatus.READY,
            enqueued_at=None, started_at=None, last_attempted_at=None, finished_at=None,
            args=args, kwargs=kwargs, backend=self.alias, errors=[], worker_ids=[],
        )
        submit(task.acall(*args, **kwargs))
        return result
