"""What the fake provider writes to an ASGI connection: a scripted step's reply (JSON
or a stream in the wire's format), the scripted faults (a status, a cut or broken stream,
a hang, a dropped connection), and the routing and ASGI helpers the app uses."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import struct
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode

from .auto import auto_reply
from .conversation import Conversation, Reply, ReplyCall, fill_template, finish_reply
from .script import (
    AutoOptions,
    CutFault,
    FakeScript,
    FakeStep,
    Fault,
    GarbageFault,
    HangFault,
    ResetFault,
    StatusFault,
    StreamErrorFault,
)
from .wires import ANTHROPIC, GEMINI, OPENAI, OPENAI_RESPONSES, StreamItem, Wire, encode_item
from .wires.base import dumps

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]
StreamMode = Literal["sse", "json_array"]

REDACTED = "[redacted]"
SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "x-goog-api-key", "api-key", "cookie"}
)
SECRET_QUERY = frozenset({"key", "api_key", "access_token"})
_GEMINI_PATH = re.compile(
    r"^/v1(?:beta|alpha)?/models/([^/:]+):(generateContent|streamGenerateContent)$"
)
_EMPTY_STEP = FakeStep()
_DEFAULT_CHUNK = 8


@dataclass(slots=True)
class Route:
    wire: Wire
    path_model: str | None = None
    stream: bool = False
    mode: StreamMode = "sse"


@dataclass(slots=True)
class Plan:
    """What to do with one request, decided before any byte is sent."""

    script: str | None
    step: int
    attempt: int = 1
    fault: Fault | None = None
    reply: Reply = field(default_factory=Reply)
    """Unused when a fault that sends no reply (status, reset, garbage) is played."""
    error: str | None = None
    latency_s: float = 0.0
    chunk_size: int = _DEFAULT_CHUNK
    chunk_delay_s: float = 0.0

    @property
    def outcome(self) -> str:
        if self.error is not None:
            return "script_exhausted"
        return f"fault:{self.fault.kind}" if self.fault is not None else "reply"


def provider_route(path: str, query: bytes) -> Route | None:
    if path in ("/v1/chat/completions", "/chat/completions"):
        return Route(OPENAI)
    if path in ("/v1/responses", "/responses"):
        return Route(OPENAI_RESPONSES)
    if path in ("/v1/messages", "/messages"):
        return Route(ANTHROPIC)
    match = _GEMINI_PATH.match(path)
    if match is None:
        return None
    stream = match.group(2) == "streamGenerateContent"
    sse = ("alt", "sse") in parse_qsl(query.decode("latin-1"))
    return Route(GEMINI, path_model=match.group(1), stream=stream,
                  mode="sse" if sse else "json_array")


def step_at(script: FakeScript, index: int) -> FakeStep | None:
    """The step for the `index`-th assistant turn; None when the script is exhausted."""
    if index < len(script.steps):
        return script.steps[index]
    if not script.steps or script.when_exhausted == "auto":
        return _EMPTY_STEP
    if script.when_exhausted == "repeat_last":
        return script.steps[-1]
    return None


def step_reply(step: FakeStep, conversation: Conversation, auto: AutoOptions) -> Reply:
    if not step.has_reply():
        return finish_reply(auto_reply(conversation, auto), conversation)
    reply = Reply(
        text=fill_template(step.text, conversation) if step.text is not None else None,
        calls=[ReplyCall(c.name, c.raw_arguments(), c.id) for c in step.tool_calls],
        finish=step.finish_reason or ("tool_calls" if step.tool_calls else "stop"),
    )
    return finish_reply(reply, conversation)


# -- sending ---------------------------------------------------------------------------


async def send_reply(reply: Reply, plan: Plan, conversation: Conversation, route: Route,
                      send: Send) -> None:
    wire = route.wire
    if not conversation.stream:
        await send_json(send, 200, wire.json_body(reply, conversation), wire.response_headers())
        return
    items = wire.stream_items(reply, conversation, plan.chunk_size)
    content_type, chunks = _encode_stream(wire, items, route.mode)
    await _send_chunks(send, content_type, chunks, plan.chunk_delay_s, wire.response_headers())


def _encode_stream(wire: Wire, items: list[StreamItem],
                   mode: StreamMode) -> tuple[str, list[bytes]]:
    if mode == "json_array":
        # Gemini without alt=sse streams one JSON array, element by element.
        parts = [data if isinstance(data, str) else dumps(data) for _, data in items]
        encoded = [("[" if i == 0 else ",\r\n") + p for i, p in enumerate(parts)]
        return "application/json; charset=UTF-8", [e.encode() for e in encoded] + [b"]"]
    return wire.stream_content_type, [encode_item(i, wire.event_separator) for i in items]


async def _send_chunks(send: Send, content_type: str, chunks: list[bytes], delay_s: float,
                       extra: Headers) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", content_type.encode()),
                            (b"cache-control", b"no-cache"), *extra]})
    if delay_s <= 0:
        # One write for the whole stream: the cheapest for the server, and still a valid
        # stream (clients cannot rely on how events are split across reads anyway).
        await send({"type": "http.response.body", "body": b"".join(chunks), "more_body": False})
        return
    for chunk in chunks:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await asyncio.sleep(delay_s)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def send_json(send: Send, status: int, value: Any, extra: Iterable[tuple[bytes, bytes]] = (),
                     ) -> None:
    body = dumps(value).encode()
    await _send_bytes(send, status, body, "application/json", extra)


async def _send_bytes(send: Send, status: int, body: bytes, content_type: str,
                      extra: Iterable[tuple[bytes, bytes]] = ()) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()),
                            (b"content-length", str(len(body)).encode()), *extra]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


# -- faults ----------------------------------------------------------------------------


async def play_fault(fault: Fault, plan: Plan, conversation: Conversation, route: Route,
                      receive: Receive, send: Send) -> None:
    wire = route.wire
    if isinstance(fault, StatusFault):
        await _send_status_fault(fault, wire, send)
    elif isinstance(fault, ResetFault):
        await _drop_connection(send, receive, hard=not fault.graceful)
    elif isinstance(fault, GarbageFault):
        await _send_bytes(send, 200, fault.body.encode(), fault.content_type)
    elif isinstance(fault, CutFault):
        await _send_cut(fault, plan, plan.reply, conversation, route, receive, send)
    elif isinstance(fault, HangFault):
        await _hang(receive)
    else:
        await _send_stream_error(fault, plan, plan.reply, conversation, route, send)


async def _send_status_fault(fault: StatusFault, wire: Wire, send: Send) -> None:
    headers = list(wire.response_headers())
    if fault.retry_after is not None:
        headers.append((b"retry-after", _header_number(fault.retry_after).encode()))
    if fault.retry_after_ms is not None:
        headers.append((b"retry-after-ms", _header_number(fault.retry_after_ms).encode()))
    headers += [(k.lower().encode(), v.encode()) for k, v in fault.headers.items()]
    if fault.body is None:
        message = fault.message or f"Fake {fault.status} {_phrase(fault.status)}"
        body: bytes = dumps(wire.error_body(fault.status, message, None)).encode()
        content_type = fault.content_type or "application/json"
    elif isinstance(fault.body, str):
        body, content_type = fault.body.encode(), fault.content_type or "text/plain; charset=utf-8"
    else:
        body = dumps(fault.body).encode()
        content_type = fault.content_type or "application/json"
    await _send_bytes(send, fault.status, body, content_type, headers)


async def _send_cut(fault: CutFault, plan: Plan, reply: Reply, conversation: Conversation,
                    route: Route, receive: Receive, send: Send) -> None:
    wire = route.wire
    if conversation.stream:
        content_type, chunks = _encode_stream(wire, wire.stream_items(reply, conversation,
                                                                      plan.chunk_size), route.mode)
        data, length = b"".join(chunks), None
    else:
        data = dumps(wire.json_body(reply, conversation)).encode()
        content_type, length = "application/json", len(data)
    headers: Headers = [(b"content-type", content_type.encode())]
    if length is not None:
        # Announce the whole body so the client knows the cut one is incomplete.
        headers.append((b"content-length", str(length).encode()))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": data[:fault.after_bytes], "more_body": True})
    await _drop_connection(send, receive, hard=False)


async def _send_stream_error(fault: StreamErrorFault, plan: Plan, reply: Reply,
                             conversation: Conversation, route: Route, send: Send) -> None:
    wire = route.wire
    message = fault.message
    if not conversation.stream:
        body = wire.error_body(fault.status, message, fault.error_type)
        await send_json(send, fault.status, body, wire.response_headers())
        return
    items = wire.stream_items(reply, conversation, plan.chunk_size)[:fault.after_events]
    items.append(wire.error_item(fault.status, message, fault.error_type))
    content_type, chunks = _encode_stream(wire, items, route.mode)
    await _send_chunks(send, content_type, chunks, plan.chunk_delay_s, wire.response_headers())


async def _hang(receive: Receive) -> None:
    """Answer nothing until the client disconnects (a server stopping ends the wait
    too: its graceful shutdown is bounded)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _drop_connection(send: Send, receive: Receive, *, hard: bool) -> None:
    """Close the client's connection now: RST (hard) or FIN after the buffered bytes.

    ASGI has no message for this, so the transport is taken from the server's
    send callable (uvicorn's h11 and httptools cycles expose it as `.transport`).
    """
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    if transport is None:
        raise ConnectionAbortedError("fake provider: this ASGI server does not expose its "
                                     "transport, so the connection cannot be dropped")
    if hard:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # Linger 0: close() sends RST, the client sees "connection reset by peer".
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    else:
        transport.close()
    # Wait until the server has seen the disconnect, so it does not complain that the
    # application returned without finishing its response.
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(2):
            while (await receive())["type"] != "http.disconnect":
                pass


# -- small helpers ---------------------------------------------------------------------


async def lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def read_body(receive: Receive) -> bytes:
    message = await receive()
    body = message.get("body", b"")
    if not message.get("more_body"):
        return bytes(body)
    chunks = [body]
    while message.get("more_body"):
        message = await receive()
        chunks.append(message.get("body", b""))
    return b"".join(chunks)


def header_map(scope: Scope) -> dict[str, str]:
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", ()):
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


def redact_query(query: str) -> str:
    if not query:
        return query
    pairs = parse_qsl(query, keep_blank_values=True)
    return urlencode([(k, REDACTED if k.lower() in SECRET_QUERY else v) for k, v in pairs],
                     safe="[]")


def _header_number(value: float | str) -> str:
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else str(value)


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"
