"""The recording proxy end to end: the product's own ASGI handler served by uvicorn in
this process (so the test reads the runs it made; an async view and a streamed answer
need an ASGI server), the fake provider behind registered endpoints, and bob's token.
Exchanges are recorded as a server records them, by the recorder process; a test that
reaches into the recording in process sets AGENTFORGE_PROXY_RECORDER to "thread"."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import uvicorn
from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.utils import timezone

from agentforge_web.handler import OneHopASGIHandler
from tools_app.fake_llm import BackgroundServer, FakeLLMApp
from tools_app.ingest.idle import end_idle_runs
from tools_app.models import ModelEndpoint
from tools_app.proxy import recorders
from tools_app.runs.loops.provider_clients import PROVIDER_CLIENTS
from tools_app.web.api.tokens import create_token

START_TIMEOUT = 10.0
ANSWERED_TIMEOUT = 10.0  # how long recorded() waits for the server's requests to end
ENDPOINT_KEY = "sk-endpoint-secret-0123456789"


@dataclass(frozen=True)
class Served:
    url: str  # the app's root
    server: uvicorn.Server

    def wait_answered(self) -> None:
        """Wait until every request the server took has ended (its view's code done)."""
        deadline = time.monotonic() + ANSWERED_TIMEOUT
        while self.server.server_state.tasks:
            assert time.monotonic() < deadline, "the server's requests did not end"
            time.sleep(0.005)


@dataclass(frozen=True)
class Proxy:
    url: str  # the product's root
    token: str
    user: AbstractUser
    fake: BackgroundServer
    served: Served

    def openai_base(self, endpoint: str = "fake-openai") -> str:
        return f"{self.url}/proxy/{endpoint}/v1"

    def anthropic_base(self, endpoint: str = "fake-anthropic") -> str:
        return f"{self.url}/proxy/{endpoint}"

    def recorded(self) -> None:
        """Wait until every exchange so far is recorded. A streamed exchange is handed
        to the recorder when the server's relay ends, which can be after the client
        returned (an SDK stops reading at the stream's last event): the server's
        requests are waited for first, then the recorder."""
        self.served.wait_answered()
        for recorder in recorders.made():
            recorder.drain()

    def ended(self) -> list[str]:
        """Every exchange so far recorded, then the conversations ended as the ingest
        idle sweep ends them once idle (the sweep's clock moved past the idle time);
        the ids of the runs it ended."""
        self.recorded()
        idle = timedelta(seconds=settings.AGENTFORGE_OTLP_IDLE_SECONDS + 1)
        return end_idle_runs(now=timezone.now() + idle)


@pytest.fixture
def fake_server() -> Iterator[BackgroundServer]:
    with BackgroundServer(FakeLLMApp()) as server:
        yield server


@contextlib.contextmanager
def serving(app: Any) -> Iterator[Served]:
    """`app` (ASGI) served by uvicorn on a free loopback port in a thread."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                            lifespan="off")
    server = uvicorn.Server(config)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(server.serve(),),
                              name="asgi-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT
    while not server.started:
        assert thread.is_alive(), "the server stopped as it started"
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield Served(f"http://127.0.0.1:{port}", server)
    finally:
        server.should_exit = True
        thread.join(START_TIMEOUT)
        PROVIDER_CLIENTS.close_for_loop(loop)  # the proxy's clients on the server's loop
        loop.close()


@pytest.fixture
def product_server(transactional_db: None) -> Iterator[Served]:
    with serving(OneHopASGIHandler()) as served:
        yield served
        for recorder in recorders.made():
            recorder.release_connections()


@pytest.fixture
def proxy(product_server: Served, fake_server: BackgroundServer, bob: AbstractUser,
          monkeypatch: pytest.MonkeyPatch) -> Proxy:
    monkeypatch.setenv("FAKE_PROVIDER_API_KEY", ENDPOINT_KEY)
    urls = fake_server.base_urls()
    for name, kind in (("fake-openai", "openai"), ("fake-anthropic", "anthropic")):
        ModelEndpoint.objects.create(name=name, kind=kind, base_url=urls[kind],
                                     model="fake-model", api_key_env="FAKE_PROVIDER_API_KEY")
    _, token = create_token(bob, "proxy client")
    return Proxy(url=product_server.url, token=token, user=bob, fake=fake_server,
                 served=product_server)


def fake_requests(server: BackgroundServer) -> list[dict[str, Any]]:
    """What the fake provider received (its request log)."""
    return list(server.app.requests)
