"""Provider tests never reach a real provider: only loopback hosts may be dialled."""

from __future__ import annotations

import httpx
import pytest

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@pytest.fixture(autouse=True)
def _no_real_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that forgot its MockTransport fails instead of calling a real API."""
    original = httpx.AsyncHTTPTransport.handle_async_request

    async def guarded(self: httpx.AsyncHTTPTransport, request: httpx.Request) -> httpx.Response:
        if request.url.host not in _LOOPBACK:
            raise AssertionError(f"a provider test tried to reach {request.url.host}")
        return await original(self, request)

    monkeypatch.setattr(httpx.AsyncHTTPTransport, "handle_async_request", guarded)
