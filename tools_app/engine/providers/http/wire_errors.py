"""Every provider failure as one ProviderError, built from what the provider said.

An error status becomes a ProviderError carrying the provider's error body (type, code,
message: OpenAI's, Gemini's and Anthropic's shapes), its request id and Retry-After,
and whether the SDKs' rules say it may be retried. A connection failure or timeout
becomes one naming the phase and the limit that was hit. Every text that came from the
server or the transport is scrubbed of the model's credentials first (redaction.py).
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from tools_app.engine.errors import ModelTimeout, ProviderError
from tools_app.engine.outbound import OutboundRefusedError
from tools_app.engine.providers.http.jsoncodec import decode_json_or_none
from tools_app.engine.providers.http.redaction import Redactor

EXCERPT_BYTES = 512

_RETRYABLE_STATUSES = frozenset({408, 409, 429})
_REQUEST_ID_HEADERS = ("x-request-id", "request-id", "x-goog-request-id")


class ProviderStreamError(ProviderError):
    """The response stream started and then failed: it broke, carried an error event,
    or ended inside a tool call. Never retried (the SDKs' rule), and nothing from the
    broken stream is returned, so no partial tool call can run."""


class StreamTimeout(ProviderStreamError, ModelTimeout):
    """The response stream started, then went silent longer than the endpoint's timeout:
    a broken stream (never retried) that is also a timeout."""


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
    body's `request_id`."""
    for name in _REQUEST_ID_HEADERS:
        value: str | None = headers.get(name)
        if value:
            return value
    in_body = body.get("request_id") if isinstance(body, dict) else None
    return in_body if isinstance(in_body, str) else None


def excerpt(content: bytes | str, redactor: Redactor) -> str:
    """The first 512 bytes of a body, decoded leniently and scrubbed of secrets."""
    raw = content if isinstance(content, bytes) else content.encode("utf-8", "replace")
    text = raw[:EXCERPT_BYTES].decode("utf-8", "replace")
    suffix = f" ... [{len(raw) - EXCERPT_BYTES} more bytes]" if len(raw) > EXCERPT_BYTES else ""
    return redactor.text(text) + suffix


def status_error(
    provider: str, response: httpx.Response, content: bytes, redactor: Redactor,
    clock: Callable[[], float] = time.time,
) -> ProviderError:
    """The ProviderError for a response with an error status."""
    body = decode_json_or_none(content)
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
    if isinstance(exc, OutboundRefusedError):
        return ProviderError(f"{provider}: {detail}", provider=provider, retryable=False)
    if isinstance(exc, httpx.TimeoutException):
        connecting = isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout)
        limit = timeouts.connect if connecting else timeouts.read
        phase = "connecting" if connecting else "waiting for data"
        return ModelTimeout(
            f"{provider}: timed out after {limit:g} s {phase} ({type(exc).__name__})",
            provider=provider, retryable=True)
    message = f"{provider}: connection failed ({type(exc).__name__}: {detail})"
    retryable = isinstance(exc, (httpx.NetworkError, httpx.RemoteProtocolError))
    return ProviderError(message, provider=provider, retryable=retryable)


def copy_error(error: ProviderError, message: str) -> ProviderError:
    """`error` with another message (and the same class: a timeout stays one)."""
    return type(error)(
        message, provider=error.provider, status=error.status, error_type=error.error_type,
        code=error.code, request_id=error.request_id, retryable=error.retryable,
        retry_after=error.retry_after,
    )
