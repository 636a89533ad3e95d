"""The HTTP client every wire adapter uses: send a JSON request, or open an event stream.

    ProviderHttpClient.post_json()    one JSON request, retried per RetryPolicy
    ProviderHttpClient.open_stream()  the same, until the response headers; the
                                      event stream itself is never retried
    ProviderHttpClient.aclose()       closes the connections it owns

Requests go through an `httpx.AsyncClient` (clients.py: aiohttp's pool under httpx's
API). Where the client comes from (the endpoint's settings, endpoint.py) decides who
closes it:

    http_client=   an AsyncClient the caller owns, used as it is
    clients=       a SharedHttpClients cache the caller owns (the app: one client per
                   endpoint and event loop, shared by every run)
    neither        the model keeps its own cache and closes it in aclose(); with
                   `transport=` (tests: httpx.MockTransport) its client runs on that
                   transport, which is left open

Credentials are headers of each request, never part of the client, so models with
different keys can share one. Every failed attempt is reported with
`emit(ProviderAttempt(...))` and logged; every failure is a ProviderError
(wire_errors.py), scrubbed of the model's secrets (redaction.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from tools_app.engine.errors import ModelTimeout, ProviderError
from tools_app.engine.events import ProviderAttempt, ProviderWireRequest, emit, observed
from tools_app.engine.providers.http.clients import SharedHttpClients, new_client
from tools_app.engine.providers.http.endpoint import EndpointSettings
from tools_app.engine.providers.http.jsoncodec import decode_json_or_none, encode_json
from tools_app.engine.providers.http.redaction import Redactor, is_sensitive_header
from tools_app.engine.providers.http.retry import AttemptFailed, with_retries
from tools_app.engine.providers.http.sse import SseDecoder, SseEvent
from tools_app.engine.providers.http.wire_errors import (
    ErrorDetails,
    ProviderStreamError,
    StreamTimeout,
    invalid_response_error,
    request_id_from,
    status_error,
    transport_error,
)

logger = logging.getLogger(__name__)

DRAIN_TIMEOUT = 0.5
# How much of a stream's raw text an observed run keeps for its wire view.
RAW_STREAM_LIMIT = 256 * 1024

# Every request is a JSON POST; the headers every request carries, before the caller's
# (which override them). httpx decodes the encodings offered here, and only those.
USER_AGENT = f"agentforge-web python-httpx/{httpx.__version__}"
_DEFAULT_HEADERS = {"accept": "application/json", "accept-encoding": "gzip, deflate",
                    "content-type": "application/json", "user-agent": USER_AGENT}
_SSE_ACCEPT = "text/event-stream"
_DECODED_CONTENT_CODINGS = frozenset({"identity", "gzip", "deflate"})
_FRAMING_TRANSFER_CODINGS = frozenset({"identity", "chunked"})


@dataclass(frozen=True)
class JsonResponse:
    """A successful non-streamed response, before its body is decoded (see `decode`)."""

    status: int
    content: bytes
    headers: httpx.Headers
    attempt: int


class ProviderHttpClient:
    """Sends with credentials, retries, maps failures; see the module docstring."""

    def __init__(self, provider: str, settings: EndpointSettings, *,
                 credentials: Mapping[str, str] | None = None,
                 default_headers: Mapping[str, str] | None = None) -> None:
        """`settings` with its base URL known (EndpointSettings.for_provider);
        `credentials`: the headers that carry the API key; `default_headers`: the
        adapter's own, which the endpoint's extra headers override."""
        self.provider = provider
        self.config = settings.connection()
        self.base_url = self.config.base_url
        self.retry = settings.retry_policy()
        self.timeouts = self.config.timeouts
        self._http_client = settings.http_client
        self._owns_clients = settings.http_client is None and settings.clients is None
        self._transport = settings.transport
        self._clients = self._own_clients() if settings.clients is None else settings.clients
        headers = {**(default_headers or {}), **settings.extra_headers}
        plain = {k: v for k, v in headers.items() if not is_sensitive_header(k)}
        secret = {k: v for k, v in headers.items() if is_sensitive_header(k)}
        self._json_headers = httpx.Headers(_DEFAULT_HEADERS)
        self._json_headers.update({**plain, **secret, **(credentials or {})})
        self._stream_headers = self._json_headers.copy()
        self._stream_headers["accept"] = _SSE_ACCEPT
        self._extensions = {"timeout": self.timeouts.as_dict()}
        self._urls: dict[str, httpx.URL] = {}
        self.redactor = Redactor.for_values([*secret.values(), *(credentials or {}).values()])

    def __repr__(self) -> str:
        return f"ProviderHttpClient(provider={self.provider!r}, base_url={self.base_url!r})"

    def _own_clients(self) -> SharedHttpClients:
        transport = self._transport
        return SharedHttpClients(lambda config: new_client(config, transport))

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    def request_headers(self, *, stream: bool) -> httpx.Headers:
        """A copy of the headers every request carries (credentials included): the
        recording proxy forwards a client's body with them."""
        return (self._stream_headers if stream else self._json_headers).copy()

    def _parsed_url(self, url: str) -> httpx.URL:
        parsed = self._urls.get(url)
        if parsed is None:
            parsed = self._urls[url] = httpx.URL(url)
        return parsed

    def client(self) -> httpx.AsyncClient:
        """The AsyncClient for this endpoint in the running event loop."""
        if self._http_client is not None:
            return self._http_client
        return self._clients.get(self.config)

    async def aclose(self) -> None:
        """Close the clients this object owns (an injected transport is left open);
        a later request opens new ones. Injected clients are the caller's to close."""
        if not self._owns_clients:
            return
        if self._transport is not None:
            self._clients = self._own_clients()  # nothing to release but the transport
            return
        await self._clients.aclose_all()

    async def post_json(self, path: str, body: dict[str, Any]) -> JsonResponse:
        content = _encoded_or_none(body)
        url = await self._announce(path, body, content, stream=False)
        if content is None:
            content = encode_json(body)  # raises what made it fail (after the announce)
        (response, content), attempt = await self._with_retries(
            lambda: self._attempt_json(url, content))
        return JsonResponse(response.status_code, content, response.headers, attempt)

    def decode(self, response: JsonResponse) -> tuple[Any, str | None]:
        """The JSON body (scrubbed of secrets) and the request id of a response."""
        decoded = decode_json_or_none(response.content)
        request_id = request_id_from(response.headers, decoded)
        if decoded is None:
            raise invalid_response_error(self.provider, "the body is not JSON",
                                         response.content, self.redactor, request_id=request_id)
        return self.redactor.decoded_json(decoded, response.content), request_id

    @asynccontextmanager
    async def open_stream(self, path: str, body: dict[str, Any]) -> AsyncIterator[EventStream]:
        content = _encoded_or_none(body)
        url = await self._announce(path, body, content, stream=True)
        if content is None:
            content = encode_json(body)  # raises what made it fail (after the announce)
        response, attempt = await self._with_retries(
            lambda: self._attempt_stream(url, content))
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
                                   error=str(error), retryable=error.retryable, wait_s=wait,
                                   timed_out=isinstance(error, ModelTimeout)))

    # -- internals ---------------------------------------------------------------------

    async def _announce(self, path: str, body: dict[str, Any], content: bytes | None, *,
                        stream: bool) -> str:
        url = self.url(path)
        if observed():
            await emit(ProviderWireRequest(provider=self.provider,
                                           url=self.redactor.text(url), body=body,
                                           content=content, stream=stream))
        return url

    async def _send(self, url: str, content: bytes, *, stream: bool) -> httpx.Response:
        """One attempt, up to the response headers (the body still unread).

        The request is built here rather than by `client.build_request()`, which would
        parse the URL again and merge headers and cookies into it on every request, a
        large share of the client's CPU under load: the URL is parsed once per path, and
        the headers are complete already (the client adds none: it has no defaults and
        no cookies)."""
        request = httpx.Request(
            "POST", self._parsed_url(url), content=content,
            headers=self._stream_headers if stream else self._json_headers,
            extensions=self._extensions)
        response = await self.client().send(request, stream=True)
        try:
            self._check_codings(response)
        except ProviderError:
            await response.aclose()
            raise
        return response

    def _check_codings(self, response: httpx.Response) -> None:
        """A body in a coding httpx does not undo would be read as the body itself:
        refuse it (a misconfigured proxy or server, never retried)."""
        for header, known in (("transfer-encoding", _FRAMING_TRANSFER_CODINGS),
                              ("content-encoding", _DECODED_CONTENT_CODINGS)):
            codings = [c.strip().lower() for value in response.headers.get_list(header)
                       for c in value.split(",") if c.strip()]
            unknown = [c for c in codings if c not in known]
            if unknown:
                raise ProviderError(
                    f"{self.provider}: the response body uses {header} "
                    f"{', '.join(unknown)!s}, which this client cannot decode (it asks for "
                    f"{_DEFAULT_HEADERS['accept-encoding']}); check proxies between here "
                    "and the provider",
                    provider=self.provider, status=response.status_code,
                    request_id=request_id_from(response.headers), retryable=False)

    async def _attempt_json(self, url: str, content: bytes) -> tuple[httpx.Response, bytes]:
        response = await self._send(url, content, stream=False)
        try:
            body = await response.aread()
        finally:
            await response.aclose()
        if not response.is_success:
            raise AttemptFailed(status_error(self.provider, response, body, self.redactor,
                                             self.retry.clock))
        return response, body

    async def _attempt_stream(self, url: str, content: bytes) -> httpx.Response:
        response = await self._send(url, content, stream=True)
        if not response.is_success:
            try:
                body = await response.aread()
            finally:
                await response.aclose()
            raise AttemptFailed(status_error(self.provider, response, body, self.redactor,
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
        body = decode_json_or_none(content)
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
        async def mapped() -> T:
            try:
                return await attempt()
            except httpx.RequestError as exc:
                raise AttemptFailed(transport_error(self.provider, exc, self.timeouts,
                                                    self.redactor)) from None

        return await with_retries(mapped, provider=self.provider, policy=self.retry,
                                  report=self.report_attempt)


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
    # The stream's lines as they arrived (redacted, capped), kept only when a run observes
    # events: the run page shows them beside the assembled response.
    raw_lines: list[str] | None = field(init=False, default=None)
    raw_chars: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.request_id = request_id_from(self.response.headers)
        if observed():
            self.raw_lines = []

    def _keep_raw(self, line: str) -> None:
        if self.raw_lines is None or self.raw_chars > RAW_STREAM_LIMIT:
            return
        self.raw_chars += len(line) + 1
        if self.raw_chars > RAW_STREAM_LIMIT:
            self.raw_lines.append(f"… (the rest of the stream is not kept: over "
                                  f"{RAW_STREAM_LIMIT} characters)")
            return
        self.raw_lines.append(self.redactor.text(line))

    def raw_text(self) -> str | None:
        """The lines kept so far, one per line, or None when none were kept."""
        return "\n".join(self.raw_lines) if self.raw_lines is not None else None

    @property
    def status(self) -> int:
        return self.response.status_code

    async def events(self) -> AsyncGenerator[SseEvent]:
        decoder = SseDecoder()
        try:
            async for line in self.response.aiter_lines():
                self._keep_raw(line)
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
            kind = StreamTimeout if isinstance(cause, ModelTimeout) else ProviderStreamError
            raise self.broken(f"the response stream broke ({detail})", kind=kind) from None

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

    def broken(self, reason: str, *, kind: type[ProviderStreamError] = ProviderStreamError,
               **details: Any) -> ProviderStreamError:
        """The error for a stream that cannot be used; nothing from it is returned."""
        return kind(
            f"{self.provider}: {reason} after {self.events_seen} events; the partial "
            "response was discarded and no tool call from it was executed",
            provider=self.provider, status=self.status, request_id=self.request_id,
            retryable=False, **details,
        )


def _encoded_or_none(body: dict[str, Any]) -> bytes | None:
    """The body as it is sent, or None if it cannot be (NaN, a value JSON has not):
    the request then fails with encode_json's own error, once it is announced."""
    try:
        return encode_json(body)
    except (TypeError, ValueError):
        return None
