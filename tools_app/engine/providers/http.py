"""The one HTTP layer every wire adapter uses: client, credentials, errors, retries.

    ProviderHttpClient.post_json()    one JSON request, retried per RetryPolicy
    ProviderHttpClient.open_stream()  the same, until the response headers; the
                                      event stream itself is never retried
    ProviderHttpClient.aclose()       closes the pooled connections

One pooled httpx transport per ProviderHttpClient and event loop: created on the
first request made in that loop, then shared by every call and every concurrent run
using the model (a pool and its connections belong to the loop that opened them, so
the embedded worker and a test each get their own). The pool is chosen with
`http_backend` (see transports.py; aiohttp's by default); an injected `transport=`
(tests: httpx.MockTransport) is used as it is, in every loop. Pools that were never
closed are closed when the ProviderHttpClient is garbage-collected (in their loop if it
still runs).

Requests are built as `httpx.Request`s and handed to the transport, without an
`httpx.AsyncClient` in between: of what the client adds per request (URL and header
merging, the auth flow, the redirect loop, cookie extraction, event hooks, a request
log line) provider calls use nothing (credentials are headers, redirects are not
followed, cookies are not kept), and under 100 concurrent runs it cost about a third
of the client CPU per request (docs/benchmarks/providers.md). The headers are merged
once, here; httpx still encodes the body, decodes Content-Encoding and maps errors.

The retry policy is the official OpenAI/Anthropic SDKs' one, and this is the only
retry loop in the engine: connection errors, timeouts, 408, 409, 429 and every 5xx
(529 overloaded included) are retried `max_retries` times (2 by default) after
min(0.5 * 2^n, 8) s with jitter (x0.75..1.0), or after the `retry-after-ms` /
`Retry-After` the server sent when that is at most 60 s. A server that asks for a
longer pause is not retried: the error says how long it asked for. `x-should-retry`
overrides the status rule both ways, as in the SDKs.

Every failed attempt is reported with `emit(ProviderAttempt(...))` and logged. Every
failure becomes a ProviderError built from the provider's error body (type, code,
message) and headers (request id, Retry-After). Credentials travel in headers only;
they are never put in an event, a log line or an exception message, and any text that
comes back from the server or the transport is scrubbed of them before it is used.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import threading
import time
import weakref
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
)
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import httpx
import pydantic_core

from ..errors import ProviderError
from ..events import ProviderAttempt, ProviderWireRequest, emit, observed
from .sse import SseDecoder, SseEvent
from .transports import (
    DEFAULT_HTTP_BACKEND,
    DEFAULT_LIMITS,
    READ_BODY,
    HttpBackend,
    TransportFactory,
    close_transport_now,
    transport_factory,
)

logger = logging.getLogger(__name__)

DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 600.0
DEFAULT_MAX_RETRIES = 2
DRAIN_TIMEOUT = 0.5
EXCERPT_BYTES = 512
REDACTED = "[redacted]"

_RETRYABLE_STATUSES = frozenset({408, 409, 429})
_SENSITIVE_HEADER_PARTS = ("auth", "key", "token", "secret", "cookie", "password")
_REQUEST_ID_HEADERS = ("x-request-id", "request-id", "x-goog-request-id")
_REQUEST_ID_HEADER_KEYS = tuple(name.encode() for name in _REQUEST_ID_HEADERS)

Sleep = Callable[[float], Awaitable[None]]

# Every request is a JSON POST; the headers every request carries, before the caller's
# (which override them). httpx decodes the encodings offered here by itself.
USER_AGENT = f"agentforge-web python-httpx/{httpx.__version__}"
_DEFAULT_HEADERS = {"accept": "application/json", "accept-encoding": "gzip, deflate",
                    "content-type": "application/json", "user-agent": USER_AGENT}
_SSE_ACCEPT = "text/event-stream"


def encode_json(value: Any) -> bytes:
    """JSON text exactly as httpx's `json=` sends it (compact, UTF-8, no NaN).

    A string holding a lone surrogate (a tool can return one) has no UTF-8 form: then
    the body is written with ASCII escapes, which carry it as JSON's own "\\ud800".
    """
    try:
        return _JSON_UTF8.encode(value).encode()
    except UnicodeEncodeError:
        return _JSON_ASCII.encode(value).encode()


# Made once: json.dumps() with any option builds a new encoder on every call.
_JSON_UTF8 = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_JSON_ASCII = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


class ProviderStreamError(ProviderError):
    """The response stream started and then failed: it broke, carried an error event,
    or ended inside a tool call. Never retried by this layer (the SDKs' rule), and
    nothing from the broken stream is returned, so no partial tool call can run."""


@dataclass(frozen=True)
class RetryPolicy:
    """The SDKs' retry policy; `sleep`, `random` and `clock` are test seams."""

    max_retries: int = DEFAULT_MAX_RETRIES
    initial_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 60.0
    sleep: Sleep = asyncio.sleep
    random: Callable[[], float] = random.random
    clock: Callable[[], float] = time.time

    def backoff(self, retries_done: int) -> float:
        """The pause before retry number `retries_done + 1`: 0.5, 1, 2... up to 8 s."""
        delay = min(self.initial_delay * 2.0 ** min(retries_done, 1000), self.max_delay)
        return max(delay * (1 - 0.25 * self.random()), 0.0)


# -- credentials -------------------------------------------------------------------------


@dataclass(frozen=True)
class Redactor:
    """Replaces every secret value by a marker in text and JSON coming back to us."""

    secrets: tuple[str, ...] = ()

    def text(self, value: str) -> str:
        for secret in self.secrets:
            value = value.replace(secret, REDACTED)
        return value

    def json(self, value: Any) -> Any:
        if not self.secrets:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.json(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.json(item) for item in value]
        return value

    def decoded_json(self, value: Any, raw: bytes) -> Any:
        """`json(value)` for a `value` decoded from the JSON text `raw`. Walking a whole
        response is most of a call's cost in this layer, so it is skipped when no secret
        can be in `raw`: none appears in it verbatim and nothing in it is escaped in a
        way that could spell one (\\u escapes, \\/, or a UTF-16/32 body)."""
        if not self.secrets:
            return value
        verbatim = self._verbatim_secrets
        if (verbatim is None or b"\\u" in raw or b"\\/" in raw or 0 in raw[:4]
                or any(secret in raw for secret in verbatim)):
            return self.json(value)
        return value

    @cached_property
    def _verbatim_secrets(self) -> tuple[bytes, ...] | None:
        """The secrets as JSON text carries them, or None if one needs escaping there."""
        if any(char in '"\\' or char < " " for secret in self.secrets for char in secret):
            return None
        return tuple(secret.encode() for secret in self.secrets)


def is_sensitive_header(name: str) -> bool:
    lowered = name.lower()
    return any(part in lowered for part in _SENSITIVE_HEADER_PARTS)


def _secret_values(values: Iterable[str]) -> tuple[str, ...]:
    # Also scrub the bare token of "Bearer <token>". Values under 8 characters are not
    # credentials worth the risk of mangling ordinary text that happens to contain them.
    found: set[str] = set()
    for value in values:
        found.add(value)
        found.update(part for part in value.split() if len(part) >= 8)
    return tuple(sorted((v for v in found if len(v) >= 8), key=len, reverse=True))


# -- errors ------------------------------------------------------------------------------


def is_retryable_status(status: int) -> bool:
    return status in _RETRYABLE_STATUSES or status >= 500


def parse_retry_after(
    headers: httpx.Headers, clock: Callable[[], float] = time.time
) -> float | None:
    """Seconds from `retry-after-ms`, or `Retry-After` as seconds or an HTTP date."""
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            return float(milliseconds) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return moment.timestamp() - clock()


def request_id_from(headers: httpx.Headers, body: Any = None) -> str | None:
    """The first request-id header present (in `_REQUEST_ID_HEADERS` order), else the
    body's `request_id`. One pass over the raw headers: each `Headers.get` would decode
    all of them again, for every name looked up."""
    found: dict[bytes, bytes] = {}
    for key, value in headers.raw:
        lowered = key.lower()
        if lowered in _REQUEST_ID_HEADER_KEYS and value and lowered not in found:
            found[lowered] = value
    for name in _REQUEST_ID_HEADER_KEYS:
        if name in found:
            return found[name].decode(headers.encoding)
    in_body = body.get("request_id") if isinstance(body, dict) else None
    return in_body if isinstance(in_body, str) else None


def excerpt(content: bytes | str, redactor: Redactor) -> str:
    """The first 512 bytes of a body, decoded leniently and scrubbed of secrets."""
    raw = content if isinstance(content, bytes) else content.encode("utf-8", "replace")
    text = raw[:EXCERPT_BYTES].decode("utf-8", "replace")
    suffix = f" ... [{len(raw) - EXCERPT_BYTES} more bytes]" if len(raw) > EXCERPT_BYTES else ""
    return redactor.text(text) + suffix


@dataclass(frozen=True)
class ErrorDetails:
    """What a provider's error body says: `{"error": {"message", "type"|"status", "code"}}`
    (OpenAI, Gemini, most compatible servers) or Anthropic's `{"type": "error", "error":
    {"type", "message"}, "request_id"}`."""

    message: str | None = None
    error_type: str | None = None
    code: str | None = None

    @classmethod
    def from_body(cls, body: Any) -> ErrorDetails:
        if isinstance(body, list) and body:
            body = body[0]
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, str):
            return cls(message=error)
        if not isinstance(error, dict):
            return cls()
        code = error.get("code")
        kind = error.get("type") or error.get("status")
        message = error.get("message")
        return cls(
            message=message if isinstance(message, str) else None,
            error_type=kind if isinstance(kind, str) else None,
            code=None if code is None else str(code),
        )

    def describe(self) -> str:
        parts = [p for p in (self.error_type, self.message) if p]
        text = ": ".join(parts) if parts else "no error details"
        return f"{text} (code {self.code})" if self.code and self.code != self.error_type else text


def loads_json(data: bytes | str) -> Any:
    """`json.loads(data)`, on pydantic-core's parser (Rust) when it can: about 2.5 times
    faster on a provider's response. What it refuses goes to json.loads, which decides:
    a lone surrogate escape (it has no Rust string), a byte order mark, UTF-16/32 text,
    and of course text that is not JSON at all (json's ValueError then)."""
    try:
        return pydantic_core.from_json(data)
    except ValueError:
        return json.loads(data)


def _decode_json(content: bytes) -> Any:
    try:
        return loads_json(content)
    except ValueError:
        return None


def status_error(
    provider: str, response: httpx.Response, content: bytes, redactor: Redactor,
    clock: Callable[[], float] = time.time,
) -> ProviderError:
    """The ProviderError for a response with an error status."""
    body = _decode_json(content)
    details = ErrorDetails.from_body(redactor.json(body))
    text = (details.describe() if body is not None
            else f"non-JSON body: {excerpt(content, redactor)}")
    message = f"{provider}: HTTP {response.status_code} {text}"
    if response.status_code in (401, 403):
        message += f"; check the API key and permissions for provider {provider}"
    request_id = request_id_from(response.headers, body)
    if request_id:
        message += f" [request id {request_id}]"
    return ProviderError(
        message,
        provider=provider,
        status=response.status_code,
        error_type=details.error_type,
        code=details.code,
        request_id=request_id,
        retryable=_should_retry(response),
        retry_after=parse_retry_after(response.headers, clock),
    )


def _should_retry(response: httpx.Response) -> bool:
    override = str(response.headers.get("x-should-retry", ""))
    if override in ("true", "false"):
        return override == "true"
    return is_retryable_status(response.status_code)


def invalid_response_error(
    provider: str, reason: str, content: bytes | str, redactor: Redactor,
    *, status: int | None = 200, request_id: str | None = None,
) -> ProviderError:
    """A response we cannot use (garbage 200, HTML from a proxy, missing fields)."""
    return ProviderError(
        f"{provider}: invalid provider response ({reason}); body starts: "
        f"{excerpt(content, redactor)}",
        provider=provider, status=status, request_id=request_id, retryable=False,
    )


def transport_error(provider: str, exc: httpx.RequestError, timeouts: httpx.Timeout,
                    redactor: Redactor) -> ProviderError:
    """Connection failures and timeouts; only the transient ones are retryable."""
    detail = redactor.text(str(exc)) or "no details"
    if isinstance(exc, httpx.TimeoutException):
        limit = timeouts.connect if isinstance(exc, httpx.ConnectTimeout) else timeouts.read
        phase = "connecting" if isinstance(exc, httpx.ConnectTimeout) else "waiting for data"
        message = f"{provider}: timed out after {limit:g} s {phase} ({type(exc).__name__})"
    else:
        message = f"{provider}: connection failed ({type(exc).__name__}: {detail})"
    retryable = isinstance(exc, (httpx.TimeoutException, httpx.NetworkError,
                                 httpx.RemoteProtocolError))
    return ProviderError(message, provider=provider, retryable=retryable)


# -- the client --------------------------------------------------------------------------


@dataclass(frozen=True)
class JsonResponse:
    """A successful non-streamed response, before its body is decoded (see `decode`)."""

    status: int
    content: bytes
    headers: httpx.Headers
    attempt: int


@dataclass
class EventStream:
    """An open event-stream response. `events()` turns transport failures into
    ProviderStreamError; the status and request id are known before the first event."""

    provider: str
    response: httpx.Response
    redactor: Redactor
    timeouts: httpx.Timeout
    attempt: int
    events_seen: int = 0
    request_id: str | None = field(init=False)

    def __post_init__(self) -> None:
        self.request_id = request_id_from(self.response.headers)

    @property
    def status(self) -> int:
        return self.response.status_code

    async def events(self) -> AsyncGenerator[SseEvent]:
        # aiter_sse() inlined: this runs for every line of every stream.
        decoder = SseDecoder()
        try:
            async for line in self.response.aiter_lines():
                event = decoder.feed(line)
                if event is not None:
                    self.events_seen += 1
                    yield event
            last = decoder.flush()
            if last is not None:
                self.events_seen += 1
                yield last
        except httpx.RequestError as exc:
            cause = transport_error(self.provider, exc, self.timeouts, self.redactor)
            detail = str(cause).removeprefix(f"{self.provider}: ")
            raise self.broken(f"the response stream broke ({detail})") from None

    async def drain(self, events: AsyncIterator[SseEvent], timeout: float | None = None) -> None:
        """Read on to the end of the body after the stream's end marker (OpenAI's
        `[DONE]`), as the SDKs do: a response closed before its body ended takes its
        connection with it, and the next request has to open a new one. Nothing after
        the marker is used, so a body that does not end within `timeout`, or breaks,
        is simply dropped."""
        try:
            async with asyncio.timeout(DRAIN_TIMEOUT if timeout is None else timeout):
                async for _ in events:
                    pass
        except (TimeoutError, ProviderStreamError):
            pass

    def broken(self, reason: str, **details: Any) -> ProviderStreamError:
        """The error for a stream that cannot be used; nothing from it is returned."""
        return ProviderStreamError(
            f"{self.provider}: {reason} after {self.events_seen} events; the partial "
            "response was discarded and no tool call from it was executed",
            provider=self.provider, status=self.status, request_id=self.request_id,
            retryable=False, **details,
        )


# -- the pooled clients ------------------------------------------------------------------


@dataclass(eq=False)
class _Pool:
    """One loop's transport (its connection pool), and the async generator that stands
    for its lifetime.

    The generator is registered with the loop on its first step, so the loop closes the
    pool when it shuts down (asyncio.run, asyncio.Runner and pytest-asyncio call
    `loop.shutdown_asyncgens()`), or soon after the generator is dropped with its owner
    while the loop runs (the loop's async-generator finalizer hook). The generator
    refers to the pool, not the other way round, so dropping the entry finalizes it
    at once instead of at the next cyclic garbage collection.
    """

    transport: httpx.AsyncBaseTransport
    owned: bool
    """False for an injected transport: the caller's to close."""
    closed: bool = False

    async def aclose(self) -> None:
        self.closed = True
        if not self.owned:
            return
        try:
            await self.transport.aclose()
        except Exception:  # a connection that fails to close is gone anyway
            logger.debug("closing a provider connection pool failed", exc_info=True)

    def close_now(self) -> None:
        """Its loop is closed and never shut the pool down: release what can be."""
        self.closed = True
        if self.owned:
            close_transport_now(self.transport)


async def _lifetime(pool: _Pool) -> AsyncGenerator[None]:
    try:
        yield
    finally:
        await pool.aclose()


@dataclass(eq=False)
class _Entry:
    pool: _Pool
    lifetime: AsyncGenerator[None]


class _PoolsByLoop:
    """The pools of one ProviderHttpClient, keyed by event loop. It holds no reference
    to its owner, so it can release the pools when the owner is collected."""

    def __init__(self) -> None:
        self.pools: dict[asyncio.AbstractEventLoop, _Entry] = {}
        self.lock = threading.Lock()

    def add(self, loop: asyncio.AbstractEventLoop, entry: _Entry) -> None:
        with self.lock:
            for other in [other for other in self.pools if other.is_closed()]:
                self.pools.pop(other).pool.close_now()
            self.pools[loop] = entry

    def take_all(self) -> list[tuple[asyncio.AbstractEventLoop, _Entry]]:
        with self.lock:
            taken = list(self.pools.items())
            self.pools.clear()
        return taken

    def release(self) -> None:
        """The owner is gone. A live loop closes its pool through the lifetime
        generator's finalizer hook once the entry is dropped here; a closed loop cannot
        run anything, so what it left open is released at once."""
        for loop, entry in self.take_all():
            if loop.is_closed():
                entry.pool.close_now()


@dataclass(frozen=True)
class _Target:
    """A request path resolved once per client: its URL (httpx parses a str URL on every
    request), the URL as events show it, and the complete headers of its JSON and of
    its streamed requests, Host included."""

    url: httpx.URL
    shown: str
    json_headers: httpx.Headers
    stream_headers: httpx.Headers


class ProviderHttpClient:
    """Holds the pooled transports, sends with credentials, retries, maps failures.

    No cookies are kept: provider APIs authenticate by header, and one pool serves every
    run of every user, so a cookie one response set (a proxy's, a load balancer's) must
    not ride along on the requests of other runs."""

    def __init__(
        self,
        *,
        provider: str,
        base_url: str,
        credentials: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        http_backend: HttpBackend | TransportFactory | None = None,
        limits: httpx.Limits | None = None,
    ) -> None:
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self.timeouts = httpx.Timeout(read_timeout, connect=connect_timeout)
        self.limits = limits or DEFAULT_LIMITS
        self.http_backend = http_backend or DEFAULT_HTTP_BACKEND
        self._transport = transport
        self._transport_factory = transport_factory(self.http_backend)
        self._pools = _PoolsByLoop()
        weakref.finalize(self, self._pools.release)
        self._targets: dict[str, _Target] = {}
        plain = {k: v for k, v in (headers or {}).items() if not is_sensitive_header(k)}
        secret = {k: v for k, v in (headers or {}).items() if is_sensitive_header(k)}
        self._json_headers = httpx.Headers(_DEFAULT_HEADERS)
        self._json_headers.update({**plain, **secret, **(credentials or {})})
        self._stream_headers = self._json_headers.copy()
        self._stream_headers["accept"] = _SSE_ACCEPT
        timeout = self.timeouts.as_dict()
        self._json_extensions = {"timeout": timeout, READ_BODY: True}
        self._stream_extensions = {"timeout": timeout}
        self.redactor = Redactor(_secret_values([*secret.values(),
                                                 *(credentials or {}).values()]))

    def __repr__(self) -> str:
        return f"ProviderHttpClient(provider={self.provider!r}, base_url={self.base_url!r})"

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    async def post_json(self, path: str, body: dict[str, Any],
                        encoded: bytes | None = None) -> JsonResponse:
        """POST `body` (sent as `encoded` when the caller has serialized it already:
        the same JSON text httpx would produce, see adapter.encode_json_body)."""
        target = await self._announce(path, body, stream=False)
        transport = await self.transport()
        content = self._content(body, encoded)
        (response, content), attempt = await self._with_retries(
            lambda: self._attempt_json(transport, target, content))
        return JsonResponse(response.status_code, content, response.headers, attempt)

    def decode(self, response: JsonResponse) -> tuple[Any, str | None]:
        """The JSON body (scrubbed of secrets) and the request id of a response."""
        decoded = _decode_json(response.content)
        request_id = request_id_from(response.headers, decoded)
        if decoded is None:
            raise invalid_response_error(self.provider, "the body is not JSON",
                                         response.content, self.redactor, request_id=request_id)
        return self.redactor.decoded_json(decoded, response.content), request_id

    @asynccontextmanager
    async def open_stream(self, path: str, body: dict[str, Any],
                          encoded: bytes | None = None) -> AsyncIterator[EventStream]:
        target = await self._announce(path, body, stream=True)
        transport = await self.transport()
        content = self._content(body, encoded)
        response, attempt = await self._with_retries(
            lambda: self._attempt_stream(transport, target, content))
        try:
            try:
                await self._check_event_stream(response)
            except ProviderError as error:
                await self.report_attempt(attempt, error, None)
                raise
            yield EventStream(self.provider, response, self.redactor, self.timeouts, attempt)
        finally:
            await response.aclose()

    async def report_attempt(self, number: int, error: ProviderError, wait: float | None) -> None:
        """Log and emit one failed attempt (also one whose response proved unusable)."""
        logger.warning("%s attempt %d failed (retryable=%s, next in %s s): %s",
                       self.provider, number, error.retryable,
                       "-" if wait is None else f"{wait:.3g}", error)
        await emit(ProviderAttempt(provider=self.provider, attempt=number, status=error.status,
                                   error=str(error), retryable=error.retryable, wait_s=wait))

    async def transport(self) -> httpx.AsyncBaseTransport:
        """The pooled transport of the running event loop, created on first use."""
        loop = asyncio.get_running_loop()
        entry = self._pools.pools.get(loop)
        if entry is None or entry.pool.closed:
            entry = await self._open_pool(loop)
        return entry.pool.transport

    async def _open_pool(self, loop: asyncio.AbstractEventLoop) -> _Entry:
        owned = self._transport is None
        transport = self._transport or self._transport_factory(self.limits)
        pool = _Pool(transport, owned=owned)
        entry = _Entry(pool, _lifetime(pool))
        await anext(entry.lifetime)  # registers it with the loop (see _Pool)
        self._pools.add(loop, entry)
        return entry

    async def aclose(self) -> None:
        """Close the pooled connections of every event loop. The client stays usable:
        a later request opens a new pool. An injected `transport=` is left open."""
        current = asyncio.get_running_loop()
        for loop, entry in self._pools.take_all():
            if loop is current:
                await entry.lifetime.aclose()
            elif loop.is_closed() or not loop.is_running():
                entry.pool.close_now()
            else:
                future = asyncio.run_coroutine_threadsafe(entry.lifetime.aclose(), loop)
                await asyncio.wait_for(asyncio.wrap_future(future), self.timeouts.connect)

    # -- internals ---------------------------------------------------------------------

    async def _announce(self, path: str, body: dict[str, Any], *, stream: bool) -> _Target:
        target = self._targets.get(path)
        if target is None:
            target = self._targets.setdefault(path, self._target(path))
        if observed():
            await emit(ProviderWireRequest(provider=self.provider, url=target.shown, body=body,
                                           stream=stream))
        return target

    def _target(self, path: str) -> _Target:
        url = httpx.URL(self.url(path))
        host = {"host": url.netloc.decode("ascii")}
        json_headers = httpx.Headers(host)
        json_headers.update(self._json_headers)
        stream_headers = httpx.Headers(host)
        stream_headers.update(self._stream_headers)
        return _Target(url, self.redactor.text(str(url)), json_headers, stream_headers)

    @staticmethod
    def _content(body: dict[str, Any], encoded: bytes | None) -> bytes:
        return encoded if encoded is not None else encode_json(body)

    async def _send(self, transport: httpx.AsyncBaseTransport, target: _Target,
                    content: bytes, *, stream: bool) -> httpx.Response:
        """One attempt, up to the response headers (the body may still be unread).

        The request is given its complete headers (Host and Content-Length included) and
        its body as a stream, so httpx does not merge default headers into it again."""
        headers = httpx.Headers(target.stream_headers if stream else target.json_headers)
        headers["content-length"] = str(len(content))
        request = httpx.Request(
            "POST", target.url, headers=headers, stream=httpx.ByteStream(content),
            extensions=self._stream_extensions if stream else self._json_extensions)
        request.read()  # a ByteStream: gives `request.content` without copying
        response = await transport.handle_async_request(request)
        response.request = request  # a mock transport's handler may leave it unset
        return response

    async def _attempt_json(
        self, transport: httpx.AsyncBaseTransport, target: _Target, content: bytes
    ) -> tuple[httpx.Response, bytes]:
        response = await self._send(transport, target, content, stream=False)
        try:
            content = await response.aread()
        finally:
            await response.aclose()
        if not response.is_success:
            raise _Failed(status_error(self.provider, response, content, self.redactor,
                                       self.retry.clock))
        return response, content

    async def _attempt_stream(
        self, transport: httpx.AsyncBaseTransport, target: _Target, content: bytes
    ) -> httpx.Response:
        response = await self._send(transport, target, content, stream=True)
        if not response.is_success:
            try:
                content = await response.aread()
            finally:
                await response.aclose()
            raise _Failed(status_error(self.provider, response, content, self.redactor,
                                       self.retry.clock))
        return response

    async def _check_event_stream(self, response: httpx.Response) -> None:
        content_type = response.headers.get("content-type", "")
        if "event-stream" in content_type or not content_type:
            return
        try:
            content = await response.aread()
        except httpx.RequestError as exc:
            raise transport_error(self.provider, exc, self.timeouts, self.redactor) from None
        body = _decode_json(content)
        details = ErrorDetails.from_body(self.redactor.json(body))
        request_id = request_id_from(response.headers, body)
        if details.message or details.error_type:
            raise ProviderError(
                f"{self.provider}: HTTP {response.status_code} {details.describe()}",
                provider=self.provider, status=response.status_code,
                error_type=details.error_type, code=details.code, request_id=request_id)
        raise invalid_response_error(
            self.provider, f"expected an event stream, got {content_type}", content,
            self.redactor, status=response.status_code, request_id=request_id)

    async def _with_retries[T](self, attempt: Callable[[], Awaitable[T]]) -> tuple[T, int]:
        """THE retry loop: run `attempt` until it succeeds or the policy says stop.
        Returns the result and the number of the attempt that gave it."""
        number = 0
        while True:
            number += 1
            try:
                return await attempt(), number
            except _Failed as failed:
                error = failed.error
            except httpx.RequestError as exc:
                error = transport_error(self.provider, exc, self.timeouts, self.redactor)
            wait = self._wait_before_retry(number, error)
            await self.report_attempt(number, error, wait)
            if wait is None:
                raise self._final_error(number, error)
            await self.retry.sleep(wait)

    def _wait_before_retry(self, number: int, error: ProviderError) -> float | None:
        if not error.retryable or number > self.retry.max_retries:
            return None
        asked = error.retry_after
        if asked is not None and asked > self.retry.max_retry_after:
            return None
        if asked is not None and asked > 0:
            return asked
        return self.retry.backoff(number - 1)

    def _final_error(self, attempts: int, error: ProviderError) -> ProviderError:
        asked = error.retry_after
        detail = str(error).removeprefix(f"{self.provider}: ")
        if error.retryable and asked is not None and asked > self.retry.max_retry_after:
            return _copy_error(
                error, f"{self.provider}: rate-limited or unavailable; the provider asked to "
                f"retry after {asked:g} s, more than the {self.retry.max_retry_after:g} s this "
                f"client waits, so it was not retried (HTTP {error.status} "
                f"{detail.removeprefix(f'HTTP {error.status} ')})")
        if error.retryable and attempts > 1:
            return _copy_error(
                error, f"{self.provider}: provider unavailable after {attempts} attempts "
                f"(last: {detail})")
        return error


class _Failed(Exception):
    """One attempt got an error status; carries the mapped ProviderError."""

    def __init__(self, error: ProviderError) -> None:
        super().__init__(str(error))
        self.error = error


def _copy_error(error: ProviderError, message: str) -> ProviderError:
    return ProviderError(
        message, provider=error.provider, status=error.status, error_type=error.error_type,
        code=error.code, request_id=error.request_id, retryable=error.retryable,
        retry_after=error.retry_after,
    )
