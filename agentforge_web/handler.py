"""Django's ASGI handler, with the middleware chain run as one synchronous call on a
thread kept between requests.

One hop: Django's `ASGIHandler` loads the middleware in async mode. Django's own
middleware (`MiddlewareMixin`) then calls each `process_request` / `process_response` /
`process_view` through `sync_to_async`, and the view (synchronous: the ORM) through one
more: 19 trips between the event loop and a thread for one request, each a context copy
and two thread switches, about 2 ms of CPU (docs/benchmarks/product-path.md). Every
view here is synchronous, so a request ends up in a thread anyway: loaded in sync mode,
the whole chain and the view run in the one `sync_to_async` call this handler makes (in
the request's own thread-sensitive context, as Django's adaptation would). An async view
would still work (Django's sync path runs it with `async_to_sync`).

Kept threads: Django gives every request a thread-sensitive context of its own, so
asgiref starts a thread for its synchronous code, another to join that one at its end,
and the request's database connection is opened on the new thread and closed with it
(on SQLite, opening one and parsing the schema again is about 2.7 ms of a request's CPU,
docs/benchmarks/product-path.md). Here a request takes a single-thread executor from
`REQUEST_THREADS` for its whole life (asgiref's `ThreadSensitiveContext(executor=...)`,
which leaves the executor to its owner) and gives it back at its end: one request at a
time on a thread, so a connection (and any transaction on it) is never shared between
requests, and the thread's connection outlives the request where Django's
`CONN_MAX_AGE` keeps it (SQLite: settings.py). Up to `AGENTFORGE_REQUEST_THREADS` idle
threads are kept; a burst beyond that gets new threads, which end, with their
connections closed, when their requests do.

Streamed answers: a response whose content is an async iterator (the API's event
stream and long poll) is written on the event loop, for as long as its producer waits.
When one starts, the request gives its kept thread back (`LentThread.release`, after
closing its connections as the request's end would) and what the request still runs
synchronously (the response's close, the request_finished signal) goes to a thread
started only then. A stream open for minutes thus holds no thread.

The WebSockets have their own stack (channels), untouched.

`http_application()` is what asgi.py serves HTTP with: this handler, or Django's own
`ASGIHandler` with `AGENTFORGE_ASGI_HANDLER=django`, the plain alternative the
product-path benchmark measures this one against (read once, at asgi.py's import).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import os
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.asgi import ASGIHandler
from django.core.signals import request_finished
from django.db import close_old_connections, connections
from django.http.response import HttpResponseBase

REQUEST_THREAD_PREFIX = "agentforge-request"
ENVIRONMENT_VARIABLE = "AGENTFORGE_ASGI_HANDLER"


class KeptRequestThreads:
    """Single-thread executors lent to one request at a time, kept between requests."""

    def __init__(self) -> None:
        # A deque: taking and giving back are atomic without a lock (a test may serve
        # requests from loops in several threads).
        self._idle: collections.deque[ThreadPoolExecutor] = collections.deque()

    def take(self) -> ThreadPoolExecutor:
        try:
            return self._idle.pop()  # the most recently used: its connection is warm
        except IndexError:
            return ThreadPoolExecutor(max_workers=1, thread_name_prefix=REQUEST_THREAD_PREFIX)

    def give_back(self, executor: ThreadPoolExecutor) -> None:
        """Lend the executor again once its thread is idle: a request cancelled (its
        client gone) may still run its code there, and no request may wait behind it."""
        executor.submit(self._idle_again, executor)

    def _idle_again(self, executor: ThreadPoolExecutor) -> None:
        # On the executor's own thread, after everything queued before.
        if len(self._idle) < settings.AGENTFORGE_REQUEST_THREADS:
            self._idle.append(executor)
        else:
            end_thread(executor)

    def idle_count(self) -> int:
        return len(self._idle)

    def close(self) -> None:
        """End every idle thread (their connections closed first)."""
        while self._idle:
            end_thread(self._idle.pop())


def end_thread(executor: ThreadPoolExecutor) -> None:
    """Its connections closed on its own thread (after whatever it still runs, the
    executor's queued work being done before it stops), then the thread ends; nothing
    waits for it (so it may be called on that thread too)."""
    executor.submit(connections.close_all)
    executor.shutdown(wait=False)


REQUEST_THREADS = KeptRequestThreads()


class LentThread(Executor):
    """The request's thread-sensitive executor: a kept thread, until `release` gives it
    back early (for a streamed answer); later calls go to a thread of the request's own,
    started on first use and ended with the request."""

    def __init__(self, kept: ThreadPoolExecutor) -> None:
        self.kept = kept
        self.current = kept

    def submit[R](self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
        return self.current.submit(fn, *args, **kwargs)

    async def release(self) -> None:
        if self.current is not self.kept:
            return
        # As the request's end would (request_finished): on the kept thread, its
        # connections are closed if they may not be kept (PostgreSQL gives them back to
        # the pool), so another request may have the thread.
        await asyncio.wrap_future(self.kept.submit(close_old_connections))
        self.current = ThreadPoolExecutor(max_workers=1,
                                          thread_name_prefix=REQUEST_THREAD_PREFIX)
        REQUEST_THREADS.give_back(self.kept)

    def finish(self) -> None:
        if self.current is self.kept:
            REQUEST_THREADS.give_back(self.kept)
        else:
            end_thread(self.current)


_lent: contextvars.ContextVar[LentThread] = contextvars.ContextVar("agentforge_lent_thread")


class OneHopASGIHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)
        chain: Any = self._middleware_chain  # type: ignore[has-type]
        self._middleware_chain = sync_to_async(chain, thread_sensitive=True)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # as Django's handler says
            raise ValueError(
                f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        lent = LentThread(REQUEST_THREADS.take())
        token = _lent.set(lent)
        try:
            # Everything the request runs synchronously (the request signals, the
            # middleware and view, the response's close) runs on this one thread.
            async with ThreadSensitiveContext(executor=lent):
                await self.handle(scope, receive, send)
        finally:
            _lent.reset(token)
            lent.finish()

    async def send_response(self, response: HttpResponseBase, send: Any) -> None:
        if getattr(response, "is_async", False) and response.streaming:
            lent = _lent.get(None)
            if lent is not None:
                await lent.release()  # written on the loop: the thread has nothing to do
        await super().send_response(response, send)


def http_application() -> ASGIHandler:
    """The HTTP application: `OneHopASGIHandler` unless AGENTFORGE_ASGI_HANDLER says
    `django` (Django's own handler, middleware in async mode, a thread per request). A
    bad value fails loudly, as every setting does."""
    value = os.environ.get(ENVIRONMENT_VARIABLE, "").strip().lower() or "onehop"
    if value == "onehop":
        return OneHopASGIHandler()
    if value == "django":
        # As Django's default CONN_MAX_AGE (0) would: settings.py keeps SQLite's
        # connections for threads that live on, and Django's request threads end with
        # their request, which would leave every request's connection open behind it.
        request_finished.connect(close_request_connections,
                                 dispatch_uid="agentforge_close_request_connections")
        return ASGIHandler()
    raise ImproperlyConfigured(
        f"{ENVIRONMENT_VARIABLE} must be 'onehop' (the default) or 'django', not {value!r}")


def close_request_connections(**kwargs: Any) -> None:
    """At a request's end, on its thread: close that thread's connections."""
    connections.close_all()
