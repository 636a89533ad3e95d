"""Chat messages as spans carry them, read into one shape (`Message`): the GenAI
conventions' parts (`{"role", "parts": [{"type": "text" | "tool_call" |
"tool_call_response" | "reasoning", ...}]}`), their older flattened attributes and
span events, and OpenInference's flattened `message.*` attributes."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ProposedCall:
    call_id: str
    name: str
    arguments: str | None = None


@dataclass
class Message:
    role: str
    text: str | None = None
    calls: list[ProposedCall] = field(default_factory=list)
    tool_call_id: str | None = None
    thinking: str | None = None
    finish_reason: str | None = None

    def wire(self) -> dict[str, Any]:
        """The message as a round's request shows it (an OpenAI-like chat message)."""
        out: dict[str, Any] = {"role": self.role, "content": self.text}
        if self.calls:
            out["tool_calls"] = [{"id": c.call_id, "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in self.calls]
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        return out


def as_text(value: Any) -> str | None:
    """A value as text: strings as they are, anything else as JSON; None stays None."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# -- the GenAI conventions' parts ---------------------------------------------------------


def from_parts(messages: Any) -> list[Message]:
    return [_parts_message(m) for m in messages if isinstance(m, dict)] \
        if isinstance(messages, list) else []


def _parts_message(data: dict[str, Any]) -> Message:
    message = Message(role=str(data.get("role") or ""),
                      finish_reason=_text(data.get("finish_reason")))
    texts: list[str] = []
    for part in data.get("parts") or []:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("content"), str):
            texts.append(part["content"])
        elif kind == "reasoning" and isinstance(part.get("content"), str):
            message.thinking = (message.thinking or "") + part["content"]
        elif kind == "tool_call":
            message.calls.append(ProposedCall(str(part.get("id") or ""),
                                              str(part.get("name") or ""),
                                              as_text(part.get("arguments"))))
        elif kind == "tool_call_response":
            message.tool_call_id = _text(part.get("id"))
            texts.append(as_text(part.get("response")) or "")
    message.text = "".join(texts) if texts else None
    return message


def system_instructions(parts: Any) -> list[Message]:
    """`gen_ai.system_instructions` (text parts, as a JSON string or structured) as the
    system message they were given as; separate parts are separate lines."""
    if not isinstance(parts, list):
        return []
    texts = [str(p["content"]) for p in parts
             if isinstance(p, dict) and isinstance(p.get("content"), str)]
    return [Message(role="system", text="\n".join(texts))] if texts else []


def tool_definitions(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    """The tools offered to the model: `gen_ai.tool.definitions` or OpenInference's
    `llm.tools.N.tool.json_schema`, as {"name", "description", "parameters"}."""
    raw = attrs.get("gen_ai.tool.definitions")
    found = parse_json(raw) if isinstance(raw, str) else raw
    items = found if isinstance(found, list) else []
    items += [parse_json(v) for k, v in attrs.items()
              if re.fullmatch(r"llm\.tools\.\d+\.tool\.json_schema", k)]
    return [d for d in (_definition(item) for item in items) if d]


def _definition(item: Any) -> dict[str, Any] | None:
    if not isinstance(item, dict):
        return None
    function: dict[str, Any] = _mapping(item.get("function")) or item
    name = function.get("name")
    if not isinstance(name, str) or not name:
        return None
    parameters = function.get("parameters")
    return {"name": name, "description": _text(function.get("description")) or "",
            "parameters": parameters if isinstance(parameters, dict) else {}}


# -- OpenInference's flattened messages -----------------------------------------------------


def openinference(flat: dict[str, Any]) -> Message:
    """One `llm.input_messages.N.*` group (`message.role`, `message.content`,
    `message.contents.K.message_content.text`, `message.tool_calls.J.tool_call.*`,
    `message.tool_call_id`)."""
    contents = grouped(flat, "message.contents.")
    text = _text(flat.get("message.content"))
    if text is None and contents:
        pieces = [c.get("message_content.text") for c in contents]
        text = "".join(p for p in pieces if isinstance(p, str)) or None
    calls = [ProposedCall(str(c.get("tool_call.id") or ""),
                          str(c.get("tool_call.function.name") or ""),
                          as_text(c.get("tool_call.function.arguments")))
             for c in grouped(flat, "message.tool_calls.")]
    return Message(role=str(flat.get("message.role") or ""), text=text, calls=calls,
                   tool_call_id=_text(flat.get("message.tool_call_id")))


# -- the older GenAI attributes and span events -------------------------------------------


def legacy(flat: dict[str, Any]) -> Message:
    """One `gen_ai.prompt.N.*` / `gen_ai.completion.N.*` group (`role`, `content`,
    `tool_call_id`, `finish_reason`, `tool_calls.J.id|name|arguments`)."""
    calls = [ProposedCall(str(c.get("id") or ""), str(c.get("name") or ""),
                          as_text(c.get("arguments")))
             for c in grouped(flat, "tool_calls.")]
    return Message(role=str(flat.get("role") or ""), text=as_text(flat.get("content")),
                   calls=calls, tool_call_id=_text(flat.get("tool_call_id")),
                   finish_reason=_text(flat.get("finish_reason")))


def event_body(attributes: dict[str, Any]) -> dict[str, Any]:
    """A span event's content: its attributes, or the JSON body some SDKs put in
    `gen_ai.event.content`."""
    body = parse_json(attributes.get("gen_ai.event.content"))
    return attributes | body if isinstance(body, dict) else attributes


def from_event(role: str, body: dict[str, Any]) -> Message:
    return Message(role=role, text=as_text(body.get("content")), calls=_event_calls(body),
                   tool_call_id=_text(body.get("id")) if role == "tool" else None)


def from_choice(body: dict[str, Any]) -> Message:
    message = body.get("message")
    message = parse_json(message) if isinstance(message, str) else message
    message = message if isinstance(message, dict) else {}
    return Message(role=str(message.get("role") or "assistant"),
                   text=as_text(message.get("content")), calls=_event_calls(message),
                   finish_reason=_text(body.get("finish_reason")))


def plain(item: Any) -> Message:
    """A `{"role", "content"}` message of the oldest prompt/completion events."""
    data = item if isinstance(item, dict) else {}
    return Message(role=str(data.get("role") or ""), text=as_text(data.get("content")))


def _event_calls(body: dict[str, Any]) -> list[ProposedCall]:
    calls = body.get("tool_calls")
    calls = parse_json(calls) if isinstance(calls, str) else calls
    out = []
    for call in calls if isinstance(calls, list) else []:
        if not isinstance(call, dict):
            continue
        function = _mapping(call.get("function")) or {}
        out.append(ProposedCall(str(call.get("id") or ""), str(function.get("name") or ""),
                                as_text(function.get("arguments"))))
    return out


_INDEXED = re.compile(r"^(\d+)\.(.+)$")


def grouped(flat: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    groups: dict[int, dict[str, Any]] = defaultdict(dict)
    for key, value in flat.items():
        if key.startswith(prefix):
            match = _INDEXED.match(key[len(prefix):])
            if match:
                groups[int(match.group(1))][match.group(2)] = value
    return [groups[index] for index in sorted(groups)]


def _mapping(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def parse_json(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return None
