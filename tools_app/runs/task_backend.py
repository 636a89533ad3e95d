"""The embedded task backend: an in-process worker, no extra process or service.

`make run` needs only daphne. Tasks run on one private event loop in a daemon thread of
the server process ("agentforge-worker"), not on the loop that serves requests: a tool
that blocks its loop can then never freeze the WebSockets. Live notifications still
have to be published on the serving loop, because the in-memory channel layer is not
safe across event loops: consumers record that loop (`remember_server_loop`) and
`publish()` hops onto it.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections.abc import Awaitable, Coroutine
from concurrent.futures import Future
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.db import connections
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskResult, TaskResultStatus
from django.utils.crypto import get_random_string

logger = logging.getLogger(__name__)

WORKER_THREAD_NAME = "agentforge-worker"
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
            _worker_loop = asyncio.new_event_loop()
            threading.Thread(target=_worker_loop.run_forever, name=WORKER_THREAD_NAME,
                             daemon=True).start()
        return _worker_loop


def current_worker_loop() -> asyncio.AbstractEventLoop | None:
    """The in-process worker's loop if it was started and is not closed."""
    loop = _worker_loop
    return loop if loop is not None and not loop.is_closed() else None


def on_worker_loop() -> bool:
    """Whether the running event loop is the in-process worker's (long-lived) one."""
    return asyncio.get_running_loop() is _worker_loop


def submit(coroutine: Coroutine[Any, Any, Any]) -> Future[Any]:
    """Run a coroutine on the in-process worker loop; returns a concurrent Future.

    The task starts in an empty context: it must not inherit the enqueuing request's
    context variables (asgiref's per-request thread among them), or every run would do
    its database work on the thread of the request that started it.
    """
    future = asyncio.run_coroutine_threadsafe(_in_fresh_context(coroutine), worker_loop())
    _running.add(future)
    future.add_done_callback(_running.discard)
    return future


async def _in_fresh_context(coroutine: Coroutine[Any, Any, Any]) -> Any:
    task = asyncio.get_running_loop().create_task(_guarded(coroutine),
                                                  context=contextvars.Context())
    return await task


async def _guarded(coroutine: Awaitable[Any]) -> Any:
    # Each task gets its own thread for its synchronous (database) work: not asgiref's
    # one shared thread, which serves every viewer's reads and renders (sharing it
    # halved throughput in the live benchmark, docs/benchmarks.md).
    try:
        async with ThreadSensitiveContext():
            try:
                return await coroutine
            finally:
                # The thread goes with the context: close its connections now, or they
                # stay open until the garbage collector finds them.
                await sync_to_async(connections.close_all)()
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
