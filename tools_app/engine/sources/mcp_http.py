"""The HTTP client an MCP streamable-HTTP session talks through, behind the outbound
policy (engine/outbound.py) like every model endpoint.

The MCP SDK speaks HTTP through httpx2 (on httpcore2), not through the provider layer's
httpx-on-aiohttp client, so the guard is placed where httpcore2 opens connections: its
network backend. `GuardedBackend` resolves the host itself, checks every address the
name resolves to, and connects to a checked address (the address checked is the
address used; a name that re-resolves elsewhere between two lookups changes nothing).
TLS still verifies the certificate for the host name: httpcore2 passes the URL's host
as the server name, whatever address the socket went to.

No proxy is used (the environment's proxy variables are ignored): behind a proxy the
proxy would choose the address, and the guard could not see it. Redirects are not
followed by the client (the SDK follows same-origin ones itself). Cookies are not kept.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2

from ..outbound import OutboundPolicy, OutboundRefused

CONNECT_TIMEOUT = 10.0


class GuardedBackend(httpcore2.AsyncNetworkBackend):
    """httpcore2's network backend, connecting only to addresses the policy allows."""

    def __init__(self, policy: OutboundPolicy,
                 inner: httpcore2.AsyncNetworkBackend | None = None) -> None:
        self.policy = policy
        self._inner = inner or httpcore2.AnyIOBackend()

    async def connect_tcp(
        self, host: str, port: int, timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        address = await self.checked_address(host, port)
        return await self._inner.connect_tcp(address, port, timeout=timeout,
                                             local_address=local_address,
                                             socket_options=socket_options)

    async def checked_address(self, host: str, port: int) -> str:
        """The first address of `host`, once every address it resolves to is allowed
        (one refused address refuses the name, as the provider resolver does)."""
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise httpcore2.ConnectError(f"cannot resolve {host}: {exc}") from exc
        addresses = [str(info[4][0]) for info in infos]
        try:
            for address in addresses:
                self.policy.check(host, address)
        except OutboundRefused as refused:
            raise httpcore2.ConnectError(str(refused)) from refused
        if not addresses:
            raise httpcore2.ConnectError(f"{host} resolves to no address")
        return addresses[0]

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("MCP servers are reached over TCP only")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx2.AsyncHTTPTransport):
    """httpx2's transport on a connection pool whose connections `GuardedBackend` opens."""

    def __init__(self, policy: OutboundPolicy) -> None:
        super().__init__(trust_env=False)
        # Replaces the pool the base class built: its constructor takes no network
        # backend, and the pool is the only place one can go. Same settings otherwise.
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=httpx2.create_ssl_context(verify=True, trust_env=False),
            network_backend=GuardedBackend(policy),
        )


def guarded_http_client(policy: OutboundPolicy, headers: dict[str, str],
                        read_timeout: float) -> httpx2.AsyncClient:
    """The client of one MCP HTTP session: its headers (credentials included) sent on
    every request to the one server, no proxy, no cookies kept beyond the session."""
    return httpx2.AsyncClient(
        transport=GuardedTransport(policy), headers=headers, trust_env=False,
        follow_redirects=False,
        timeout=httpx2.Timeout(CONNECT_TIMEOUT, read=read_timeout),
    )
