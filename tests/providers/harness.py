"""One description per provider, so the fault tests run against all three adapters."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from tools_app.engine.providers.adapter import WireChatModel
from tools_app.engine.providers.anthropic import AnthropicChatModel
from tools_app.engine.providers.gemini import GeminiChatModel
from tools_app.engine.providers.openai import OpenAIChatModel

from .support import (
    Replay,
    json_response,
    sse_response,
    validate_anthropic_body,
    validate_gemini_body,
    validate_openai_body,
)
from .wire import (
    anthropic_events,
    anthropic_message,
    anthropic_sse,
    gemini_chunks,
    gemini_response,
    gemini_sse,
    openai_chunks,
    openai_completion,
    openai_sse,
    sse_text,
)

CALL_ARGUMENTS = {"path": "notes/a-rather-long-file-name.txt", "content": "x" * 40}


@dataclass(frozen=True)
class Harness:
    name: str
    factory: type[WireChatModel]
    model_name: str
    validate: Callable[[dict[str, Any]], None]
    ok_body: Callable[[], dict[str, Any]]
    ok_sse: Callable[[], str]
    call_sse: Callable[[], str]
    error_event_sse: Callable[[], str]
    error_body: Callable[[str, str], dict[str, Any]]

    def __str__(self) -> str:
        return self.name

    def model(self, replay: Replay, **overrides: Any) -> WireChatModel:
        overrides.setdefault("api_key", "test-key")
        return self.factory(model=self.model_name, transport=replay.transport, **overrides)

    def ok(self) -> httpx.Response:
        return json_response(200, self.ok_body())

    def ok_stream(self) -> httpx.Response:
        return sse_response(self.ok_sse())

    def error(self, status: int, kind: str, message: str,
              headers: dict[str, str] | None = None) -> httpx.Response:
        return json_response(status, self.error_body(kind, message), headers)


def _openai_error(kind: str, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _anthropic_error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message},
            "request_id": "req_test"}


def _gemini_error(kind: str, message: str) -> dict[str, Any]:
    return {"error": {"code": 500, "message": message, "status": kind}}


def _openai_error_event() -> str:
    chunks = openai_chunks(text="Working on it")[:2]
    error = {"error": {"message": "The server had an error", "type": "server_error",
                       "code": "overloaded"}}
    return sse_text([(None, c) for c in chunks] + [(None, error)])


def _anthropic_error_event() -> str:
    events: list[tuple[str | None, Any]] = list(anthropic_events(text="Working on it")[:3])
    events.append(("error", {"type": "error", "error": {"type": "overloaded_error",
                                                        "message": "Overloaded"}}))
    return sse_text(events)


def _gemini_error_event() -> str:
    chunks = gemini_chunks(text="Working on it")[:1]
    error = {"error": {"code": 503, "message": "The model is overloaded.",
                       "status": "UNAVAILABLE"}}
    return sse_text([(None, c) for c in chunks] + [(None, error)])


OPENAI = Harness(
    "openai", OpenAIChatModel, "gpt-4o", validate_openai_body,
    lambda: openai_completion(text="ok"), lambda: openai_sse(text="ok"),
    lambda: openai_sse(calls=[("call_1", "write_file", CALL_ARGUMENTS)]),
    _openai_error_event, _openai_error)
ANTHROPIC = Harness(
    "anthropic", AnthropicChatModel, "claude-sonnet-4-5", validate_anthropic_body,
    lambda: anthropic_message(text="ok"), lambda: anthropic_sse(text="ok"),
    lambda: anthropic_sse(calls=[("toolu_1", "write_file", CALL_ARGUMENTS)]),
    _anthropic_error_event, _anthropic_error)
GEMINI = Harness(
    "gemini", GeminiChatModel, "gemini-2.5-flash", validate_gemini_body,
    lambda: gemini_response(text="ok"), lambda: gemini_sse(text="ok"),
    lambda: gemini_sse(calls=[("write_file", CALL_ARGUMENTS)]),
    _gemini_error_event, _gemini_error)

HARNESSES = [OPENAI, ANTHROPIC, GEMINI]


def inside_arguments(sse: str) -> int:
    """A byte offset in the middle of the streamed tool-call arguments."""
    return sse.encode().index(b"xxxxxxx") + 3
