"""The fake provider as a plain ASGI application (no web framework).

Routes
    POST /v1/chat/completions                        OpenAI Chat Completions
    POST /v1/messages                                Anthropic Messages
    POST /v1beta/models/{model}:generateContent      Gemini (also :streamGenerateContent)
    GET  /v1/models                                  OpenAI-style model list
    GET  /_fake/health                               liveness and a few counters
    GET  /_fake/script, POST /_fake/script           read / replace every script
    PUT  /_fake/scripts/{name}, DELETE ...           set / remove one model's script
    POST /_fake/reset                                start-up scripts and settings back, log
                                                     and counters cleared
    GET  /_fake/requests, DELETE /_fake/requests     the request log (secrets redacted)
    GET  /_fake/settings, POST /_fake/settings       {"strict": bool}: read / change

Strict (the default): a request the real API refuses gets that provider's 400 with the
real message, logged as "rejected"; lenient (`--lenient`, or `{"strict": false}`) lets it
through. All state is touched only from the serving event loop, so there are no locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import socket
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode

from pydantic import ValidationError

from .auto import auto_reply, options_from_model
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
    ScriptSet,
    StatusFault,
    StreamErrorFault,
)
from .wires import ANTHROPIC, GEMINI, OPENAI, StreamItem, Wire, WireError, encode_item
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
class _Route:
    wire: Wire
    path_model: str | None = None
    stream: bool = False
    mode: StreamMode = "sse"


@dataclass(slots=True)
class _Plan:
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


class FakeLLMApp:
    """ASGI callable. `scripts` is the start-up script set (what /_fake/reset restores)."""

    def __init__(self, scripts: ScriptSet | None = None, *, strict: bool = True,
                 record_limit: int = 10_000, attempt_memory: int = 100_000) -> None:
        self.initial_scripts = scripts or ScriptSet()
        self.scripts = self.initial_scripts
        self.initial_strict = strict
        self.strict = strict
        self.requests: deque[dict[str, Any]] = deque(maxlen=record_limit)
        self.attempt_memory = attempt_memory
        self._attempts: dict[tuple[str, str, int], int] = {}
        self._seq = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path.startswith("/_fake/"):
            await self._control(method, path, scope, receive, send)
            return
        route = _provider_route(path, scope.get("query_string", b""))
        if route is None:
            await self._not_provider(method, path, send)
        elif method != "POST":
            await _send_json(send, 405, {"error": {"message": f"use POST for {path}"}})
        else:
            await self._provider(route, scope, receive, send)

    # -- provider requests -----------------------------------------------------------

    async def _provider(self, route: _Route, scope: Scope, receive: Receive, send: Send) -> None:
        wire = route.wire
        headers = _header_map(scope)
        body = await _read_body(receive)
        record = self._record(scope, headers, body, wire.name)
        data: Any = None
        try:
            data = json.loads(body)
            if not isinstance(data, dict):
                raise WireError("the request body must be a JSON object")
            if self.strict:
                wire.check(data)
            conversation = wire.parse(data, route.path_model, route.stream)
        except (ValueError, WireError) as exc:
            if isinstance(data, dict):
                model = data.get("model") if route.path_model is None else route.path_model
                record.update(body=data, model=model if isinstance(model, str) else None,
                              stream=route.stream or data.get("stream") is True)
            record.update(outcome="rejected", error=str(exc))
            if isinstance(exc, WireError):
                status, error_body = exc.status, wire.refusal_body(exc)
            else:
                status, error_body = 400, wire.error_body(400, str(exc), None)
            await _send_json(send, status, error_body, wire.response_headers())
            return
        plan = self._plan(conversation, headers, body)
        record.update(body=data, model=conversation.model, stream=conversation.stream,
                      script=plan.script, step=plan.step, attempt=plan.attempt,
                      outcome=plan.outcome)
        if plan.latency_s > 0:
            await asyncio.sleep(plan.latency_s)
        if plan.error is not None:
            await _send_json(send, 400, wire.error_body(400, plan.error, None),
                             wire.response_headers())
        elif plan.fault is not None:
            await _play_fault(plan.fault, plan, conversation, route, receive, send)
        else:
            await _send_reply(plan.reply, plan, conversation, route, send)

    def _plan(self, conversation: Conversation, headers: dict[str, str], body: bytes) -> _Plan:
        index = conversation.assistant_turns
        selected = self.scripts.for_model(conversation.model, headers.get("x-fake-script"))
        if selected is None:
            options, latency_ms = options_from_model(conversation.model) or (AutoOptions(), 0.0)
            reply = finish_reply(auto_reply(conversation, options), conversation)
            return _Plan(script=None, step=index, reply=reply, latency_s=latency_ms / 1000)
        name, script = selected
        plan = _Plan(script=name, step=index, chunk_size=script.chunk_size,
                     chunk_delay_s=script.chunk_delay_ms / 1000)
        step = _step_at(script, index)
        if step is None:
            plan.error = (f"The fake script '{name}' has {len(script.steps)} steps and was "
                          f"asked for step {index + 1}: add a final text step to end the run")
            return plan
        if step.faults:
            plan.attempt = self._attempt(headers, name, index, body)
            plan.fault = step.fault_for_attempt(plan.attempt)
        if plan.fault is None or isinstance(plan.fault, (CutFault, StreamErrorFault)):
            plan.reply = _step_reply(step, conversation, script.auto)
        latency_ms = step.latency_ms if step.latency_ms is not None else script.latency_ms
        plan.latency_s = latency_ms / 1000
        return plan

    def _attempt(self, headers: dict[str, str], script: str, index: int, body: bytes) -> int:
        """Which attempt at this step this request is (1 = first), for fail-then-succeed.

        A retry resends the same body, so the body's hash identifies the conversation;
        identical concurrent conversations should send X-Fake-Conversation to be counted
        apart. X-Fake-Attempt states the attempt outright (stateless).
        """
        explicit = headers.get("x-fake-attempt", "")
        if explicit.isdigit():
            return max(1, int(explicit))
        conversation = (headers.get("x-fake-conversation")
                        or hashlib.blake2b(body, digest_size=16).hexdigest())
        key = (script, conversation, index)
        count = self._attempts.pop(key, 0) + 1
        self._attempts[key] = count
        if len(self._attempts) > self.attempt_memory:
            # Forget the least recently used conversation (dicts keep insertion order).
            del self._attempts[next(iter(self._attempts))]
        return count

    def _record(self, scope: Scope, headers: dict[str, str], body: bytes,
                provider: str) -> dict[str, Any]:
        self._seq += 1
        record: dict[str, Any] = {
            "seq": self._seq,
            "received_at": time.time(),
            "method": scope["method"],
            "path": scope["path"],
            "query": _redact_query(scope.get("query_string", b"").decode("latin-1")),
            # Which connection carried it: requests on one kept-alive connection share
            # the client's address and port.
            "client": list(scope["client"]) if scope.get("client") else None,
            "headers": {k: (REDACTED if k in SECRET_HEADERS else v) for k, v in headers.items()},
            "body": body.decode("utf-8", errors="replace"),
            "provider": provider,
            "model": None,
            "stream": None,
            "script": None,
            "step": None,
            "attempt": None,
            "outcome": None,
            "error": None,
        }
        self.requests.append(record)
        return record

    async def _not_provider(self, method: str, path: str, send: Send) -> None:
        if method == "GET" and path in ("/v1/models", "/models"):
            names = [n for n in self.scripts.scripts if n != "*"] or ["fake-k1-p1"]
            await _send_json(send, 200, {"object": "list", "data": [
                {"id": n, "object": "model", "created": 0, "owned_by": "fake-llm"}
                for n in names]})
            return
        await _send_json(send, 404, {"error": {"message": f"no route for {method} {path}",
                                               "type": "not_found"}})

    # -- control endpoints -----------------------------------------------------------

    async def _control(self, method: str, path: str, scope: Scope, receive: Receive,
                       send: Send) -> None:
        body = await _read_body(receive)
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        try:
            status, value = self._control_action(method, path, body, query)
        except ValidationError as exc:
            status, value = 422, {"error": "invalid script",
                                  "details": json.loads(exc.json(include_url=False))}
        except ValueError as exc:
            status, value = 400, {"error": str(exc)}
        await _send_json(send, status, value)

    def _control_action(self, method: str, path: str, body: bytes,
                        query: dict[str, str]) -> tuple[int, Any]:
        action = (method, path)
        if action == ("GET", "/_fake/health"):
            return 200, {"ok": True, "scripts": sorted(self.scripts.scripts),
                         "requests": self._seq, "strict": self.strict}
        if action == ("GET", "/_fake/settings"):
            return 200, self._settings()
        if action == ("POST", "/_fake/settings"):
            self._change_settings(body)
            return 200, self._settings()
        if action == ("GET", "/_fake/script"):
            return 200, self.scripts.model_dump(mode="json")
        if action == ("POST", "/_fake/script"):
            self.scripts = ScriptSet.model_validate_json(body)
            return 200, {"scripts": sorted(self.scripts.scripts)}
        if action == ("POST", "/_fake/reset"):
            self.reset()
            return 200, {"scripts": sorted(self.scripts.scripts)}
        if action == ("GET", "/_fake/requests"):
            return 200, self._request_log(query)
        if action == ("DELETE", "/_fake/requests"):
            self.requests.clear()
            return 200, {"cleared": True}
        if path.startswith("/_fake/scripts/") and method in ("PUT", "DELETE"):
            return self._one_script(method, path.removeprefix("/_fake/scripts/"), body)
        return 404, {"error": f"no control route for {method} {path}"}

    def _one_script(self, method: str, name: str, body: bytes) -> tuple[int, Any]:
        if not name:
            raise ValueError("the script name is missing from the path")
        scripts = dict(self.scripts.scripts)
        if method == "PUT":
            scripts[name] = FakeScript.model_validate_json(body)
        elif scripts.pop(name, None) is None:
            return 404, {"error": f"no script named {name!r}"}
        self.scripts = ScriptSet(scripts=scripts)
        return 200, {"scripts": sorted(scripts)}

    def _request_log(self, query: dict[str, str]) -> dict[str, Any]:
        since = int(query["since"]) if query.get("since", "").isdigit() else 0
        model = query.get("model")
        items = [r for r in self.requests
                 if r["seq"] > since and (model is None or r["model"] == model)]
        return {"count": len(items), "requests": items}

    def _settings(self) -> dict[str, Any]:
        return {"strict": self.strict}

    def _change_settings(self, body: bytes) -> None:
        try:
            settings = json.loads(body or b"{}")
        except ValueError:
            raise ValueError("the settings must be a JSON object") from None
        if not isinstance(settings, dict):
            raise ValueError("the settings must be a JSON object")
        unknown = sorted(set(settings) - {"strict"})
        if unknown:
            raise ValueError(f"unknown settings: {', '.join(unknown)} (known: strict)")
        if "strict" in settings:
            if not isinstance(settings["strict"], bool):
                raise ValueError("strict must be true or false")
            self.strict = settings["strict"]

    def reset(self) -> None:
        """Back to the start-up scripts and settings; forget the request log and attempt
        counters."""
        self.scripts = self.initial_scripts
        self.strict = self.initial_strict
        self.requests.clear()
        self._attempts.clear()
        self._seq = 0


# -- routing and plans -----------------------------------------------------------------


def _provider_route(path: str, query: bytes) -> _Route | None:
    if path in ("/v1/chat/completions", "/chat/completions"):
        return _Route(OPENAI)
    if path in ("/v1/messages", "/messages"):
        return _Route(ANTHROPIC)
    match = _GEMINI_PATH.match(path)
    if match is None:
        return None
    stream = match.group(2) == "streamGenerateContent"
    sse = ("alt", "sse") in parse_qsl(query.decode("latin-1"))
    return _Route(GEMINI, path_model=match.group(1), stream=stream,
                  mode="sse" if sse else "json_array")


def _step_at(script: FakeScript, index: int) -> FakeStep | None:
    """The step for the `index`-th assistant turn; None when the script is exhausted."""
    if index < len(script.steps):
        return script.steps[index]
    if not script.steps or script.when_exhausted == "auto":
        return _EMPTY_STEP
    if script.when_exhausted == "repeat_last":
        return script.steps[-1]
    return None


def _step_reply(step: FakeStep, conversation: Conversation, auto: AutoOptions) -> Reply:
    if not step.has_reply():
        return finish_reply(auto_reply(conversation, auto), conversation)
    reply = Reply(
        text=fill_template(step.text, conversation) if step.text is not None else None,
        calls=[ReplyCall(c.name, c.raw_arguments(), c.id) for c in step.tool_calls],
        finish=step.finish_reason or ("tool_calls" if step.tool_calls else "stop"),
    )
    return finish_reply(reply, conversation)


# -- sending ---------------------------------------------------------------------------


async def _send_reply(reply: Reply, plan: _Plan, conversation: Conversation, route: _Route,
                      send: Send) -> None:
    wire = route.wire
    if not conversation.stream:
        await _send_json(send, 200, wire.json_body(reply, conversation), wire.response_headers())
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


async def _send_json(send: Send, status: int, value: Any, extra: Iterable[tuple[bytes, bytes]] = (),
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


async def _play_fault(fault: Fault, plan: _Plan, conversation: Conversation, route: _Route,
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


async def _send_cut(fault: CutFault, plan: _Plan, reply: Reply, conversation: Conversation,
                    route: _Route, receive: Receive, send: Send) -> None:
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


async def _send_stream_error(fault: StreamErrorFault, plan: _Plan, reply: Reply,
                             conversation: Conversation, route: _Route, send: Send) -> None:
    wire = route.wire
    message = fault.message
    if not conversation.stream:
        body = wire.error_body(fault.status, message, fault.error_type)
        await _send_json(send, fault.status, body, wire.response_headers())
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


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _read_body(receive: Receive) -> bytes:
    message = await receive()
    body = message.get("body", b"")
    if not message.get("more_body"):
        return bytes(body)
    chunks = [body]
    while message.get("more_body"):
        message = await receive()
        chunks.append(message.get("body", b""))
    return b"".join(chunks)


def _header_map(scope: Scope) -> dict[str, str]:
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", ()):
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


def _redact_query(query: str) -> str:
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
