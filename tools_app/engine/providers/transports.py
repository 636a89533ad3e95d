"""Which connection pool carries the adapters' httpx requests.

The adapters and `http.py` only ever see httpx's API (AsyncClient, Request, Response,
the httpx exceptions). Underneath, the pool is pluggable (`http_backend=`):

    "aiohttp"  aiohttp's connection pool through httpx-aiohttp's transport (the default)
    "httpx"    httpx's own pool (httpcore 1.x)
    "httpx2"   the pool of the httpx2 fork (httpcore2), behind an httpx transport

or any `TransportFactory`: a callable that takes the pool limits and returns an
`httpx.AsyncBaseTransport`. Why aiohttp is the default: httpcore 1.0.x's pool is
quadratic in the number of waiting requests and drops keep-alive connections under
load (encode/httpcore#1035, httpx#3215), and httpcore2's rewrite still costs about
twice aiohttp's CPU per request under concurrency. With 100 concurrent runs sharing a
model (benchmarks/bench_providers.py) ToolService reached 5 % of ideal
throughput on "httpx", 23 % on "httpx2" and 36 % on "aiohttp" on the same machine;
sequential calls are also cheaper on aiohttp (0.65-0.9x httpx's client CPU). See
docs/benchmarks/providers.md.

The aiohttp transport here drives httpx-aiohttp's to map aiohttp's errors onto the
httpx exception each one means (the upstream table turns a refused connection or a
server disconnect into `ConnectTimeout`), to leave cookies to httpx alone, to read
bodies without an extra layer, and to be closable synchronously when its event loop is
already gone.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, cast

import httpx

if TYPE_CHECKING:
    import aiohttp

HttpBackend = Literal["aiohttp", "httpx", "httpx2"]
TransportFactory = Callable[[httpx.Limits], httpx.AsyncBaseTransport]

HTTP_BACKENDS: tuple[HttpBackend, ...] = ("aiohttp", "httpx", "httpx2")
DEFAULT_HTTP_BACKEND: HttpBackend = "aiohttp"
DEFAULT_LIMITS = httpx.Limits(
    # A run has at most one model request in flight, so the connections a model needs
    # are the runs sharing it. Keep-alive connections expire before the idle timeouts
    # of common servers (uvicorn 5 s, most proxies 60 s) so a reused one is alive.
    max_connections=1000,
    max_keepalive_connections=1000,
    keepalive_expiry=4.0,
)


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """httpx's default verifying context, built once per process (about 40 ms of CPU
    each time otherwise) and shared by every pool."""
    return httpx.create_ssl_context()


def transport_factory(backend: HttpBackend | TransportFactory) -> TransportFactory:
    """The factory for a backend name (a factory is returned as it is)."""
    if callable(backend):
        return backend
    factories: dict[str, TransportFactory] = {
        "aiohttp": aiohttp_transport,
        "httpx": httpx_transport,
        "httpx2": httpcore2_transport,
    }
    try:
        return factories[backend]
    except KeyError:
        raise ValueError(f"unknown http_backend {backend!r}; known backends: "
                         f"{', '.join(HTTP_BACKENDS)}, or a transport factory") from None


def httpx_transport(limits: httpx.Limits) -> httpx.AsyncBaseTransport:
    return httpx.AsyncHTTPTransport(verify=shared_ssl_context(), limits=limits)


def httpcore2_transport(limits: httpx.Limits) -> httpx.AsyncBaseTransport:
    return Httpcore2Transport(limits)


def aiohttp_transport(limits: httpx.Limits) -> httpx.AsyncBaseTransport:
    return AiohttpTransport(limits)


def close_transport_now(transport: httpx.AsyncBaseTransport) -> None:
    """Release what a transport holds without an event loop (its loop is closed). The
    sockets of the httpx pools are released by the garbage collector; aiohttp must be
    told, or it reports an unclosed session."""
    if isinstance(transport, AiohttpTransport):
        transport.close_now()


class _ErrorsMapped:
    """`with` block raising `mapper(error)` instead of an error it translates (chained
    to the original); errors it leaves alone go through untouched. Stateless, so one
    instance per mapper serves every request."""

    def __init__(self, mapper: Callable[[Exception], Exception]) -> None:
        self.mapper = mapper

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if not isinstance(exc, Exception):
            return
        mapped = self.mapper(exc)
        if mapped is exc:
            return
        raise mapped from (exc.__cause__ if isinstance(exc, httpx.TransportError) else exc)


# -- httpx on the httpcore2 pool (the httpx2 fork's) -------------------------------------


class Httpcore2Transport(httpx.AsyncBaseTransport):
    """httpx.AsyncHTTPTransport with httpcore2's connection pool instead of httpcore's."""

    def __init__(self, limits: httpx.Limits = DEFAULT_LIMITS) -> None:
        try:
            import httpcore2
        except ImportError:  # pragma: no cover - installed with httpx2
            raise ImportError('http_backend="httpx2" needs httpcore2 (pip install '
                              "httpx2)") from None

        self._httpcore2 = httpcore2
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=shared_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        core = self._httpcore2
        url = request.url
        sent = core.Request(
            method=request.method,
            url=core.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port,
                         target=url.raw_path),
            headers=request.headers.raw,
            content=cast(Any, request.stream),
            extensions=request.extensions,
        )
        with _HTTPCORE2_ERRORS:
            received = await self._pool.handle_async_request(sent)
        return httpx.Response(status_code=received.status, headers=received.headers,
                              stream=_Httpcore2Stream(received),
                              extensions=received.extensions)

    async def aclose(self) -> None:
        await self._pool.aclose()


class _Httpcore2Stream(httpx.AsyncByteStream):
    def __init__(self, response: Any) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _HTTPCORE2_ERRORS:
            async for part in self._response.stream:
                yield part

    async def aclose(self) -> None:
        with _HTTPCORE2_ERRORS:
            await self._response.aclose()


def _httpcore2_error(exc: Exception) -> Exception:
    """The httpx exception of the same name (httpcore2 mirrors httpcore's hierarchy);
    anything that is not an httpcore2 error is left as it is."""
    if not type(exc).__module__.startswith("httpcore2"):
        return exc
    for kind in type(exc).__mro__:
        mapped = getattr(httpx, kind.__name__, None)
        if isinstance(mapped, type) and issubclass(mapped, httpx.TransportError):
            return mapped(str(exc))
    return httpx.TransportError(str(exc))  # pragma: no cover - every class has a twin


# -- httpx on aiohttp's pool -------------------------------------------------------------


class AiohttpTransport(httpx.AsyncBaseTransport):
    """httpx-aiohttp's transport with httpx's error classes and httpx-owned cookies.

    One aiohttp ClientSession (and its pool) is created on first use, in the event loop
    of that request; a transport therefore belongs to one event loop, which is how
    ProviderHttpClient uses it (one client per loop).
    """

    def __init__(self, limits: httpx.Limits = DEFAULT_LIMITS) -> None:
        from httpx_aiohttp import AiohttpTransport as Upstream

        self._upstream = Upstream(verify=shared_ssl_context(), limits=limits,
                                  client=self._new_session)
        self._limits = limits
        self._session: aiohttp.ClientSession | None = None

    def _new_session(self) -> aiohttp.ClientSession:
        import aiohttp

        options: dict[str, Any] = {"limit": self._limits.max_connections or 0}
        if self._limits.keepalive_expiry is not None:
            options["keepalive_timeout"] = self._limits.keepalive_expiry
        connector = aiohttp.TCPConnector(ssl=shared_ssl_context(), **options)
        # httpx keeps the cookies (as it would with its own pool); aiohttp's jar would
        # send them a second time.
        self._session = aiohttp.ClientSession(connector=connector,
                                              cookie_jar=aiohttp.DummyCookieJar())
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        with _AIOHTTP_ERRORS:
            response = await self._upstream.handle_async_request(request)
        received = getattr(response.stream, "_aiohttp_response", None)
        response.stream = (_AiohttpStream(received) if received is not None
                           else _WrappedAiohttpStream(response.stream))
        return response

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    def close_now(self) -> None:
        """Mark the session closed without its event loop (which is closed already)."""
        session, self._session = self._session, None
        if session is None or session.closed:
            return
        connector = session.connector
        session.detach()
        close = getattr(connector, "_close", None)  # the synchronous part of close()
        if callable(close):
            close()


class _AiohttpStream(httpx.AsyncByteStream):
    """The body of an aiohttp response, read straight from aiohttp (httpx-aiohttp's
    own stream is replaced, not wrapped: one generator less per chunk), with aiohttp's
    errors mapped as above."""

    CHUNK_SIZE = 16 * 1024

    def __init__(self, response: Any) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _AIOHTTP_ERRORS:
            async for part in self._response.content.iter_chunked(self.CHUNK_SIZE):
                yield part

    async def aclose(self) -> None:
        with _AIOHTTP_ERRORS:
            await self._response.__aexit__(None, None, None)


class _WrappedAiohttpStream(httpx.AsyncByteStream):
    """The fallback when httpx-aiohttp's stream does not expose its aiohttp response."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _AIOHTTP_ERRORS:
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        with _AIOHTTP_ERRORS:
            await self._stream.aclose()


def _aiohttp_error(exc: Exception) -> Exception:
    """The httpx exception for an aiohttp failure (possibly already wrapped by
    httpx-aiohttp, whose table maps most connection errors to ConnectTimeout)."""
    import aiohttp

    cause = exc.__cause__ if isinstance(exc, httpx.TransportError) else exc
    if not isinstance(cause, aiohttp.ClientError | asyncio.TimeoutError):
        return exc
    message = str(cause) or type(cause).__name__
    mapped: type[httpx.TransportError]
    if isinstance(cause, aiohttp.SocketTimeoutError):
        mapped = httpx.ReadTimeout
    elif isinstance(cause, aiohttp.ConnectionTimeoutError):
        mapped = httpx.ConnectTimeout
    elif isinstance(cause, asyncio.TimeoutError):  # ServerTimeoutError included
        mapped = httpx.ReadTimeout
    elif isinstance(cause, aiohttp.ClientProxyConnectionError | aiohttp.ClientHttpProxyError):
        mapped = httpx.ProxyError
    elif isinstance(cause, aiohttp.ClientConnectorError):
        mapped = httpx.ConnectError
    elif isinstance(cause, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError
                    | aiohttp.ClientResponseError):
        mapped = httpx.RemoteProtocolError
    elif isinstance(cause, aiohttp.ClientConnectionError):  # ClientOSError: reset, EPIPE
        mapped = httpx.ReadError
    elif isinstance(cause, aiohttp.InvalidURL):
        mapped = httpx.UnsupportedProtocol
    else:
        mapped = httpx.TransportError
    return mapped(message)


_HTTPCORE2_ERRORS = _ErrorsMapped(_httpcore2_error)
_AIOHTTP_ERRORS = _ErrorsMapped(_aiohttp_error)
