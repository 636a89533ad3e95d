"""Where the in-process worker's database work runs.

SQLite has one writer at a time: runs of the embedded worker writing from many threads
only queue on its lock (and time out under load), so there every run's database work
goes through one dedicated thread, which serialises the writes without lock fights and
keeps one open connection. Elsewhere (a db_worker process, whose runs are driven from
its main thread through async_to_sync; other databases, which take concurrent writers)
the default thread-sensitive behaviour is kept.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import sync_to_async
from django.db import connection

from .task_backend import WORKER_THREAD_NAME

_executor: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def _sqlite_writer() -> ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentforge-db")
        return _executor


def db[**P, R](func: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """`func` as an awaitable that runs on the right database thread."""
    in_embedded_worker = threading.current_thread().name == WORKER_THREAD_NAME
    if in_embedded_worker and connection.vendor == "sqlite":
        return sync_to_async(func, thread_sensitive=False, executor=_sqlite_writer())
    return sync_to_async(func, thread_sensitive=True)
