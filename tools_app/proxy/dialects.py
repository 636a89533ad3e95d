"""The two wire formats the proxy speaks: OpenAI Chat Completions and Anthropic Messages.

A dialect reads what the recording needs from a client's request (model, stream flag,
messages, system text, tool definitions, tool results the client marked as errors), as
`tools_app.ingest.messages.Message`s, and writes the error body its provider answers
with, so a refused client sees an error its SDK understands.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tools_app.ingest.messages import Message, ProposedCall, as_text

JsonObject = dict[str, Any]


@dataclass
class ProxiedRequest:
    model: str = ""
    stream: bool = False
    messages: list[Message] = field(default_factory=list)
    system: str | None = None
    tools: list[JsonObject] = field(default_factory=list)
    failed_results: set[str] = field(default_factory=set)
    """Call ids whose result the client marked as an error (Anthropic's `is_error`)."""


@dataclass(frozen=True)
class Dialect:
    name: str
    kinds: frozenset[str]
    """The endpoint kinds that speak this format."""
    path: str
    """The path under the endpoint's base URL, as its provider adapter has it."""
    read: Callable[[JsonObject], ProxiedRequest]
    error: Callable[[int, str, str], JsonObject]
    """(status, code, message) -> the body the provider would answer."""


# -- OpenAI Chat Completions --------------------------------------------------------------


def _openai_request(body: JsonObject) -> ProxiedRequest:
    request = ProxiedRequest(model=_str(body.get("model")), stream=body.get("stream") is True)
    system: list[str] = []
    for item in _list(body.get("messages")):
        if not isinstance(item, dict):
            continue
        role = _str(item.get("role"))
        text = _openai_text(item.get("content"))
        if role in ("system", "developer"):
            system.append(text or "")
        elif role == "tool":
            request.messages.append(Message(role="tool", text=text,
                                            tool_call_id=_str(item.get("tool_call_id"))))
        else:
            request.messages.append(Message(role=role, text=text,
                                            calls=_openai_calls(item.get("tool_calls"))))
    request.system = "\n".join(system) if system else None
    request.tools = [t for t in _list(body.get("tools")) if isinstance(t, dict)]
    return request


def _openai_text(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content
    parts = [p.get("text") for p in _list(content) if isinstance(p, dict)]
    texts = [p for p in parts if isinstance(p, str)]
    return "".join(texts) if texts else None


def _openai_calls(calls: Any) -> list[ProposedCall]:
    out = []
    for call in _list(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            out.append(ProposedCall(_str(call.get("id")), _str(function.get("name")),
                                    as_text(function.get("arguments"))))
    return out


def _openai_error(status: int, code: str, message: str) -> JsonObject:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


# -- Anthropic Messages ---------------------------------------------------------------------


def _anthropic_request(body: JsonObject) -> ProxiedRequest:
    request = ProxiedRequest(model=_str(body.get("model")), stream=body.get("stream") is True)
    system = body.get("system")
    request.system = system if isinstance(system, str) else _block_text(system)
    for item in _list(body.get("messages")):
        if isinstance(item, dict):
            request.messages += _anthropic_messages(item, request.failed_results)
    request.tools = [{"name": t.get("name"), "description": t.get("description") or "",
                      "parameters": t.get("input_schema") or {}}
                     for t in _list(body.get("tools")) if isinstance(t, dict)]
    return request


def _anthropic_messages(item: JsonObject, failed: set[str]) -> list[Message]:
    """One Anthropic message as messages: its tool results each a tool message, the
    rest (text, thinking, tool calls) one message of its role."""
    role, content = _str(item.get("role")), item.get("content")
    if isinstance(content, str):
        return [Message(role=role, text=content)]
    blocks = [b for b in _list(content) if isinstance(b, dict)]
    out: list[Message] = []
    for block in (b for b in blocks if b.get("type") == "tool_result"):
        call_id = _str(block.get("tool_use_id"))
        inner = block.get("content")
        out.append(Message(role="tool", tool_call_id=call_id,
                           text=inner if isinstance(inner, str) else _block_text(inner)))
        if block.get("is_error") is True:
            failed.add(call_id)
    rest = [b for b in blocks if b.get("type") != "tool_result"]
    if rest or not out:
        calls = [ProposedCall(_str(b.get("id")), _str(b.get("name")), as_text(b.get("input")))
                 for b in rest if b.get("type") == "tool_use"]
        thinking = "".join(_str(b.get("thinking")) for b in rest if b.get("type") == "thinking")
        out.append(Message(role=role, text=_block_text(rest), calls=calls,
                           thinking=thinking or None))
    return out


def _block_text(blocks: Any) -> str | None:
    texts = [b.get("text") for b in _list(blocks) if isinstance(b, dict)
             and b.get("type") == "text"]
    found = [t for t in texts if isinstance(t, str)]
    return "".join(found) if found else None


_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error",
                    413: "request_too_large", 429: "rate_limit_error"}


def _anthropic_error(status: int, code: str, message: str) -> JsonObject:
    kind = _ANTHROPIC_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


# -- shared -------------------------------------------------------------------------------


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


OPENAI_CHAT = Dialect(name="openai", kinds=frozenset({"openai", "openai_compatible"}),
                      path="chat/completions", read=_openai_request, error=_openai_error)
ANTHROPIC_MESSAGES = Dialect(name="anthropic", kinds=frozenset({"anthropic"}),
                             path="v1/messages", read=_anthropic_request,
                             error=_anthropic_error)
