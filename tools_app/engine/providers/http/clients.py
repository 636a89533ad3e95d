"""The httpx clients provider calls go through, one per endpoint and event loop.

A client is an `httpx.AsyncClient` on aiohttp's connection pool (httpx-aiohttp's
transport, aiohttp_transport.py). It holds no credentials: keys travel as headers of
each request, so every run that calls the same endpoint, whoever's key it uses, can
share one pool. `SharedHttpClients` keeps one client per (event loop, EndpointConfig):
a pool and its connections belong to the loop that opened them.

Proxies: an explicit `proxy=` URL wins; otherwise the environment decides, as curl and
the SDKs do: HTTPS_PROXY / HTTP_PROXY by the endpoint's scheme, else ALL_PROXY, unless
NO_PROXY names the host. The environment is read once, when the client is made (an
endpoint has one host), and the proxy handed to aiohttp: its session's own
`trust_env=True` would read the same variables (and ~/.netrc) again on every request,
and it ignores ALL_PROXY. aiohttp speaks to http://
proxies only (CONNECT for https endpoints); another proxy scheme in the environment is
ignored with a warning.

No cookies are kept, on either side: provider APIs authenticate by header, and a
cookie one response set (a proxy's, a load balancer's) must not ride along on the
requests of other runs sharing the pool.
"""

from __future__ import annotations

import asyncio
import functools
import http.cookiejar
import logging
import ssl
import threading
import urllib.parse
import urllib.request
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import httpx

from tools_app.engine.outbound import OutboundPolicy
from tools_app.engine.providers.http.aiohttp_transport import AiohttpTransport, GuardedResolver

logger = logging.getLogger(__name__)

DEFAULT_CONNECT_TIMEOUT = 5.0
# The silence allowed per attempt (before the first byte, then between bytes): long
# enough for a slow model's first token, short enough that a hung provider, retried,
# frees its run within minutes. An endpoint sets its own (`timeout_seconds`).
DEFAULT_READ_TIMEOUT = 120.0
DEFAULT_LIMITS = httpx.Limits(
    # A run has at most one model request in flight, so the connections an endpoint
    # needs are the runs calling it. Keep-alive connections expire before the idle
    # timeouts of common servers (uvicorn 5 s, most proxies 60 s) so a reused one is
    # alive.
    max_connections=1000,
    max_keepalive_connections=1000,
    keepalive_expiry=4.0,
)

Verify = ssl.SSLContext | str | bool


@dataclass(frozen=True)
class EndpointConfig:
    """What makes two clients interchangeable. No credentials: those are headers."""

    base_url: str
    proxy: str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT
    max_connections: int | None = DEFAULT_LIMITS.max_connections
    max_keepalive_connections: int | None = DEFAULT_LIMITS.max_keepalive_connections
    keepalive_expiry: float | None = DEFAULT_LIMITS.keepalive_expiry
    verify: Verify = True
    outbound: OutboundPolicy | None = None
    """Where connections may go (outbound.py); None: anywhere."""
    environment_proxy: bool = True
    """False: never the environment's proxy (HTTP tools connect directly, so the
    outbound policy judges the address actually connected to)."""

    @classmethod
    def of(cls, base_url: str, *, proxy: str | None = None,
           connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
           read_timeout: float = DEFAULT_READ_TIMEOUT, limits: httpx.Limits | None = None,
           verify: Verify = True, outbound: OutboundPolicy | None = None) -> EndpointConfig:
        limits = limits or DEFAULT_LIMITS
        return cls(base_url.rstrip("/"), proxy, connect_timeout, read_timeout,
                   limits.max_connections, limits.max_keepalive_connections,
                   limits.keepalive_expiry, verify, outbound)

    @property
    def timeouts(self) -> httpx.Timeout:
        # pool: the wait for a free connection counts as connecting.
        return httpx.Timeout(self.read_timeout, connect=self.connect_timeout,
                             pool=self.connect_timeout)

    @property
    def limits(self) -> httpx.Limits:
        return httpx.Limits(max_connections=self.max_connections,
                            max_keepalive_connections=self.max_keepalive_connections,
                            keepalive_expiry=self.keepalive_expiry)


def environment_proxy(url: str) -> str | None:
    """The proxy the environment names for `url`, or None (none set, or NO_PROXY)."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    found = proxies.get(parts.scheme) or proxies.get("all")
    if not found or urllib.request.proxy_bypass(parts.netloc):
        return None
    scheme = urllib.parse.urlsplit(found).scheme
    if scheme != "http":
        logger.warning("ignoring a %s:// proxy from the environment: only http:// proxies "
                       "are supported", scheme)
        return None
    return found


@functools.cache
def default_ssl_context() -> ssl.SSLContext:
    """httpx's default verifying context (certifi's CAs; SSL_CERT_FILE / SSL_CERT_DIR
    honoured), built once per process: building it is expensive. A
    process that executes runs builds it at start (`runs.process.preload_for_runs`):
    built by its first client, on the event loop, every run of the loop waited."""
    return httpx.create_ssl_context(verify=True, trust_env=True)


class _NoCookieJar(http.cookiejar.CookieJar):
    """A jar that never stores or sends a cookie, and does not even read a response's
    Set-Cookie headers (httpx hands every response to its client's jar)."""

    def extract_cookies(self, response: object, request: object) -> None:
        return None

    def add_cookie_header(self, request: object) -> None:
        return None


def new_client(config: EndpointConfig,
               transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
    """A client for `config` on aiohttp's pool (or on `transport`, for tests)."""
    if transport is None:
        proxy = config.proxy or (
            environment_proxy(config.base_url) if config.environment_proxy else None)
        verify = default_ssl_context() if config.verify is True else config.verify
        limits = config.limits

        context = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(
            verify=verify, trust_env=True)

        outbound = config.outbound

        def session() -> aiohttp.ClientSession:
            # Upstream's own session would keep cookies; the proxy is resolved above.
            connector = aiohttp.TCPConnector(
                ssl=context, limit=limits.max_connections or 0,
                keepalive_timeout=limits.keepalive_expiry or 0,
                resolver=GuardedResolver(outbound) if outbound is not None else None)
            return aiohttp.ClientSession(connector=connector, trust_env=False,
                                         cookie_jar=aiohttp.DummyCookieJar())

        transport = AiohttpTransport(verify=context, limits=limits, client=session,
                                     proxy=httpx.Proxy(proxy) if proxy else None,
                                     outbound=outbound, direct=proxy is None)
    return httpx.AsyncClient(
        transport=transport, timeout=config.timeouts, follow_redirects=False,
        trust_env=False,  # the environment is read above; not ~/.netrc for auth
        cookies=_NoCookieJar())


ClientFactory = Callable[[EndpointConfig], httpx.AsyncClient]


class SharedHttpClients:
    """One client per (event loop, EndpointConfig), shared by every model that asks.

    `get()` is called inside the loop that will use the client. The owner closes them:
    `await aclose_all()`, or `close_for_loop(loop)` for a loop being shut down."""

    def __init__(self, factory: ClientFactory = new_client) -> None:
        self._factory = factory
        self._clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[EndpointConfig, httpx.AsyncClient]
        ] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def get(self, config: EndpointConfig) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        with self._lock:
            clients = self._clients.setdefault(loop, {})
            client = clients.get(config)
            if client is None or client.is_closed:
                client = clients[config] = self._factory(config)
            return client

    def __len__(self) -> int:
        with self._lock:
            return sum(len(clients) for clients in self._clients.values())

    def _take(self, loop: asyncio.AbstractEventLoop | None = None,
              ) -> list[tuple[asyncio.AbstractEventLoop, list[httpx.AsyncClient]]]:
        with self._lock:
            loops = list(self._clients) if loop is None else [loop]
            return [(each, list(self._clients.pop(each, {}).values())) for each in loops]

    async def aclose_all(self) -> None:
        """Close every client: those of this loop here, those of another running loop
        in that loop; a closed loop's are dropped (its connections went with it)."""
        current = asyncio.get_running_loop()
        for loop, clients in self._take():
            if loop is current:
                await _close(clients)
            elif loop.is_running():
                future = asyncio.run_coroutine_threadsafe(_close(clients), loop)
                await asyncio.wrap_future(future)
            elif not loop.is_closed():
                logger.debug("dropping provider clients of a stopped event loop")

    async def aclose_this_loop(self) -> None:
        """Close the clients of the running loop (a loop that ends with its work, such
        as one asgiref makes for a single call, before it is closed)."""
        [(_, clients)] = self._take(asyncio.get_running_loop())
        await _close(clients)

    def close_for_loop(self, loop: asyncio.AbstractEventLoop, timeout: float = 5.0) -> None:
        """Close the clients of `loop` from outside it, before the loop is closed: it
        must not be running (run them in it) or must run in another thread, where they
        get `timeout` seconds (a loop blocked by a tool must not hold a process's exit
        up; what is not closed then goes with the process)."""
        [(_, clients)] = self._take(loop)
        if not clients or loop.is_closed():
            return
        if loop.is_running():
            future = asyncio.run_coroutine_threadsafe(_close(clients), loop)
            try:
                future.result(timeout)
            except TimeoutError:
                future.cancel()
                logger.warning("provider clients not closed within %g s: their event loop "
                               "is busy", timeout)
        else:
            loop.run_until_complete(_close(clients))


async def _close(clients: list[httpx.AsyncClient]) -> None:
    for client in clients:
        try:
            await client.aclose()
        except Exception:  # a connection that fails to close is gone anyway
            logger.debug("closing a provider client failed", exc_info=True)
