"""The built-in reply, for rehearsing with any tools and no script.

- Tools offered and the last message is a user message: call the first tool (or the
  one a named tool_choice asks for) with arguments built from its JSON schema.
- The last message carries tool results: call again while fewer than `rounds`
  tool-calling rounds happened since the user spoke, else answer with text quoting the
  results. tool_choice "required" or named keeps calling, as a real model must.
- No tools (or tool_choice "none"): a short text answer.

Benchmarks can pick the shape through the model name, the convention of the fake
server used for the loop-library comparisons: `fake-k<rounds>-p<parallel>[-l<latency ms>]`.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from .conversation import Conversation, Reply, ReplyCall
from .script import AutoOptions

_MODEL_PATTERN = re.compile(r"fake-k(\d+)-p(\d+)(?:-l(\d+(?:\.\d+)?))?")
_MAX_DEPTH = 8
_QUOTE_LIMIT = 500
# Arguments keep the ", " / ": " spacing real models produce; built once, not per call.
_ARGUMENTS_ENCODER = json.JSONEncoder(ensure_ascii=False)


@lru_cache(maxsize=1024)
def options_from_model(model: str) -> tuple[AutoOptions, float] | None:
    """`fake-k3-p2-l50` -> 3 rounds of 2 parallel calls with 50 ms latency."""
    match = _MODEL_PATTERN.search(model)
    if match is None:
        return None
    rounds, parallel, latency = match.groups()
    return AutoOptions(rounds=int(rounds), parallel=max(1, int(parallel))), float(latency or 0)


def auto_reply(conversation: Conversation, options: AutoOptions) -> Reply:
    if _should_call(conversation, options):
        return _call_reply(conversation, options)
    return Reply(text=_text_answer(conversation), finish="stop")


def _should_call(conversation: Conversation, options: AutoOptions) -> bool:
    if not conversation.tools or conversation.tool_choice == "none":
        return False
    if conversation.tool_choice in ("required", "named"):
        return True
    if not conversation.tool_results:
        return True
    return conversation.rounds_since_user < options.rounds


def _call_reply(conversation: Conversation, options: AutoOptions) -> Reply:
    target = conversation.tools[0]
    if conversation.named_tool is not None:
        target = next((t for t in conversation.tools if t.name == conversation.named_tool),
                      target)
    count = options.parallel if conversation.parallel_allowed else 1
    calls = [
        ReplyCall(name=target.name,
                  arguments=_ARGUMENTS_ENCODER.encode(sample_arguments(target.schema,
                                                                       variant=i)))
        for i in range(count)
    ]
    return Reply(calls=calls, finish="tool_calls")


def _text_answer(conversation: Conversation) -> str:
    if conversation.tool_results:
        quoted = "; ".join(json.dumps(r[:_QUOTE_LIMIT], ensure_ascii=False)
                           for r in conversation.tool_results)
        return f"The tools returned: {quoted}."
    return f'Fake model reply to: "{conversation.last_user_text[:_QUOTE_LIMIT]}"'


def sample_arguments(schema: dict[str, Any], *, variant: int = 0) -> dict[str, Any]:
    """A plausible arguments object for a JSON schema (OpenAPI-style types too).

    `variant` makes parallel calls differ (e.g. "city 1", "city 2"). Every declared
    property is filled, so rehearsals show arguments for optional parameters as well.
    """
    value = _sample(schema, schema, "value", variant, 0)
    return value if isinstance(value, dict) else {}


def _sample(schema: Any, root: dict[str, Any], name: str, variant: int, depth: int) -> Any:
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return None
    schema = _resolve(schema, root)
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    if schema.get("enum"):
        return schema["enum"][variant % len(schema["enum"])]
    for key in ("anyOf", "oneOf", "allOf"):
        options = [o for o in schema.get(key) or () if _type_of(_resolve(o, root)) != "null"]
        if options:
            return _sample(options[0], root, name, variant, depth + 1)
    return _by_type(schema, root, name, variant, depth)


def _by_type(schema: dict[str, Any], root: dict[str, Any], name: str, variant: int,
             depth: int) -> Any:
    kind = _type_of(schema)
    if kind == "object" or (kind is None and "properties" in schema):
        return {key: _sample(sub, root, key, variant, depth + 1)
                for key, sub in (schema.get("properties") or {}).items()}
    if kind == "array":
        count = max(1, int(schema.get("minItems", 1)))
        return [_sample(schema.get("items", {}), root, name, variant, depth + 1)
                for _ in range(count)]
    if kind in ("integer", "number"):
        return _number(schema, kind, variant)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return _string(schema, name, variant)


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    target: Any = root
    for part in ref[2:].split("/"):
        target = target.get(part) if isinstance(target, dict) else None
    return target if isinstance(target, dict) else {}


def _type_of(schema: dict[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if str(k).lower() != "null"), "null")
    return str(kind).lower() if kind is not None else None


def _number(schema: dict[str, Any], kind: str, variant: int) -> int | float:
    low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
    value = (low if isinstance(low, (int, float)) else 0) + 1 + variant
    high = schema.get("maximum")
    if isinstance(high, (int, float)) and value > high:
        value = high
    return int(value) if kind == "integer" else float(value)


_FORMATS = {
    "date": "2024-01-0{n}",
    "date-time": "2024-01-0{n}T12:00:00Z",
    "email": "user{n}@example.com",
    "uri": "https://example.com/{n}",
    "uuid": "00000000-0000-4000-8000-00000000000{n}",
}


def _string(schema: dict[str, Any], name: str, variant: int) -> str:
    number = variant % 9 + 1
    template = _FORMATS.get(str(schema.get("format", "")))
    value = template.format(n=number) if template else f"{name} {number}"
    min_length = schema.get("minLength")
    if isinstance(min_length, int) and len(value) < min_length:
        value = value.ljust(min_length, "x")
    return value
