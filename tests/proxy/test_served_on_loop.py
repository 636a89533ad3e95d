"""The proxy's routes are served on the event loop without the site's synchronous
middleware chain (agentforge_web/handler.py, `LoopASGIHandler`), through the product's
real ASGI handler: a request whose lookups are cached never goes to a thread, and what
the site's chain does that applies to an API client is still done (the Host check, the
database outage's 503, the security headers, a view's exception as Django answers it,
the request signals); the other routes keep the whole chain."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.core.handlers.asgi import ASGIHandler
from django.core.signals import got_request_exception, request_finished, request_started
from django.db.backends.sqlite3.base import DatabaseWrapper

from agentforge_web import handler, middleware
from tests.proxy.conftest import ENDPOINT_KEY, Proxy, serving
from tools_app.fake_llm import BackgroundServer
from tools_app.models import ModelEndpoint
from tools_app.proxy import recorders, upstream
from tools_app.runs.store.outage import Outage
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}


def _ask(proxy: Proxy, *, stream: bool = False, **headers: str) -> httpx.Response:
    return httpx.post(f"{proxy.openai_base()}/chat/completions",
                      json={**HELLO, "stream": stream},
                      headers={"Authorization": f"Bearer {proxy.token}", **headers})


@pytest.mark.both
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_request_with_its_lookups_cached_never_goes_to_a_thread(
        proxy: Proxy, hops: list[str], stream: bool) -> None:
    first = _ask(proxy, stream=stream)  # its lookups go to the database, on a thread
    proxy.served.wait_answered()
    assert first.status_code == 200
    assert hops == ["_authorized"]
    hops.clear()

    again = _ask(proxy, stream=stream)
    proxy.served.wait_answered()

    assert again.status_code == 200
    assert hops == []
    proxy.recorded()  # the recorder still records both
    assert len([r for r in proxy.fake.app.requests
                if r["path"].endswith("/chat/completions")]) == 2


def test_the_answer_has_the_headers_that_apply_to_an_api_client(proxy: Proxy) -> None:
    whole = _ask(proxy)
    streamed = _ask(proxy, stream=True)

    for response in (whole, streamed):
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "same-origin"
        assert response.headers["cross-origin-opener-policy"] == "same-origin"
        # The page-only parts of the site's chain are not run: no session, no CSRF
        # cookie, no page policy.
        assert "set-cookie" not in response.headers
        assert "content-security-policy" not in response.headers
        assert "x-frame-options" not in response.headers
    assert whole.headers["content-length"] == str(len(whole.content))
    assert whole.headers["content-type"].startswith("application/json")
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert "content-length" not in streamed.headers


def test_a_host_not_allowed_is_refused_400_as_django_refuses_it(
        proxy: Proxy, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="django.security.DisallowedHost"):
        response = _ask(proxy, Host="evil.example")

    assert response.status_code == 400
    assert any("evil.example" in r.getMessage() for r in caplog.records)
    assert not [r for r in proxy.fake.app.requests if r["path"].endswith("/completions")]


@pytest.fixture
def database_gone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No connection can be opened, on any thread (as when the server refuses them);
    the request threads are fresh, so none has one open."""
    monkeypatch.setattr(middleware, "_outage", Outage(middleware.logger, "web requests"))
    threads = handler.KeptRequestThreads()
    monkeypatch.setattr(handler, "REQUEST_THREADS", threads)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(DatabaseWrapper, "get_new_connection", refuse)
    yield
    monkeypatch.undo()
    threads.close()


def test_the_database_unavailable_is_a_503(proxy: Proxy, database_gone: None) -> None:
    response = _ask(proxy)  # its lookups are not cached yet: they need the database

    assert response.status_code == 503
    assert response.headers["retry-after"]
    # In the error format of the provider the client speaks to (its SDK reads it).
    assert response.json() == {"error": {
        "message": "The database is unavailable; try again shortly", "type": "server_error",
        "param": None, "code": "database_unavailable"}}
    assert response.headers["x-content-type-options"] == "nosniff"
    assert middleware._outage._since is not None  # the outage noted (and logged once)

    anthropic = httpx.post(f"{proxy.anthropic_base()}/v1/messages",
                           json={**HELLO, "max_tokens": 16},
                           headers={"x-api-key": proxy.token})
    assert anthropic.status_code == 503
    assert anthropic.json() == {"type": "error", "error": {
        "type": "api_error", "message": "The database is unavailable; try again shortly"}}


@pytest.fixture
def signals_seen() -> Iterator[list[str]]:
    seen: list[str] = []

    def started(**kwargs: Any) -> None:
        seen.append("started")

    def exception(**kwargs: Any) -> None:
        seen.append("exception")

    def finished(**kwargs: Any) -> None:
        seen.append("finished")

    for signal, receiver in ((request_started, started), (got_request_exception, exception),
                             (request_finished, finished)):
        signal.connect(receiver)
    yield seen
    request_started.disconnect(started)
    got_request_exception.disconnect(exception)
    request_finished.disconnect(finished)


@pytest.mark.both
def test_a_view_s_exception_is_a_500_with_django_s_signals_and_log(
        proxy: Proxy, signals_seen: list[str], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the view broke")

    monkeypatch.setattr(upstream, "send", broken)
    with caplog.at_level(logging.ERROR, logger="django.request"):
        response = _ask(proxy)
        proxy.served.wait_answered()

    assert response.status_code == 500
    assert signals_seen == ["started", "exception", "finished"]
    logged = [r for r in caplog.records if r.name == "django.request"]
    assert logged
    assert logged[0].exc_info is not None
    assert "the view broke" in str(logged[0].exc_info[1])


def test_a_request_s_signals_are_sent_once_each(proxy: Proxy,
                                                 signals_seen: list[str]) -> None:
    assert _ask(proxy).status_code == 200
    proxy.served.wait_answered()

    assert signals_seen == ["started", "finished"]


def test_a_path_under_proxy_that_is_no_route_is_django_s_404(proxy: Proxy) -> None:
    response = httpx.get(f"{proxy.url}/proxy/fake-openai/v1/models",
                         headers={"Authorization": f"Bearer {proxy.token}"})

    assert response.status_code == 404
    assert response.headers["x-content-type-options"] == "nosniff"


def test_other_routes_keep_the_whole_chain(proxy: Proxy) -> None:
    response = httpx.get(f"{proxy.url}/accounts/login/")

    assert response.status_code == 200
    assert response.headers["x-frame-options"] == "DENY"
    assert "content-security-policy" in response.headers
    assert "csrftoken" in response.headers["set-cookie"]


def test_with_django_s_own_handler_the_proxy_goes_through_the_whole_chain(
        fake_server: BackgroundServer, bob: User,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """AGENTFORGE_ASGI_HANDLER=django: Django's handler, every route through the site's
    chain in async mode (the outage middleware then async too)."""
    monkeypatch.setenv("FAKE_PROVIDER_API_KEY", ENDPOINT_KEY)
    ModelEndpoint.objects.create(name="fake-openai", kind="openai",
                                 base_url=fake_server.base_urls()["openai"],
                                 model="fake-model", api_key_env="FAKE_PROVIDER_API_KEY")
    _, token = create_token(bob, "proxy client")
    with serving(ASGIHandler()) as served:
        whole, streamed = (httpx.post(f"{served.url}/proxy/fake-openai/v1/chat/completions",
                                      json={**HELLO, "stream": stream},
                                      headers={"Authorization": f"Bearer {token}"})
                           for stream in (False, True))
        served.wait_answered()
        for recorder in recorders.made():
            recorder.release_connections()

    assert (whole.status_code, streamed.status_code) == (200, 200)
    assert whole.json()["choices"]
    assert "data: [DONE]" in streamed.text
    assert whole.headers["x-frame-options"] == "DENY"  # the site's whole chain


def test_the_request_signals_receivers_are_safe_on_the_loop() -> None:
    """The request signals are sent on the loop for these routes: their receivers must
    only tend what belongs to the thread or context they run on (connections, caches,
    the URLconf), never wait. A receiver added elsewhere fails this test, to be
    judged (and named here) or the signals sent through a thread again."""
    names = {f"{receiver.__module__}.{receiver.__qualname__}"
             for signal in (request_started, request_finished)
             for receiver in signal._live_receivers(None)[0]}

    assert names <= {"django.db.reset_queries", "django.db.close_old_connections",
                     "django.core.cache.close_caches",
                     "django.core.handlers.base.reset_urlconf"}, names


@pytest.mark.parametrize(("path", "root_path", "on_loop"), [
    ("/proxy/x/v1/messages", "", True),
    ("/app/proxy/x/v1/messages", "/app", True),
    ("/api/runs", "", False),
    ("/proxyx/", "", False),
    ("/app/api/proxy/", "/app", False),
])
def test_the_routes_served_on_the_loop_are_those_under_proxy(
        path: str, root_path: str, on_loop: bool) -> None:
    assert handler.served_on_loop({"path": path, "root_path": root_path}) is on_loop
