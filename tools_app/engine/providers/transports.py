"""Which connection pool carries the adapters' httpx requests.

The adapters and `http.py` only ever see httpx's API (Request, Response, transports,
the httpx exceptions). Underneath, the pool is pluggable (`http_backend=`):

    "h1"       HTTP/1.1 of our own on asyncio connections, parsed by httptools (h1.py;
               the default)
    "aiohttp"  aiohttp's connection pool behind an httpx transport
    "httpx"    httpx's own pool (httpcore 1.x)
    "httpx2"   the pool of the httpx2 fork (httpcore2), behind an httpx transport

or any `TransportFactory`: a callable that takes the pool limits and returns an
`httpx.AsyncBaseTransport`. Why "h1" is the default: with 100 concurrent runs sharing
a model (benchmarks/bench_providers.py, docs/benchmarks/providers.md) a batch is bound
by the client's CPU per request. httpcore 1.0.x's pool is quadratic in the number of
waiting requests and drops keep-alive connections under load (encode/httpcore#1035,
httpx#3215): about 5 % of ideal throughput; httpcore2 about 40 %; httpx's client on
httpx-aiohttp's transport about 80 %; ToolService on the aiohttp pool below (no
AsyncClient, see http.py) 77-83 %, aiohttp's client being about 40 % of its CPU. "h1"
does only what a provider call needs and brings ToolService to the 85 % target.

The aiohttp transport is this module's own rather than httpx-aiohttp's (which the
benchmark still measures): it does less per request, maps aiohttp's errors onto the
httpx exception each one means (the upstream table turns a refused connection or a
server disconnect into `ConnectTimeout`), leaves cookies to the caller, and can be
closed synchronously when its event loop is already gone.
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

HttpBackend = Literal["h1", "aiohttp", "httpx", "httpx2"]
TransportFactory = Callable[[httpx.Limits], httpx.AsyncBaseTransport]

HTTP_BACKENDS: tuple[HttpBackend, ...] = ("h1", "aiohttp", "httpx", "httpx2")

READ_BODY = "agentforge.read_body"
"""A request extension: True when the caller will read the whole body at once. A
transport that knows it may return the response with its body already read (httpx then
decodes it when the Response is built); one that ignores it streams the body, and the
caller reads it the usual way. Either way the caller sees the same Response."""
DEFAULT_HTTP_BACKEND: HttpBackend = "h1"
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
        "h1": h1_transport,
        "aiohttp": aiohttp_transport,
        "httpx": httpx_transport,
        "httpx2": httpcore2_transport,
    }
    try:
        return factories[backend]
    except KeyError:
        raise ValueError(f"unknown http_backend {backend!r}; known backends: "
                         f"{', '.join(HTTP_BACKENDS)}, or a transport factory") from None


def h1_transport(limits: httpx.Limits) -> httpx.AsyncBaseTransport:
    from .h1 import H1Transport

    return H1Transport(limits)


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
    close_now = getattr(transport, "close_now", None)  # this module's transports have one
    if callable(close_now):
        close_now()


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
    """An httpx transport over aiohttp's connection pool.

    httpx-aiohttp's transport (measured beside it in the benchmark) does the same job
    with more work per request: it parses the URL again (a str for yarl), builds a new
    ClientTimeout, copies headers through httpx's per-key lookups, and its error table
    turns a refused connection or a server disconnect into `ConnectTimeout`. Here the
    parsed URLs and timeouts are reused, headers go across as one list, aiohttp's errors
    become the httpx exception each one means, cookies are left to the caller (provider
    APIs use none), and the body is not decompressed twice (httpx decodes
    Content-Encoding itself).

    One aiohttp ClientSession (and its pool) is created on first use, in the event loop
    of that request; a transport therefore belongs to one event loop, which is how
    ProviderHttpClient uses it (one transport per loop).
    """

    URL_CACHE_SIZE = 256

    def __init__(self, limits: httpx.Limits = DEFAULT_LIMITS) -> None:
        self._limits = limits
        self._session: aiohttp.ClientSession | None = None
        self._urls: dict[httpx.URL, Any] = {}
        self._urls_by_id: dict[int, tuple[httpx.URL, Any]] = {}
        self._timeouts: dict[tuple[float | None, float | None, float | None], Any] = {}

    def _open_session(self) -> aiohttp.ClientSession:
        import aiohttp

        options: dict[str, Any] = {"limit": self._limits.max_connections or 0}
        if self._limits.keepalive_expiry is not None:
            options["keepalive_timeout"] = self._limits.keepalive_expiry
        connector = aiohttp.TCPConnector(ssl=shared_ssl_context(), **options)
        self._session = aiohttp.ClientSession(
            connector=connector, cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False)
        return self._session

    def _url(self, url: httpx.URL) -> Any:
        """The yarl URL for an httpx one, parsed once (a model posts to one or two).
        Looked up by identity first: ProviderHttpClient sends the same URL object every
        time, and hashing an httpx.URL renders it as a string."""
        cached = self._urls_by_id.get(id(url))
        if cached is not None and cached[0] is url:
            return cached[1]
        parsed = self._urls.get(url)
        if parsed is None:
            import yarl

            if len(self._urls) >= self.URL_CACHE_SIZE:
                self._urls.clear()
                self._urls_by_id.clear()
            parsed = self._urls[url] = yarl.URL(str(url), encoded=True)
        if len(self._urls_by_id) >= self.URL_CACHE_SIZE:
            self._urls_by_id.clear()
        self._urls_by_id[id(url)] = (url, parsed)  # holds `url`, so its id stays its own
        return parsed

    def _timeout(self, request: httpx.Request) -> Any:
        """aiohttp's timeouts for httpx's `timeout` extension: connect -> socket connect,
        read -> socket read, pool -> the wait for a connection (aiohttp's `connect`)."""
        given = request.extensions.get("timeout") or {}
        key = (given.get("connect"), given.get("read"), given.get("pool"))
        timeout = self._timeouts.get(key)
        if timeout is None:
            import aiohttp

            timeout = self._timeouts[key] = aiohttp.ClientTimeout(
                sock_connect=key[0], sock_read=key[1], connect=key[2])
        return timeout

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._session
        if session is None or session.closed:
            session = self._open_session()
        try:
            data: Any = request.content or None
        except httpx.RequestNotRead:  # a streamed upload: aiohttp frames it itself
            data = _body_chunks(request.stream)
            request.headers.pop("transfer-encoding", None)
        with _AIOHTTP_ERRORS:
            received = await session.request(
                request.method, self._url(request.url), headers=_header_items(request.headers),
                data=data, allow_redirects=False, timeout=self._timeout(request),
                server_hostname=request.extensions.get("sni_hostname"))
        extensions: dict[str, Any] = {"http_version": b"HTTP/1.1"}
        if received.reason:
            extensions["reason_phrase"] = received.reason.encode("ascii", "replace")
        if request.extensions.get(READ_BODY):
            # One read instead of httpx's chunk iterators over aiohttp's (a third of
            # the transport's cost for a small JSON body); `read()` decodes it
            # (Content-Encoding) and leaves nothing for `aread()` to do.
            with _AIOHTTP_ERRORS:
                try:
                    body = await received.read()
                finally:
                    received.release()
            response = httpx.Response(status_code=received.status,
                                      headers=received.raw_headers,
                                      stream=httpx.ByteStream(body), request=request,
                                      extensions=extensions)
            response.read()
            return response
        return httpx.Response(status_code=received.status, headers=received.raw_headers,
                              stream=_AiohttpStream(received), request=request,
                              extensions=extensions)

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


def _header_items(headers: httpx.Headers) -> list[tuple[str, str]]:
    encoding = headers.encoding  # a property that scans every header: read it once
    return [(key.decode(encoding), value.decode(encoding)) for key, value in headers.raw]


async def _body_chunks(stream: Any) -> AsyncIterator[bytes]:
    async for chunk in stream:
        yield chunk


class _AiohttpStream(httpx.AsyncByteStream):
    """The body of an aiohttp response, read straight from aiohttp, with aiohttp's
    errors mapped as above."""

    CHUNK_SIZE = 64 * 1024

    def __init__(self, response: Any) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _AIOHTTP_ERRORS:
            async for part in self._response.content.iter_chunked(self.CHUNK_SIZE):
                yield part

    async def aclose(self) -> None:
        with _AIOHTTP_ERRORS:
            await self._response.__aexit__(None, None, None)


def _aiohttp_error(exc: Exception) -> Exception:
    """The httpx exception for an aiohttp failure; anything else is left as it is."""
    import aiohttp

    cause = exc
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
