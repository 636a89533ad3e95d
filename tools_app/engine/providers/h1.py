"""An httpx transport that speaks HTTP/1.1 itself: asyncio connections, httptools' parser.

Why another pool: under 100 concurrent runs the batch is bound by the client's CPU per
request, and aiohttp's client (a request object, a response object, cookie, proxy,
redirect, trace and timeout machinery per request) was about 40 % of it behind
ToolService (docs/benchmarks/providers.md). What a provider call needs is small: a
POST to a handful of hosts over keep-alive connections, a JSON or event-stream
response. This transport does only that:

- the request head is written from the httpx.Request's own headers (validated: no
  control characters, so nothing can be smuggled into the head) and sent with the body
  in one write;
- the response is parsed by httptools (llhttp, Node.js's parser, the one uvicorn
  serves with): status, headers, Content-Length / chunked / read-until-close bodies,
  keep-alive; informational 1xx responses are skipped;
- connections are pooled per (scheme, host, port), last in first out, kept at most
  `keepalive_expiry` seconds idle, `max_keepalive_connections` of them; at most
  `max_connections` requests are in flight at once, the others wait (`pool` timeout);
- timeouts: `connect` covers TCP and TLS set-up, `read` every wait for more of the
  response, `pool` the wait for a free slot; they raise httpx's ConnectTimeout,
  ReadTimeout and PoolTimeout; failures raise httpx's ConnectError, ReadError,
  RemoteProtocolError (a server that hangs up before answering) and
  UnsupportedProtocol, so the retry loop in http.py treats them as with any pool;
- TLS through asyncio with the verifying context every pool shares (HTTP/1.1 only: no
  ALPN offer); no proxies (as with the aiohttp pool, the environment is not read);
- a connection whose response was not read to its end (cancelled, closed early,
  failed) is closed, never reused.

The body of a streamed response is buffered up to `HIGH_WATER` bytes, then reading
pauses until the consumer catches up. Everything runs on the event loop of the first
request: one transport per loop, which is how ProviderHttpClient uses transports.
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
from collections import deque
from collections.abc import AsyncIterator
from typing import NoReturn, cast

import httptools
import httpx

from .transports import READ_BODY, shared_ssl_context

HIGH_WATER = 256 * 1024
LOW_WATER = 64 * 1024
MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024  # a body read whole (JSON); streams are paced instead
ROUTE_CACHE_SIZE = 256
DEFAULT_PORTS = {"http": 80, "https": 443}

# RFC 9110 token characters, for the method and field names (the names are checked all
# at once, one per line, and the line count checked too); a value may not hold CR, LF
# or NUL (checked all at once, TAB-separated: TAB is allowed in values).
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_FIELD_NAMES = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+(?:\n[!#$%&'*+\-.^_`|~0-9A-Za-z]+)*")
_FIELD_VALUE_FORBIDDEN = re.compile(rb"[\r\n\x00]")
_TARGET_FORBIDDEN = re.compile(rb"[\x00-\x20\x7f]")

PoolKey = tuple[str, bytes, int]


class H1Transport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over pooled asyncio connections (see the module docstring)."""

    def __init__(self, limits: httpx.Limits, ssl_context: ssl.SSLContext | None = None) -> None:
        self._limits = limits
        self._ssl_context = ssl_context
        self._idle: dict[PoolKey, deque[_Connection]] = {}
        self._in_flight: set[_Connection] = set()
        self._slots: asyncio.Semaphore | None = None
        self._closed = False
        self._routes: dict[int, tuple[httpx.URL, PoolKey, bytes]] = {}

    # -- the httpx transport interface -------------------------------------------------

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise RuntimeError("the transport was closed")
        timeouts = request.extensions.get("timeout") or {}
        key, target = self._route(request.url)
        head, body = _request_message(request, target, await _request_body(request))
        await self._take_slot(timeouts.get("pool"))
        try:
            connection = await self._connection(key, request.url, timeouts.get("connect"))
        except BaseException:
            self._give_slot()
            raise
        self._in_flight.add(connection)
        read_timeout = timeouts.get("read")
        read_body = bool(request.extensions.get(READ_BODY))
        exchange: _Exchange | None = None
        try:
            exchange = connection.send(head, body)
            await exchange.wait_for_head(read_timeout)
            content = await exchange.read_all(read_timeout) if read_body else None
        except BaseException as exc:
            self._finish(connection, exchange, reusable=False)
            _raise_mapped(exc)
        extensions = {"http_version": b"HTTP/1.1", "reason_phrase": exchange.reason}
        if content is None:
            return httpx.Response(
                status_code=exchange.status, headers=exchange.headers, request=request,
                extensions=extensions,
                stream=_ResponseStream(self, connection, exchange, read_timeout))
        self._finish(connection, exchange, reusable=True)
        response = httpx.Response(status_code=exchange.status, headers=exchange.headers,
                                  request=request, extensions=extensions,
                                  stream=httpx.ByteStream(content))
        response.read()  # decodes it (Content-Encoding): nothing left for aread()
        return response

    async def aclose(self) -> None:
        self._closed = True
        for connection in self._all_connections():
            connection.close()
        self._idle.clear()

    def close_now(self) -> None:
        """Forget every connection: their loop is closed, the sockets go with them."""
        self._closed = True
        self._idle.clear()
        self._in_flight.clear()

    def _route(self, url: httpx.URL) -> tuple[PoolKey, bytes]:
        """The pool key and request target of a URL, worked out once per URL object (a
        model posts to one or two, and httpx re-derives both on every access)."""
        known = self._routes.get(id(url))
        if known is not None and known[0] is url:
            return known[1], known[2]
        route = _pool_key(url), _request_target(url)
        if len(self._routes) >= ROUTE_CACHE_SIZE:
            self._routes.clear()
        self._routes[id(url)] = (url, *route)  # holds `url`, so its id stays its own
        return route

    # -- the pool ----------------------------------------------------------------------

    async def _take_slot(self, timeout: float | None) -> None:
        limit = self._limits.max_connections
        if limit is None:
            return
        if self._slots is None:
            self._slots = asyncio.Semaphore(limit)
        if not self._slots.locked():
            await self._slots.acquire()  # a free slot: no timer needed
            return
        try:
            async with asyncio.timeout(timeout):
                await self._slots.acquire()
        except TimeoutError:
            raise httpx.PoolTimeout(f"no free connection slot within {_seconds(timeout)} "
                                    f"({limit} requests in flight)") from None

    def _give_slot(self) -> None:
        if self._slots is not None:
            self._slots.release()

    async def _connection(self, key: PoolKey, url: httpx.URL,
                          timeout: float | None) -> _Connection:
        idle = self._idle.get(key)
        loop = asyncio.get_running_loop()
        expiry = self._limits.keepalive_expiry
        while idle:
            connection = idle.pop()
            if connection.usable(loop.time(), expiry):
                return connection
            connection.close()
        return await self._open(key, url, timeout)

    async def _open(self, key: PoolKey, url: httpx.URL, timeout: float | None) -> _Connection:
        scheme, _, port = key
        loop = asyncio.get_running_loop()
        tls = self._tls_context() if scheme == "https" else None
        try:
            async with asyncio.timeout(timeout):
                _, connection = await loop.create_connection(
                    lambda: _Connection(key), url.host, port, ssl=tls,
                    server_hostname=url.host if tls is not None else None)
        except TimeoutError:  # ours, or the system's (it is an OSError too)
            raise httpx.ConnectTimeout(
                f"could not connect to {url.host}:{port} within {_seconds(timeout)}") from None
        except OSError as exc:  # refused, unreachable, DNS, TLS (ssl.SSLError)
            raise httpx.ConnectError(f"{url.host}:{port}: {exc}") from exc
        return connection

    def _tls_context(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = shared_ssl_context()
        return self._ssl_context

    def _finish(self, connection: _Connection, exchange: _Exchange | None, *,
                reusable: bool) -> None:
        """`exchange` on `connection` is over: keep the connection for the next request or
        close it. Only once, and only for the exchange the connection is still serving: a
        response stream finalized late (its generator closed by the garbage collector)
        must not touch the connection another request has taken since."""
        if connection not in self._in_flight or (
                exchange is not None and connection.exchange is not exchange):
            return
        self._in_flight.discard(connection)
        self._give_slot()
        idle = self._idle.setdefault(connection.key, deque())
        now = asyncio.get_running_loop().time()
        expiry = self._limits.keepalive_expiry
        while idle and not idle[0].usable(now, expiry):  # the oldest first: drop the stale
            idle.popleft().close()
        keep = self._limits.max_keepalive_connections
        if (reusable and not self._closed and connection.reusable()
                and (keep is None or len(idle) < keep)):
            connection.idle_since = now
            idle.append(connection)
        else:
            connection.close()

    def _all_connections(self) -> list[_Connection]:
        return [*self._in_flight, *(c for idle in self._idle.values() for c in idle)]


class _ResponseStream(httpx.AsyncByteStream):
    """A response body as it arrives; the connection goes back when it was read to the
    end, and is closed if the body is dropped before that."""

    def __init__(self, transport: H1Transport, connection: _Connection, exchange: _Exchange,
                 read_timeout: float | None) -> None:
        self._transport = transport
        self._connection = connection
        self._exchange = exchange
        self._read_timeout = read_timeout

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            while chunk := await self._exchange.next_chunk(self._read_timeout):
                yield chunk
        except BaseException as exc:
            self._transport._finish(self._connection, self._exchange, reusable=False)
            _raise_mapped(exc)
        self._transport._finish(self._connection, self._exchange, reusable=True)

    async def aclose(self) -> None:
        self._transport._finish(self._connection, self._exchange,
                                reusable=self._exchange.complete and not self._exchange.pending())


class _Exchange:
    """One response being received on a connection."""

    def __init__(self, loop: asyncio.AbstractEventLoop, connection: _Connection) -> None:
        self._loop = loop
        self._connection = connection
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_bytes = 0  # bytes fed while the head was incomplete, 1xx heads included
        self.header_bytes = 0  # the header fields parsed, 1xx heads included
        self.head_done = False
        self.complete = False
        self.keep_alive = False
        self.informational = False
        self.until_close = False
        self.error: BaseException | None = None
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._whole = False  # read_all() is collecting: never pause
        self._waiter: asyncio.Future[None] | None = None

    # -- fed by the connection ---------------------------------------------------------

    def wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def fail(self, error: BaseException) -> None:
        if self.error is None and not self.complete:
            self.error = error
        self.wake()

    def add_body(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._whole:
            if self._buffered > MAX_BODY_BYTES:
                raise _ResponseRefused(f"the response body exceeds {MAX_BODY_BYTES} bytes")
        elif self._buffered > HIGH_WATER:
            self._connection.pause()
        self.wake()

    # -- read by the transport ---------------------------------------------------------

    async def wait_for_head(self, timeout: float | None) -> None:
        while not self.head_done:
            await self._wait(timeout)

    async def next_chunk(self, timeout: float | None) -> bytes:
        """The next piece of the body; b"" once it has all been read."""
        while not self._chunks:
            if self.complete:
                return b""
            await self._wait(timeout)
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        if self._buffered < LOW_WATER:
            self._connection.resume()
        return chunk

    async def read_all(self, timeout: float | None) -> bytes:
        """The whole body (each wait for more of it bounded by `timeout`)."""
        self._whole = True
        self._connection.resume()
        while not self.complete:
            await self._wait(timeout)
        chunks, self._chunks = self._chunks, deque()
        self._buffered = 0
        self._connection.resume()
        return b"".join(chunks)

    def pending(self) -> bool:
        return bool(self._chunks)

    async def _wait(self, timeout: float | None) -> None:
        """Until more of the response came (or it failed). The read timeout is a timer
        that fails the exchange, not a cancellation of the task: cheaper, and it can
        never be mistaken for the run being cancelled."""
        if self.error is not None:
            raise self.error
        self._waiter = waiter = self._loop.create_future()
        timer = (None if timeout is None
                 else self._loop.call_later(timeout, self._timed_out, timeout))
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
        if self.error is not None:
            raise self.error

    def _timed_out(self, timeout: float) -> None:
        self.fail(httpx.ReadTimeout(f"no response data within {_seconds(timeout)}"))


class _Connection(asyncio.Protocol):
    """One keep-alive connection; httptools calls the on_* methods while it parses."""

    def __init__(self, key: PoolKey) -> None:
        self.key = key
        self.idle_since = 0.0
        self.lost = False
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._exchange: _Exchange | None = None
        self._paused = False
        self._closed_here = False

    @property
    def exchange(self) -> _Exchange | None:
        return self._exchange

    # -- used by the transport ---------------------------------------------------------

    def send(self, head: bytes, body: bytes) -> _Exchange:
        if self.lost or self._transport is None or self._transport.is_closing():
            raise httpx.RemoteProtocolError("the connection was closed before the request")
        exchange = self._exchange = _Exchange(asyncio.get_running_loop(), self)
        self._transport.writelines((head, body))  # one sendmsg() when the socket is free
        return exchange

    def usable(self, now: float, expiry: float | None) -> bool:
        fresh = expiry is None or now - self.idle_since < expiry
        return fresh and self.reusable()

    def reusable(self) -> bool:
        exchange = self._exchange
        return (not self.lost and self._transport is not None
                and not self._transport.is_closing()
                and exchange is not None and exchange.complete and exchange.keep_alive)

    def close(self) -> None:
        """Close from our side; a response still arriving fails (never looks complete)."""
        self.lost = True
        self._closed_here = True
        exchange = self._exchange
        if exchange is not None and not exchange.complete:
            exchange.fail(httpx.ReadError("the connection was closed before the response ended"))
        if self._transport is not None:
            self._transport.close()

    def pause(self) -> None:
        if not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        exchange = self._exchange
        if exchange is None or exchange.complete:
            self.close()  # bytes nobody asked for: the connection is not usable
            return
        try:
            self._parser.feed_data(data)
            if not exchange.head_done:
                exchange.head_bytes += len(data)
                if exchange.head_bytes > MAX_HEADER_BYTES:
                    raise _ResponseRefused(
                        f"the response head exceeds {MAX_HEADER_BYTES} bytes")
        except _ResponseRefused as exc:
            exchange.fail(httpx.RemoteProtocolError(str(exc)))
            self.close()
        except httptools.HttpParserUpgrade:
            exchange.fail(httpx.RemoteProtocolError("the server switched protocols"))
            self.close()
        except httptools.HttpParserError as exc:
            ours = exc.__context__  # what one of the callbacks below raised, if it did
            reason = (str(ours) if isinstance(ours, _ResponseRefused)
                      else f"invalid HTTP response: {exc}")
            exchange.fail(httpx.RemoteProtocolError(reason))
            self.close()

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        exchange = self._exchange
        if exchange is None or exchange.complete:
            return
        if (exchange.head_done and exchange.until_close and exc is None
                and exchange.error is None and not self._closed_here):
            exchange.complete = True  # a body delimited by the end of the connection
            exchange.wake()
        elif not exchange.head_done:
            exchange.fail(httpx.RemoteProtocolError(
                "the server disconnected without sending a response"
                + (f" ({exc})" if exc else "")))
        else:
            exchange.fail(httpx.ReadError(
                "the server disconnected before the response ended"
                + (f" ({exc})" if exc else "")))

    # -- httptools callbacks -----------------------------------------------------------

    def on_message_begin(self) -> None:
        exchange = self._exchange
        if exchange is None or exchange.complete:
            # A second response to one request: whatever it is, this connection no
            # longer says which answer belongs to which request.
            raise _ResponseRefused("the server sent a response nobody asked for")

    def on_status(self, status: bytes) -> None:
        if self._exchange is not None:
            self._exchange.reason = status

    def on_header(self, name: bytes, value: bytes) -> None:
        """A whole header line arrives here at once: a head that ends within one read
        is measured here, one that does not end by the bytes fed (`data_received`)."""
        exchange = self._exchange
        if exchange is None:
            return
        exchange.header_bytes += len(name) + len(value)
        if exchange.header_bytes > MAX_HEADER_BYTES:
            raise _ResponseRefused(f"the response head exceeds {MAX_HEADER_BYTES} bytes")
        exchange.headers.append((name, value))

    def on_headers_complete(self) -> None:
        exchange = self._exchange
        if exchange is None:
            return
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # informational: the real response follows
            exchange.informational = True
            exchange.headers = []
            return
        exchange.status = status
        exchange.until_close = status not in (204, 304) and _delimited_by_close(exchange.headers)
        exchange.head_done = True
        exchange.wake()

    def on_body(self, body: bytes) -> None:
        if self._exchange is not None:
            self._exchange.add_body(body)

    def on_message_complete(self) -> None:
        exchange = self._exchange
        if exchange is None:
            return
        if exchange.informational:
            exchange.informational = False
            return
        exchange.keep_alive = self._parser.should_keep_alive()
        exchange.complete = True
        exchange.wake()


# -- requests --------------------------------------------------------------------------


def _pool_key(url: httpx.URL) -> PoolKey:
    scheme = url.scheme
    if scheme not in DEFAULT_PORTS:
        raise httpx.UnsupportedProtocol(f"unsupported URL scheme {scheme!r}: use http or https")
    if not url.host:
        raise httpx.UnsupportedProtocol(f"the URL {url} has no host")
    return scheme, url.raw_host, url.port or DEFAULT_PORTS[scheme]


def _request_target(url: httpx.URL) -> bytes:
    target = url.raw_path
    if _TARGET_FORBIDDEN.search(target):
        raise httpx.LocalProtocolError(f"invalid request target {target!r}")
    return target


def _request_message(request: httpx.Request, target: bytes,
                     body: bytes) -> tuple[bytes, bytes]:
    """The request line and header block, and the body framed as they announce it.

    Refused: anything that would break out of its line (CR, LF or NUL in a value, a
    method or name that is not a token), a Content-Length that is not the body's
    length, both Content-Length and Transfer-Encoding, a transfer coding other than
    chunked. A chunked body is sent as one chunk, however the request holds it."""
    method = request.method.encode("ascii")
    if not _TOKEN.fullmatch(method):
        raise httpx.LocalProtocolError(f"invalid request method {method!r}")
    raw = request.headers.raw
    names = b"\n".join(name for name, _ in raw)
    if raw and not (_FIELD_NAMES.fullmatch(names) and names.count(b"\n") == len(raw) - 1):
        bad = next(name for name, _ in raw if not _TOKEN.fullmatch(name))
        raise httpx.LocalProtocolError(f"invalid header name {bad!r}")
    if _FIELD_VALUE_FORBIDDEN.search(b"\t".join(value for _, value in raw)):
        bad = next(name for name, value in raw if _FIELD_VALUE_FORBIDDEN.search(value))
        raise httpx.LocalProtocolError(f"invalid value for header {bad.decode()!r}")
    body = _framed_body(raw, body)
    lines = [b"%s %s HTTP/1.1" % (method, target)]
    lines += [b"%s: %s" % pair for pair in raw]
    lines.append(b"\r\n")
    return b"\r\n".join(lines), body


def _framed_body(raw: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    lengths = [value for name, value in raw if name.lower() == b"content-length"]
    codings = [value for name, value in raw if name.lower() == b"transfer-encoding"]
    if codings:
        if lengths:
            raise httpx.LocalProtocolError(
                "a request may not have both Content-Length and Transfer-Encoding")
        if [c.strip().lower() for c in b",".join(codings).split(b",")] != [b"chunked"]:
            raise httpx.LocalProtocolError(f"unsupported transfer coding {codings!r}")
        return (b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)) if body else b"0\r\n\r\n"
    if any(value.strip() != b"%d" % len(body) for value in lengths):
        raise httpx.LocalProtocolError(
            f"Content-Length {b', '.join(lengths).decode()} for a body of {len(body)} bytes")
    return body


async def _request_body(request: httpx.Request) -> bytes:
    """The whole body (a streamed upload is read first)."""
    try:
        return request.content  # a body given as bytes: read already
    except httpx.RequestNotRead:
        return await request.aread()


def _delimited_by_close(headers: list[tuple[bytes, bytes]]) -> bool:
    """A response body with no Content-Length whose last transfer coding is not chunked
    runs to the end of the connection (RFC 9112, 6.3)."""
    lengths = codings = False
    last_coding = b""
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"content-length":
            lengths = True
        elif lowered == b"transfer-encoding":
            codings = True
            last_coding = value.rsplit(b",", 1)[-1].strip().lower()
    if codings:
        return last_coding != b"chunked"
    return not lengths


def _seconds(timeout: float | None) -> str:
    return "the system's limit" if timeout is None else f"{timeout:g} s"


class _ResponseRefused(Exception):
    """Raised from a parser callback: a response this client will not take."""


def _raise_mapped(exc: BaseException) -> NoReturn:
    """Raise httpx's error for a socket failure while a request was out; everything
    else (httpx's own errors, cancellation) as it is."""
    if isinstance(exc, OSError):
        raise httpx.ReadError(str(exc) or type(exc).__name__) from exc
    raise exc


def connection_count(transport: H1Transport) -> int:
    """Open connections (in flight and idle); for tests and diagnostics."""
    return len(transport._all_connections())
