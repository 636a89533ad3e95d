"""Django's ASGI handler, with the middleware chain run as one synchronous call on a
thread kept between requests.

One hop: Django's `ASGIHandler` loads the middleware in async mode. Django's own
middleware (`MiddlewareMixin`) then calls each `process_request` / `process_response` /
`process_view` through `sync_to_async`, and the view (synchronous: the ORM) through one
more: 19 trips between the event loop and a thread for one request, each a context copy
and two thread switches, about 2 ms of CPU (docs/benchmarks/product-path.md). Every
view of this chain is synchronous (the proxy's async one is served on the loop, below),
so a request ends up in a thread anyway: loaded in sync mode,
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

The proxy's routes on the event loop: every path under `/proxy/` (the recording proxy,
an async view that mostly waits on the provider) is served by `LoopASGIHandler`, Django's
handler in async mode with a short chain of async middleware (`LOOP_MIDDLEWARE`) and
the proxy's own URLconf, so that a request whose lookups are cached never leaves the
loop: through the one-hop chain it went loop, thread (middleware), loop (the view),
thread (the response's middleware), loop. What the site's chain does that applies to
an API client with a token is kept there (agentforge_web/loop_middleware.py says what
and why); the request signals' receivers (connections, caches, URLconf of the thread
or context they run on) are called on the loop, which holds no connection, and a kept
thread is taken only when the request's synchronous code first needs one (a database
lookup), its connections tended then and at the end as those signals would
(`LentOnFirstUse`).

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
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import closing
from inspect import iscoroutinefunction
from typing import IO, Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, RequestAborted
from django.core.handlers.asgi import ASGIHandler, ASGIRequest, get_script_prefix
from django.core.handlers.exception import convert_exception_to_response
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, connections
from django.http.response import HttpResponseBase
from django.urls import set_script_prefix
from django.utils.module_loading import import_string

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


class LentOnFirstUse(Executor):
    """The thread-sensitive executor of a request served on the loop: no thread until
    its synchronous code first needs one (a lookup the proxy's cache did not answer),
    then a kept thread for the rest of the request, its connections tended on it as the
    request signals would on a request's own thread (`close_old_connections`) when it
    is taken and when it is given back."""

    def __init__(self) -> None:
        self.kept: ThreadPoolExecutor | None = None
        self.finished = False

    def submit[R](self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
        if self.finished:
            # Code a cancelled request still runs: a thread of its own, ended after it.
            extra = ThreadPoolExecutor(max_workers=1, thread_name_prefix=REQUEST_THREAD_PREFIX)
            future = extra.submit(fn, *args, **kwargs)
            end_thread(extra)
            return future
        if self.kept is None:
            self.kept = REQUEST_THREADS.take()
            self.kept.submit(close_old_connections)  # as request_started would there
        return self.kept.submit(fn, *args, **kwargs)

    async def release(self) -> None:
        """Give the thread back before a stream is written (a later call takes one
        again)."""
        self._give_back()

    def finish(self) -> None:
        self._give_back()
        self.finished = True

    def _give_back(self) -> None:
        if self.kept is not None:
            # As request_finished would; queued before the thread is lendable again.
            self.kept.submit(close_old_connections)
            REQUEST_THREADS.give_back(self.kept)
            self.kept = None


_lent: contextvars.ContextVar[LentThread | LentOnFirstUse] = contextvars.ContextVar(
    "agentforge_lent_thread")


async def send_releasing(handler: ASGIHandler, response: HttpResponseBase,
                         send: Any) -> None:
    """Django's `send_response`, the request's thread given back first when the answer
    is written on the loop for as long as its producer waits (an async stream)."""
    if getattr(response, "is_async", False) and response.streaming:
        lent = _lent.get(None)
        if lent is not None:
            await lent.release()  # written on the loop: the thread has nothing to do
    await ASGIHandler.send_response(handler, response, send)


class OneHopASGIHandler(ASGIHandler):
    def __init__(self) -> None:
        super().__init__()
        self.on_loop = LoopASGIHandler()

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)
        chain: Any = self._middleware_chain  # type: ignore[has-type]
        self._middleware_chain = sync_to_async(chain, thread_sensitive=True)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # as Django's handler says
            raise ValueError(
                f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        on_loop = served_on_loop(scope)
        lent = LentOnFirstUse() if on_loop else LentThread(REQUEST_THREADS.take())
        token = _lent.set(lent)
        try:
            # Everything the request runs synchronously (the request signals, the
            # middleware and view, the response's close) runs on this one thread; on
            # the loop, what little it runs so.
            async with ThreadSensitiveContext(executor=lent):
                await (self.on_loop if on_loop else self).handle(scope, receive, send)
        finally:
            _lent.reset(token)
            lent.finish()

    async def send_response(self, response: HttpResponseBase, send: Any) -> None:
        await send_releasing(self, response, send)


LOOP_PREFIX = "/proxy/"
LOOP_URLCONF = "tools_app.web.proxy_urls"
# Outermost first, as MIDDLEWARE; each async (what they keep of the site's chain, and
# why: agentforge_web/loop_middleware.py).
LOOP_MIDDLEWARE = [
    "agentforge_web.middleware.DatabaseUnavailableMiddleware",
    "agentforge_web.loop_middleware.LoopSecurityMiddleware",
    "agentforge_web.loop_middleware.LoopCommonMiddleware",
]


def served_on_loop(scope: dict[str, Any]) -> bool:
    """Whether the request's path (within the script prefix, as Django reads it) is
    under `LOOP_PREFIX`."""
    path: str = scope["path"]
    script_name = get_script_prefix(scope).rstrip("/")
    if script_name and (path.startswith(script_name + "/") or path == script_name):
        path = path[len(script_name):]
    return path.startswith(LOOP_PREFIX)


class _RequestProcessed(Exception):
    """Ends the task group of a request whose response was sent."""


class LoopASGIHandler(ASGIHandler):
    """Django's handler in async mode for the routes served on the event loop: their
    own URLconf, their own chain, the request signals sent on the loop. Served through
    `OneHopASGIHandler`, which gives it its thread-sensitive executor."""

    def load_middleware(self, is_async: bool = False) -> None:
        """Django's chain built as `load_middleware` builds it in async mode, from
        `LOOP_MIDDLEWARE`, every one of which must be async (nothing is adapted)."""
        self._view_middleware: list[Any] = []
        self._template_response_middleware: list[Any] = []
        self._exception_middleware: list[Any] = []
        view_step = self._get_response_async  # type: ignore[attr-defined]
        chain: Any = convert_exception_to_response(view_step)
        for path in reversed(LOOP_MIDDLEWARE):
            middleware = import_string(path)(chain)
            if not iscoroutinefunction(middleware):
                raise ImproperlyConfigured(f"{path} is not async in LOOP_MIDDLEWARE")
            if hasattr(middleware, "process_view") or hasattr(
                    middleware, "process_template_response"):
                raise ImproperlyConfigured(f"{path}: no view middleware on the loop")
            if hasattr(middleware, "process_exception"):
                # Called synchronously, on the request's thread, as Django does.
                self._exception_middleware.append(middleware.process_exception)
            chain = convert_exception_to_response(middleware)
        self._middleware_chain = chain

    def create_request(self, scope: Mapping[str, Any], body_file: IO[bytes],
                       ) -> tuple[ASGIRequest, None] | tuple[None, HttpResponseBase]:
        made = super().create_request(scope, body_file)
        if made[0] is not None:
            made[0].urlconf = LOOP_URLCONF
        return made

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Django's `handle`, with the request signals sent and the response closed on
        the loop. Their receivers (tests/proxy/test_served_on_loop.py names them) reset
        the query log, close obsolete connections and the caches of the thread or
        context they run on, and the URLconf: the loop has no connection, and the kept
        thread the request may have used is tended by `LentOnFirstUse`."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        with closing(body_file):
            set_script_prefix(get_script_prefix(scope))
            request_started.send(sender=self.__class__, scope=scope)
            request, error_response = self.create_request(scope, body_file)
            if error_response is not None:
                await self.send_response(error_response, send)
                error_response.close()
                return
            response = await self.respond(request, receive, send)
            if response is None:
                request_finished.send(sender=self.__class__)
            else:
                response.close()  # sends request_finished

    async def respond(self, request: Any, receive: Any,
                      send: Any) -> HttpResponseBase | None:
        """The response made and sent while listening for the client's disconnect, as
        Django's `handle` does; None if the client left first."""
        response = None
        try:
            try:
                async with asyncio.TaskGroup() as tasks:
                    tasks.create_task(self.listen_for_disconnect(receive))
                    response = await self.run_get_response(request)
                    await self.send_response(response, send)
                    raise _RequestProcessed
            except* (_RequestProcessed, RequestAborted):
                pass
        except BaseExceptionGroup as exception_group:
            if len(exception_group.exceptions) == 1:
                raise exception_group.exceptions[0] from None
            raise
        return response

    async def send_response(self, response: HttpResponseBase, send: Any) -> None:
        await send_releasing(self, response, send)


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
