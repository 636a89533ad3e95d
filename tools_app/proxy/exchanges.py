"""One proxied exchange as it happened (`Exchange`), and its response assembled for the
record (`outcome`): a JSON body parsed by the provider's adapter, a streamed body folded
by the adapter's own stream parser (`read_stream`, the one runs use) from the bytes the
client was sent, a provider's error read from its body.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
from django.contrib.auth.models import User

from tools_app.engine import ChatResponse, json_nesting
from tools_app.engine.errors import ProviderError
from tools_app.engine.providers.http.client import EventStream
from tools_app.engine.providers.http.wire_errors import ErrorDetails
from tools_app.proxy.dialects import Dialect
from tools_app.proxy.upstream import Target


@dataclass
class Exchange:
    user: User
    target: Target
    dialect: Dialect
    request_body: bytes
    run_header: str
    started_ns: int
    finished_ns: int = 0
    status: int = 0
    content_type: str = ""
    response_chunks: list[bytes] = field(default_factory=list)
    response_size: int = 0
    response_cut: bool = False
    """The response was larger than the record keeps: its content is not recorded."""
    failure: str = ""
    """Why no response came (the provider unreachable, its stream broken off)."""
    client_left: bool = False
    """The client went away before the relay ended: the record says so unless what it
    was sent reads as a whole answer (an SDK stops reading at the stream's last event
    and closes, before the provider's response has ended)."""
    client_secret: str = ""
    """The client's token: redacted from the record like the endpoint's key."""

    def keep(self, chunk: bytes, limit: int) -> None:
        """Keep a piece of the response for the record, up to `limit` bytes in all."""
        if self.response_cut:
            return
        self.response_size += len(chunk)
        if self.response_size > limit:
            self.response_cut, self.response_chunks = True, []
            return
        self.response_chunks.append(chunk)

    @property
    def response_body(self) -> bytes:
        return b"".join(self.response_chunks)

    @property
    def secrets(self) -> tuple[str, ...]:
        return tuple(s for s in (*self.target.secrets, self.client_secret) if s)

    def handed(self) -> Handed:
        """The exchange as plain values, for the recorder process."""
        return Handed(user_id=self.user.pk, endpoint_id=self.target.endpoint_id,
                      endpoint_name=self.target.endpoint_name, kind=self.target.kind,
                      dialect=self.dialect.name, request_body=self.request_body,
                      run_header=self.run_header, started_ns=self.started_ns,
                      finished_ns=self.finished_ns, status=self.status,
                      content_type=self.content_type, response_body=self.response_body,
                      response_cut=self.response_cut, failure=self.failure,
                      client_left=self.client_left, secrets=self.secrets)


@dataclass(frozen=True)
class Handed:
    """An exchange handed to the recorder process: what its record is made of, without
    the serving process's objects (the user's row, the endpoint's built client). The
    secrets travel with it over the pipe, to be redacted there; they are never stored."""
    user_id: int
    endpoint_id: str
    endpoint_name: str
    kind: str
    dialect: str
    request_body: bytes
    run_header: str
    started_ns: int
    finished_ns: int
    status: int
    content_type: str
    response_body: bytes
    response_cut: bool
    failure: str
    client_left: bool
    secrets: tuple[str, ...] = field(repr=False)  # never in a log line or a traceback

    def exchange(self, user: User, target: Target, dialect: Dialect) -> Exchange:
        """The exchange again, in the recorder process (`target`: built for reading)."""
        return Exchange(user=user, target=target, dialect=dialect,
                        request_body=self.request_body, run_header=self.run_header,
                        started_ns=self.started_ns, finished_ns=self.finished_ns,
                        status=self.status, content_type=self.content_type,
                        response_chunks=[self.response_body],
                        response_size=len(self.response_body),
                        response_cut=self.response_cut, failure=self.failure,
                        client_left=self.client_left)


CLIENT_LEFT = "the client went away before the stream ended"


@dataclass(frozen=True)
class Outcome:
    response: ChatResponse | None = None
    error_type: str = ""
    error_message: str = ""


async def outcome(exchange: Exchange) -> Outcome:
    """What the provider answered, as the record holds it."""
    if exchange.failure:
        return Outcome(error_type="proxy_error", error_message=exchange.failure)
    if exchange.status >= 400:
        return _provider_error(exchange)
    if exchange.response_cut:
        return _client_left() if exchange.client_left else Outcome()
    adapter = exchange.target.adapter
    try:
        if "text/event-stream" in exchange.content_type:
            body = await adapter.read_stream(_replayed_stream(exchange))
        else:
            body = json_nesting.loads(exchange.response_body)
            if not isinstance(body, dict):
                raise adapter.invalid("the body is not a JSON object", body)
        return Outcome(response=adapter.parse_response(body, None))
    except ProviderError as error:
        if exchange.client_left:
            return _client_left()
        return Outcome(error_type=error.error_type or "invalid_response",
                       error_message=str(error))
    except ValueError as error:
        if exchange.client_left:
            return _client_left()
        return Outcome(error_type="invalid_response",
                       error_message=f"the response is not JSON: {error}")


def _client_left() -> Outcome:
    """The client left a stream that, as far as it was sent, is not a whole answer."""
    return Outcome(error_type="proxy_error", error_message=CLIENT_LEFT)


def _provider_error(exchange: Exchange) -> Outcome:
    try:
        body: Any = json_nesting.loads(exchange.response_body)
    except ValueError:
        body = None
    details = ErrorDetails.from_body(body)
    text = exchange.response_body.decode("utf-8", "replace")
    return Outcome(error_type=details.error_type or f"http_{exchange.status}",
                   error_message=f"HTTP {exchange.status}: "
                                 f"{details.describe() if details.message else text}")


def _replayed_stream(exchange: Exchange) -> EventStream:
    """The bytes the client was sent, as the event stream the adapter reads."""
    http = exchange.target.adapter.http
    response = httpx.Response(exchange.status, content=exchange.response_body,
                              headers={"content-type": exchange.content_type})
    return EventStream(http.provider, response, http.redactor, http.timeouts, attempt=1)
