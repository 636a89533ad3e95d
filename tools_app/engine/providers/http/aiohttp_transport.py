"""httpx-aiohttp's transport with aiohttp's errors mapped to the httpx exception each
one means. Nothing else is changed: aiohttp parses, frames and pools.

Why this subclass exists: upstream's table (httpx_aiohttp.transport.AIOHTTP_EXC_MAP,
0.2.0) maps `aiohttp.ClientConnectionError` to `httpx.ConnectTimeout` and keeps the
most derived httpx class among the matches, so a refused connection
(ClientConnectorError), a server that hangs up (ServerDisconnectedError) and a reset
(ClientOSError) all come out as `ConnectTimeout`: a failure reported as "timed out
after 5 s connecting" the instant it happened. It also lets errors outside its table
(ClientResponseError for a malformed response, a bare asyncio timeout) escape as
aiohttp exceptions, which an httpx caller does not catch. Here the error upstream
chained (or raised unmapped) is mapped again by the table below.

It also applies an outbound policy (outbound.py) to a URL whose host is a literal IP
address, which aiohttp connects to without asking the resolver (names are checked by
`GuardedResolver` as they are resolved); a refusal is an `OutboundRefusedError`.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx
import httpx_aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from tools_app.engine.outbound import (
    OutboundPolicy,
    OutboundRefused,
    OutboundRefusedError,
    is_ip_literal,
)


class GuardedResolver(AbstractResolver):
    """aiohttp's default resolver, refusing any address the policy refuses: aiohttp
    connects to the addresses a resolver returns, so what is checked is what is used."""

    def __init__(self, policy: OutboundPolicy, inner: AbstractResolver | None = None) -> None:
        self.policy = policy
        self._inner = inner or aiohttp.DefaultResolver()

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            self.policy.check(host, result["host"])
        return results

    async def close(self) -> None:
        await self._inner.close()


class AiohttpTransport(httpx_aiohttp.AiohttpTransport):
    """httpx_aiohttp.AiohttpTransport, with the error mapping fixed and literal-IP
    destinations checked against `outbound` (see the module)."""

    def __init__(self, *args: Any, outbound: OutboundPolicy | None = None,
                 direct: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outbound = outbound
        self.direct = direct  # False behind a proxy: the proxy connects to the host

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        if self.outbound is not None and self.direct and is_ip_literal(host):
            try:
                self.outbound.check(host, host)
            except OutboundRefused as refused:
                raise OutboundRefusedError(str(refused), request=request) from refused
        try:
            response = await super().handle_async_request(request)
        except (httpx.TransportError, aiohttp.ClientError, TimeoutError) as exc:
            raise mapped_error(exc) from _origin(exc)
        response.stream = _MappedStream(response.stream)
        return response


class _MappedStream(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.SyncByteStream | httpx.AsyncByteStream) -> None:
        assert isinstance(stream, httpx.AsyncByteStream)
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for part in self._stream:
                yield part
        except (httpx.TransportError, aiohttp.ClientError, TimeoutError) as exc:
            raise mapped_error(exc) from _origin(exc)

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        except (httpx.TransportError, aiohttp.ClientError, TimeoutError) as exc:
            raise mapped_error(exc) from _origin(exc)


def _origin(exc: BaseException) -> BaseException:
    """aiohttp's own error: the one upstream chained, or `exc` itself."""
    cause = exc.__cause__
    if isinstance(exc, httpx.TransportError) and isinstance(cause, BaseException):
        return cause
    return exc


def mapped_error(exc: BaseException) -> httpx.TransportError:
    """The httpx exception for an aiohttp failure (given as upstream mapped it, or
    raw). An httpx error that did not come from aiohttp is kept as it is."""
    cause = _origin(exc)
    if cause is exc and isinstance(exc, httpx.TransportError):
        return exc
    refused = getattr(cause, "os_error", None)
    if isinstance(refused, OutboundRefused):  # raised by GuardedResolver
        return OutboundRefusedError(str(refused))
    message = str(cause) or type(cause).__name__
    kind: type[httpx.TransportError]
    if isinstance(cause, aiohttp.ConnectionTimeoutError):  # sock_connect / pool wait
        kind = httpx.ConnectTimeout
    elif isinstance(cause, aiohttp.SocketTimeoutError | asyncio.TimeoutError):
        kind = httpx.ReadTimeout
    elif isinstance(cause, aiohttp.ClientProxyConnectionError | aiohttp.ClientHttpProxyError):
        kind = httpx.ProxyError
    elif isinstance(cause, aiohttp.ClientConnectorError):  # refused, DNS, TLS handshake
        kind = httpx.ConnectError
    elif isinstance(cause, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError
                    | aiohttp.ClientResponseError):
        kind = httpx.RemoteProtocolError
    elif isinstance(cause, aiohttp.ClientConnectionError):  # ClientOSError: reset, EPIPE
        kind = httpx.ReadError
    elif isinstance(cause, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError):
        kind = httpx.UnsupportedProtocol
    elif isinstance(exc, httpx.TransportError):
        return exc
    else:
        kind = httpx.TransportError
    return kind(message)
