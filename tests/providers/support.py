"""Shared helpers for the provider tests: recordings, a replaying transport, captured
events, and request-body validation against the official SDKs' parameter types."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, get_args

import httpx
from pydantic import BaseModel, ConfigDict, TypeAdapter
from typing_extensions import get_type_hints, is_typeddict

from tools_app.engine.events import bind_emitter, reset_emitter
from tools_app.engine.providers.http.retry import RetryPolicy

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "provider-traffic" / "normalized"
CANARY_KEY = "sk-canary-7f3e9d2b41c8a6e0-DO-NOT-LEAK"
_DROPPED_HEADERS = {"content-length", "content-encoding", "transfer-encoding"}


def recording(relative: str) -> dict[str, Any]:
    return json.loads((FIXTURES / relative).read_text())


def recordings(folder: str) -> list[str]:
    return sorted(str(p.relative_to(FIXTURES)) for p in (FIXTURES / folder).glob("*.json"))


# -- responses ---------------------------------------------------------------------------


def recorded_response(interaction: dict[str, Any]) -> httpx.Response:
    """The recorded response, byte for byte (JSON re-serialised, SSE as recorded)."""
    response = interaction["response"]
    headers = {k: v for k, v in response["headers"].items() if k.lower() not in _DROPPED_HEADERS}
    if "sse" in response:
        return httpx.Response(response["status"], headers=headers,
                              content=response["sse"].encode())
    return httpx.Response(response["status"], headers=headers,
                          content=json.dumps(response["json"]).encode())


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, headers={"content-type": "application/json", **(headers or {})},
                          content=json.dumps(body).encode())


def sse_response(text: str, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream", **(headers or {})},
                          content=text.encode())


class CutStream(httpx.AsyncByteStream):
    """A body that sends some bytes and then fails (or just stops) like a dropped link."""

    def __init__(self, chunks: Sequence[bytes], error: Exception | None) -> None:
        self.chunks = chunks
        self.error = error

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        if self.error is not None:
            raise self.error


def cut_sse_response(text: str, cut_at: int, error: Exception | None) -> httpx.Response:
    data = text.encode()
    return httpx.Response(200, headers={"content-type": "text/event-stream"},
                          stream=CutStream([data[:cut_at]], error))


Reply = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]


class Replay:
    """A MockTransport that answers with `replies` in order and keeps every request.

    `validate` checks each request body (the SDK parameter types), so every test that
    sends something also proves the body is one the official SDK would accept."""

    def __init__(self, replies: Sequence[Reply], validate: Callable[[dict[str, Any]], None]
                 | None = None) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []
        self.validate = validate
        self.transport = httpx.MockTransport(self._handle)

    def _handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.validate is not None:
            self.validate(json.loads(request.content))
        if not self.replies:
            raise AssertionError(f"unexpected request #{len(self.requests)}: {request.url}")
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply(request) if callable(reply) else reply

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]


def replay_recording(relative: str, validate: Callable[[dict[str, Any]], None] | None) -> Replay:
    return Replay([recorded_response(i) for i in recording(relative)["interactions"]], validate)


# -- events and waits --------------------------------------------------------------------


@contextmanager
def captured_events() -> Iterator[list[Any]]:
    """Every event emitted (by the adapters and the retry loop) while inside the block."""
    events: list[Any] = []

    async def emitter(event: Any) -> None:
        events.append(event)

    token = bind_emitter(emitter)
    try:
        yield events
    finally:
        reset_emitter(token)


class Sleeps:
    """An injected sleep that records the waits instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def policy(sleeps: Sleeps, *, jitter: float = 0.0, now: float = 1_700_000_000.0,
           **overrides: Any) -> RetryPolicy:
    """A retry policy that never really waits; `jitter` is what random() returns."""
    return RetryPolicy(sleep=sleeps, random=lambda: jitter, clock=lambda: now, **overrides)


def of_kind(events: Sequence[Any], kind: str) -> list[Any]:
    return [e for e in events if e.kind == kind]


# -- request bodies against the official SDK types ---------------------------------------


def _typeddicts(target: Any, found: set[type] | None = None) -> set[type]:
    """Every TypedDict reachable from a type annotation."""
    found = set() if found is None else found
    if isinstance(target, type) and is_typeddict(target):
        if target in found:
            return found
        found.add(target)
        for hint in get_type_hints(target, include_extras=True).values():
            _typeddicts(hint, found)
        return found
    for argument in get_args(target):
        _typeddicts(argument, found)
    return found


def strict_adapter(target: Any) -> TypeAdapter[Any]:
    """A TypeAdapter for an SDK TypedDict that refuses unknown keys at every level.

    The SDK's TypedDicts ignore extra keys by default; the config is set only while the
    adapter is built (pydantic reads it then) and removed afterwards."""
    classes = _typeddicts(target)
    saved = {cls: cls.__dict__.get("__pydantic_config__") for cls in classes}
    for cls in classes:
        cls.__pydantic_config__ = ConfigDict(  # type: ignore[attr-defined]
            extra="forbid", arbitrary_types_allowed=True)
    try:
        return TypeAdapter(target)
    finally:
        for cls, config in saved.items():
            if config is None:
                del cls.__pydantic_config__  # type: ignore[attr-defined]
            else:
                cls.__pydantic_config__ = config  # type: ignore[attr-defined]


def _materialize(value: Any) -> Any:
    """Iterables are validated lazily by pydantic: walking them runs the validation."""
    if isinstance(value, dict):
        return {k: _materialize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ValidatorIterator":
        return [_materialize(v) for v in value]
    return value


@functools.cache
def _openai_adapters() -> tuple[TypeAdapter[Any], TypeAdapter[Any]]:
    from openai.types.chat.completion_create_params import (
        CompletionCreateParamsNonStreaming,
        CompletionCreateParamsStreaming,
    )

    return (strict_adapter(CompletionCreateParamsNonStreaming),
            strict_adapter(CompletionCreateParamsStreaming))


@functools.cache
def _responses_adapters() -> tuple[TypeAdapter[Any], TypeAdapter[Any]]:
    from openai.types.responses.response_create_params import (
        ResponseCreateParamsNonStreaming,
        ResponseCreateParamsStreaming,
    )

    return (strict_adapter(ResponseCreateParamsNonStreaming),
            strict_adapter(ResponseCreateParamsStreaming))


def validate_responses_body(body: dict[str, Any]) -> None:
    """A POST /v1/responses body, against the openai SDK's ResponseCreateParams."""
    non_streaming, streaming = _responses_adapters()
    adapter = streaming if body.get("stream") else non_streaming
    _materialize(adapter.validate_python(body))


@functools.cache
def _anthropic_adapters() -> tuple[TypeAdapter[Any], TypeAdapter[Any]]:
    from anthropic.types.message_create_params import (
        MessageCreateParamsNonStreaming,
        MessageCreateParamsStreaming,
    )

    return (strict_adapter(MessageCreateParamsNonStreaming),
            strict_adapter(MessageCreateParamsStreaming))


def validate_openai_body(body: dict[str, Any]) -> None:
    non_streaming, streaming = _openai_adapters()
    adapter = streaming if body.get("stream") else non_streaming
    _materialize(adapter.validate_python(body))


def validate_anthropic_body(body: dict[str, Any], *, unlisted: Sequence[str] = ()) -> None:
    """`unlisted`: keys the real API accepted in a recording but the installed SDK's
    types no longer list (its 2.x MessageCreateParams has no temperature or top_p)."""
    body = {k: v for k, v in body.items() if k not in unlisted}
    non_streaming, streaming = _anthropic_adapters()
    adapter = streaming if body.get("stream") else non_streaming
    _materialize(adapter.validate_python(body))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _GeminiFunctionCall(_Strict):
    name: str
    args: dict[str, Any] = {}
    id: str | None = None


class _GeminiFunctionResponse(_Strict):
    name: str
    response: dict[str, Any]
    id: str | None = None


class _GeminiPart(_Strict):
    text: str | None = None
    thought: bool | None = None
    thoughtSignature: str | None = None
    functionCall: _GeminiFunctionCall | None = None
    functionResponse: _GeminiFunctionResponse | None = None


class _GeminiContent(_Strict):
    role: str
    parts: list[_GeminiPart]


class _GeminiSchema(_Strict):
    type: str | None = None
    format: str | None = None
    description: str | None = None
    nullable: bool | None = None
    enum: list[str] | None = None
    properties: dict[str, _GeminiSchema] | None = None
    required: list[str] | None = None
    items: _GeminiSchema | None = None
    anyOf: list[_GeminiSchema] | None = None
    minimum: float | None = None
    maximum: float | None = None
    minItems: int | None = None
    maxItems: int | None = None
    minLength: int | None = None
    maxLength: int | None = None
    pattern: str | None = None


class _GeminiDeclaration(_Strict):
    name: str
    description: str
    parameters: _GeminiSchema | None = None


class _GeminiTool(_Strict):
    functionDeclarations: list[_GeminiDeclaration]


class _GeminiRequest(_Strict):
    """GenerateContentRequest, the part of it the adapter writes (from the API reference)."""

    contents: list[_GeminiContent]
    systemInstruction: _GeminiContent | dict[str, Any] | None = None
    tools: list[_GeminiTool] | None = None
    toolConfig: dict[str, Any] | None = None
    generationConfig: dict[str, Any] | None = None


_GEMINI_TYPES = {"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT"}


def validate_gemini_body(body: dict[str, Any]) -> None:
    request = _GeminiRequest.model_validate(body)
    for content in request.contents:
        assert content.role in ("user", "model"), content.role
        for part in content.parts:
            assert sum(x is not None for x in (part.text, part.functionCall,
                                               part.functionResponse)) == 1, part
    for tool in request.tools or ():
        for declaration in tool.functionDeclarations:
            _check_gemini_schema(declaration.parameters)
    mode = ((request.toolConfig or {}).get("functionCallingConfig") or {}).get("mode")
    assert mode in (None, "AUTO", "ANY", "NONE")


def _check_gemini_schema(schema: _GeminiSchema | None) -> None:
    if schema is None:
        return
    assert schema.type is None or schema.type in _GEMINI_TYPES, schema.type
    for child in [*(schema.properties or {}).values(), schema.items, *(schema.anyOf or [])]:
        _check_gemini_schema(child)


# -- comparing bodies --------------------------------------------------------------------


def normalized_openai(body: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI request with the differences that do not matter removed: `n`, a null
    assistant content next to tool calls, and the spacing inside arguments JSON."""
    body = copy.deepcopy(body)
    body.pop("n", None)
    for message in body["messages"]:
        if message["role"] == "assistant" and message.get("content") is None:
            message.pop("content", None)
        for call in message.get("tool_calls", []):
            call["function"]["arguments"] = json.loads(call["function"]["arguments"] or "{}")
    return body


def normalized_anthropic_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic messages without what recorders differ on: whitespace-only text blocks,
    `caller` on echoed tool_use blocks, `is_error: false`, a text-block list as a
    tool_result content."""
    result = []
    for message in copy.deepcopy(messages):
        blocks = []
        for block in message["content"]:
            if block.get("type") == "text" and not block["text"].strip():
                continue
            block.pop("caller", None)
            if block.get("type") == "tool_result":
                if block.get("is_error") is False:
                    block.pop("is_error")
                if isinstance(block.get("content"), list):
                    block["content"] = "".join(b["text"] for b in block["content"])
            blocks.append(block)
        result.append({"role": message["role"], "content": blocks})
    return result
