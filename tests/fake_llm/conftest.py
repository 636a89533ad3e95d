"""A real fake-LLM server on a loopback port, shared by the tests of this package.

One server runs for the session (starting uvicorn per test would only cost time);
every test gets it reset through the control endpoint, so tests cannot see each
other's scripts, request logs or attempt counters.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tools_app.fake_llm import BackgroundServer


@pytest.fixture(scope="session")
def shared_server() -> Iterator[BackgroundServer]:
    with BackgroundServer() as server:
        yield server


@pytest.fixture
def fake(shared_server: BackgroundServer) -> Iterator[httpx.Client]:
    """An httpx client on the shared server, which has just been reset."""
    with httpx.Client(base_url=shared_server.url, timeout=10) as client:
        client.post("/_fake/reset").raise_for_status()
        yield client
