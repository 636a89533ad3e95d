"""OTLP in, end to end: the product's receiver on a live server (pytest-django's, in
this process, so the test reads the runs it made), an API token of bob's, the real
OpenTelemetry SDK exporting to it, and the fake provider for instrumented SDK loops."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser

from tools_app.fake_llm import BackgroundServer, build_app
from tools_app.web.api.tokens import create_token


@dataclass(frozen=True)
class Receiver:
    url: str  # the traces endpoint
    token: str
    user: AbstractUser

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@pytest.fixture
def receiver(live_server: Any, bob: AbstractUser) -> Receiver:
    _, token = create_token(bob, "otlp exporter")
    return Receiver(url=f"{live_server.url}/v1/traces", token=token, user=bob)


@pytest.fixture
def fake_provider(tmp_path: Path) -> Iterator[Callable[[list[dict[str, Any]]], str]]:
    """`fake_provider(steps)`: the OpenAI base URL of a fake provider playing `steps`."""
    servers: list[BackgroundServer] = []

    def start(steps: list[dict[str, Any]]) -> str:
        path = tmp_path / f"script-{len(servers)}.json"
        path.write_text(json.dumps({"scripts": {"*": {"steps": steps}}}))
        servers.append(BackgroundServer(build_app(path)).start())
        return servers[-1].base_urls()["openai"]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def token(bob: AbstractUser) -> str:
    return create_token(bob, "exporter")[1]
