"""Provider tests never reach a real provider: only loopback hosts may be dialled."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from tools_app.engine.providers.http.aiohttp_transport import AiohttpTransport

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
# Every transport that opens real connections.
_NETWORK_TRANSPORTS: tuple[type[httpx.AsyncBaseTransport], ...] = (
    httpx.AsyncHTTPTransport, AiohttpTransport)


def _guard(original: Callable[..., Awaitable[httpx.Response]]) -> Any:
    async def guarded(self: httpx.AsyncBaseTransport, request: httpx.Request) -> httpx.Response:
        if request.url.host not in _LOOPBACK:
            raise AssertionError(f"a provider test tried to reach {request.url.host}")
        return await original(self, request)

    return guarded


@pytest.fixture(autouse=True)
def _no_real_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that forgot its MockTransport fails instead of calling a real API."""
    for transport in _NETWORK_TRANSPORTS:
        monkeypatch.setattr(transport, "handle_async_request",
                            _guard(transport.handle_async_request))
