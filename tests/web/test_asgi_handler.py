"""Under ASGI a request crosses from the event loop to a thread once for its middleware
and view, not once per middleware method (agentforge_web/handler.py), and the stack
still does its work there: sessions, CSRF, security headers, the login lockout. The
thread is kept for the next request, with its connection, and lent to one request at
a time."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from asgiref import sync
from channels.testing import HttpCommunicator
from django.contrib.auth.models import AbstractUser
from django.core.signals import request_finished, request_started
from django.db import connection
from django.test import Client

from agentforge_web import handler
from agentforge_web.handler import OneHopASGIHandler

pytestmark = pytest.mark.django_db(transaction=True)

MIDDLEWARE_METHODS = {"process_request", "process_view", "process_response",
                      "process_exception", "process_template_response"}


def session_cookie(user: AbstractUser) -> str:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


async def asgi_request(method: str, path: str, *, cookie: str = "", body: bytes = b"",
                       headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    all_headers = [(b"host", b"testserver"), *(headers or [])]
    if cookie:
        all_headers.append((b"cookie", cookie.encode()))
    communicator = HttpCommunicator(OneHopASGIHandler(), method, path, body=body,
                                    headers=all_headers)
    response: dict[str, Any] = await communicator.get_response(timeout=10)
    response["headers"] = {k.decode().lower(): v.decode() for k, v in response["headers"]}
    return response


async def test_a_page_request_hops_to_a_thread_once_for_its_middleware_and_view(
    hops: list[str], bob: AbstractUser,
) -> None:
    cookie = await sync.sync_to_async(session_cookie)(bob)
    hops.clear()

    response = await asgi_request("GET", "/runs/", cookie=cookie)

    assert response["status"] == 200
    assert b"<html" in response["body"]
    assert not MIDDLEWARE_METHODS & set(hops), hops
    # The chain (middleware and view: `inner`, Django's exception wrapper) once, and
    # Django's own request-started signal. With Django's async chain: 19.
    assert hops.count("inner") == 1, hops
    assert len(hops) <= 3, hops
    # The stack did its work in that one hop: the security headers are there.
    assert response["headers"]["x-frame-options"] == "DENY"
    assert "content-security-policy" in response["headers"]
    assert response["headers"]["x-content-type-options"] == "nosniff"


async def test_an_anonymous_page_request_is_sent_to_log_in() -> None:
    response = await asgi_request("GET", "/runs/")

    assert response["status"] == 302
    assert response["headers"]["location"].startswith("/accounts/login/")


async def test_a_form_post_without_its_csrf_token_is_refused(bob: AbstractUser) -> None:
    cookie = await sync.sync_to_async(session_cookie)(bob)

    response = await asgi_request("POST", "/accounts/logout/", cookie=cookie,
                                  headers=[(b"content-type",
                                            b"application/x-www-form-urlencoded")])

    assert response["status"] == 403


async def test_a_locked_out_login_is_refused(bob: AbstractUser, settings: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 2
    form = await asgi_request("GET", "/accounts/login/")
    csrf_cookie = form["headers"]["set-cookie"].split(";")[0]  # csrftoken=...
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', form["body"])
    assert token is not None
    statuses = []
    for attempt in range(3):
        body = f"csrfmiddlewaretoken={token[1].decode()}&username=bob&password=guess{attempt}"
        response = await asgi_request(
            "POST", "/accounts/login/", cookie=csrf_cookie, body=body.encode(),
            headers=[(b"content-type", b"application/x-www-form-urlencoded")])
        statuses.append(response["status"])

    # The form again with its error, until the failure that reaches the limit.
    assert statuses == [200, 429, 429]


# -- kept request threads -----------------------------------------------------------------


@pytest.fixture
def request_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[handler.KeptRequestThreads]:
    """A pool of this test's own (the module's is shared by the process)."""
    threads = handler.KeptRequestThreads()
    monkeypatch.setattr(handler, "REQUEST_THREADS", threads)
    yield threads
    threads.close()


@dataclass
class Seen:
    thread: threading.Thread
    connection: Any  # the driver's connection the request's queries used


@pytest.fixture
def seen_at_request_end() -> Iterator[list[Seen]]:
    """The thread and database connection of each request, seen as it ends (after
    Django's own rule, `close_old_connections`, has closed the connection or kept it)."""
    seen: list[Seen] = []

    def record(**kwargs: Any) -> None:
        seen.append(Seen(threading.current_thread(), connection.connection))

    request_finished.connect(record)
    yield seen
    request_finished.disconnect(record)


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"not within 10 s: {what}"
        time.sleep(0.01)


async def test_requests_one_after_another_share_a_kept_thread_and_its_connection(
    request_threads: handler.KeptRequestThreads, seen_at_request_end: list[Seen],
    bob: AbstractUser,
) -> None:
    cookie = await sync.sync_to_async(session_cookie)(bob)

    for _ in range(3):
        response = await asgi_request("GET", "/runs/", cookie=cookie)
        assert response["status"] == 200
        await sync.sync_to_async(wait_for)(lambda: request_threads.idle_count() == 1,
                                           "the thread given back")

    assert [s.thread.name.startswith(handler.REQUEST_THREAD_PREFIX)
            for s in seen_at_request_end] == [True, True, True]
    assert len({s.thread for s in seen_at_request_end}) == 1
    # SQLite's connection is kept open between requests (CONN_MAX_AGE = None there),
    # not opened again by each one.
    assert seen_at_request_end[0].connection is not None
    assert all(s.connection is seen_at_request_end[0].connection
               for s in seen_at_request_end)


async def test_requests_at_the_same_time_never_share_a_thread(
    request_threads: handler.KeptRequestThreads, seen_at_request_end: list[Seen],
    settings: Any, bob: AbstractUser,
) -> None:
    """Both requests wait for each other inside their synchronous code: on one thread
    (one connection, one transaction) the barrier would break instead."""
    settings.AGENTFORGE_REQUEST_THREADS = 1
    cookie = await sync.sync_to_async(session_cookie)(bob)
    barrier = threading.Barrier(2, timeout=10)

    def meet(**kwargs: Any) -> None:
        barrier.wait()

    request_started.connect(meet)
    try:
        responses = await asyncio.gather(*(asgi_request("GET", "/runs/", cookie=cookie)
                                           for _ in range(2)))
    finally:
        request_started.disconnect(meet)

    assert [r["status"] for r in responses] == [200, 200]
    # (A request ends, its signal sent, just after its response.)
    await sync.sync_to_async(wait_for)(lambda: len(seen_at_request_end) == 2,
                                       "both requests ended")
    first, second = seen_at_request_end
    assert first.thread is not second.thread
    assert first.connection is not second.connection
    # One idle thread is kept (the setting); the other ends with its connection closed.
    await sync.sync_to_async(wait_for)(
        lambda: sum(s.thread.is_alive() for s in seen_at_request_end) == 1,
        "the thread beyond the kept one ended")
    assert request_threads.idle_count() == 1
    ended = next(s for s in seen_at_request_end if not s.thread.is_alive())
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        ended.connection.execute("SELECT 1")


def test_a_thread_still_running_a_request_s_code_is_not_lent_again(
    request_threads: handler.KeptRequestThreads,
) -> None:
    """A request whose client went away stops waiting for its code, which may still run
    on the thread: the thread is lent again only once that code is done."""
    executor = request_threads.take()
    release = threading.Event()
    executor.submit(release.wait, 10)

    request_threads.give_back(executor)

    assert request_threads.idle_count() == 0
    assert request_threads.take() is not executor
    release.set()
    wait_for(lambda: request_threads.idle_count() == 1, "the thread given back")
    assert request_threads.take() is executor


def test_a_request_on_the_loop_takes_a_kept_thread_only_when_its_code_needs_one(
    request_threads: handler.KeptRequestThreads, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The executor of a request served on the loop (the proxy's): no thread until its
    synchronous code first runs, then a kept one, its connections tended there as the
    request signals would when it is taken and when it is given back (before a stream,
    or at the end); code a cancelled request still runs after its end never gets it."""
    tended: list[str] = []
    monkeypatch.setattr(handler, "close_old_connections",
                        lambda: tended.append(threading.current_thread().name))
    lent = handler.LentOnFirstUse()
    assert lent.kept is None

    first = lent.submit(threading.current_thread).result(10)
    again = lent.submit(threading.current_thread).result(10)
    asyncio.run(lent.release())  # a stream is about to be written
    wait_for(lambda: request_threads.idle_count() == 1, "the thread given back")
    after_release = lent.submit(threading.current_thread).result(10)
    lent.finish()
    wait_for(lambda: request_threads.idle_count() == 1, "the thread given back")
    late = lent.submit(threading.current_thread).result(10)

    assert first is again is after_release  # the idle kept thread, taken again
    assert first.name.startswith(handler.REQUEST_THREAD_PREFIX)
    assert tended == [first.name] * 4  # taken, given back, taken, given back
    assert late is not first


# -- a streamed answer (the API's event stream) --------------------------------------------


async def test_a_streamed_answer_gives_its_request_thread_back(
    bob: AbstractUser, weather_endpoint: Any, demo_tools: Any, policy: Any, settings: Any,
) -> None:
    from channels.testing import ApplicationCommunicator

    from tests.web.support import start_run
    from tools_app.runs import tasks
    from tools_app.web.api.event_stream import STREAMS
    from tools_app.web.api.tokens import create_token

    settings.AGENTFORGE_API_STREAM_HEARTBEAT_SECONDS = 600
    settings.AGENTFORGE_LIVE_POLL_SECONDS = 600
    run = await sync.sync_to_async(start_run)(bob, weather_endpoint,
                                              [demo_tools["get_weather"]], policy)
    _, token = await sync.sync_to_async(create_token)(bob, "ci")
    # A request first, so a kept thread waits idle for the stream's request.
    assert (await asgi_request("GET", "/accounts/login/"))["status"] == 200
    async with asyncio.timeout(10):  # given back once its thread is idle
        while handler.REQUEST_THREADS.idle_count() < 1:
            await asyncio.sleep(0.01)
    idle = handler.REQUEST_THREADS.idle_count()

    stream = ApplicationCommunicator(OneHopASGIHandler(), {
        "type": "http", "http_version": "1.1", "method": "GET", "scheme": "http",
        "path": f"/api/runs/{run.pk}/events/stream", "raw_path": b"", "query_string": b"",
        "root_path": "", "server": ("testserver", 80), "client": ("127.0.0.1", 50000),
        "headers": [(b"host", b"testserver"), (b"authorization", f"Bearer {token}".encode())],
    })
    await stream.send_input({"type": "http.request", "body": b""})
    start = await stream.receive_output(10)
    assert (start["type"], start["status"]) == ("http.response.start", 200)

    # While the stream is open and waiting, its kept thread is idle again, lendable.
    async with asyncio.timeout(10):
        while handler.REQUEST_THREADS.idle_count() < idle:
            await asyncio.sleep(0.01)
    assert (await asgi_request("GET", "/accounts/login/"))["status"] == 200

    # The run executes; the stream sends its events and ends with the run.
    assert await tasks.execute_run.acall(str(run.pk)) == "succeeded"
    body = b""
    async with asyncio.timeout(10):
        while True:
            message = await stream.receive_output(10)
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
    await stream.wait(10)
    last_event = body.rsplit(b"id: ", 1)[-1]
    data = next(line for line in last_event.splitlines() if line.startswith(b"data: "))
    assert json.loads(data.removeprefix(b"data: "))["payload"]["status"] == "succeeded"
    assert STREAMS.open(bob.pk) == 0  # the response's close ran
