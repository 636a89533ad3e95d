"""Anthropic Messages: POST /v1/messages, JSON and SSE.

The stream is message_start, then per content block content_block_start /
content_block_delta (text_delta or input_json_delta) / content_block_stop, a ping after
the first block start (where the real API sends it), message_delta with the stop reason
and output tokens, and message_stop. A failure mid-stream is `event: error`.
"""

from __future__ import annotations

from typing import Any

from ..conversation import Conversation, Reply, ReplyCall, ToolDecl, text_of
from .base import (
    StreamItem,
    WireError,
    arguments_object,
    bool_or,
    dumps,
    pieces,
    random_id,
)

_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_CHOICES = {"auto": "auto", "any": "required", "none": "none", "tool": "named"}


class AnthropicWire:
    name = "anthropic"
    stream_content_type = "text/event-stream; charset=utf-8"
    event_separator = "\n\n"

    def parse(self, body: dict[str, Any], path_model: str | None, stream: bool) -> Conversation:
        model, messages = body.get("model"), body.get("messages")
        if not isinstance(model, str) or not model:
            raise WireError("model: Field required")
        if not isinstance(messages, list) or not messages:
            raise WireError("messages: Field required")
        if not isinstance(body.get("max_tokens"), int):
            raise WireError("max_tokens: Field required")
        conversation = Conversation(model=model, stream=bool_or(body.get("stream"), False),
                                    include_usage=True, tools=_tools(body.get("tools")))
        conversation.prompt_chars = len(text_of(body.get("system")))
        _tool_choice(body.get("tool_choice"), conversation)
        for message in messages:
            _read_message(message, conversation)
        return conversation

    def json_body(self, reply: Reply, conversation: Conversation) -> Any:
        return {
            "id": random_id("msg_01", 22),
            "type": "message",
            "role": "assistant",
            "model": conversation.model,
            "content": _blocks(reply),
            "stop_reason": _STOP[reply.finish],
            "stop_sequence": None,
            "usage": _usage(reply.input_tokens, reply.output_tokens),
        }

    def stream_items(self, reply: Reply, conversation: Conversation,
                     chunk_size: int) -> list[StreamItem]:
        start: dict[str, Any] = {
            "id": random_id("msg_01", 22), "type": "message", "role": "assistant",
            "model": conversation.model, "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": _usage(reply.input_tokens, 1)}
        items: list[StreamItem] = [("message_start", {"type": "message_start",
                                                      "message": start})]
        index = 0
        if reply.text is not None:
            items += _block(index, {"type": "text", "text": ""}, "text_delta", "text",
                            pieces(reply.text, chunk_size))
            index += 1
        for call in reply.calls:
            items += _block(index, _tool_use(call, {}), "input_json_delta", "partial_json",
                            ["", *pieces(call.arguments, chunk_size)])
            index += 1
        if len(items) > 1:
            items.insert(2, ("ping", {"type": "ping"}))
        items.append(("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": _STOP[reply.finish], "stop_sequence": None},
            "usage": {"output_tokens": reply.output_tokens}}))
        items.append(("message_stop", {"type": "message_stop"}))
        return items

    def error_body(self, status: int, message: str, error_type: str | None) -> Any:
        return {"type": "error",
                "error": {"type": error_type or _ERROR_TYPES.get(status, "api_error"),
                          "message": message},
                "request_id": random_id("req_011C", 20)}

    def error_item(self, status: int, message: str, error_type: str | None) -> StreamItem:
        return ("error", {"type": "error",
                          "error": {"type": error_type or _ERROR_TYPES.get(status, "api_error"),
                                    "message": message}})

    def response_headers(self) -> list[tuple[bytes, bytes]]:
        return [(b"request-id", random_id("req_011C", 20).encode())]


def _block(index: int, start: dict[str, Any], delta_type: str, field: str,
           fragments: list[str]) -> list[StreamItem]:
    # Deltas are the bulk of a stream: only the fragment is encoded, the rest is fixed.
    head = (f'{{"type":"content_block_delta","index":{index},'
            f'"delta":{{"type":"{delta_type}","{field}":')
    return [
        ("content_block_start", {"type": "content_block_start", "index": index,
                                 "content_block": start}),
        *[("content_block_delta", f"{head}{dumps(fragment)}}}}}") for fragment in fragments],
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def _blocks(reply: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.text is not None:
        blocks.append({"type": "text", "text": reply.text})
    blocks += [_tool_use(call, arguments_object(call.arguments)) for call in reply.calls]
    return blocks


def _tool_use(call: ReplyCall, arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.id or random_id("toolu_01", 22),
            "name": call.name, "input": arguments}


def _usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {"input_tokens": input_tokens, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0, "output_tokens": output_tokens,
            "service_tier": "standard"}


def _tools(tools: Any) -> list[ToolDecl]:
    # Server tools (web search, code execution...) have a "type" and no input_schema:
    # the fake model never calls those.
    return [ToolDecl(t["name"], t["input_schema"]) for t in tools or ()
            if isinstance(t, dict) and isinstance(t.get("name"), str)
            and isinstance(t.get("input_schema"), dict)] if isinstance(tools, list) else []


def _tool_choice(choice: Any, conversation: Conversation) -> None:
    if not isinstance(choice, dict):
        return
    kind = _CHOICES.get(str(choice.get("type")))
    if kind is not None:
        conversation.tool_choice = kind  # type: ignore[assignment]
        conversation.named_tool = choice.get("name") if kind == "named" else None
    conversation.parallel_allowed = not choice.get("disable_parallel_tool_use", False)


def _read_message(message: Any, conversation: Conversation) -> None:
    if not isinstance(message, dict):
        raise WireError("messages: each message must be an object")
    content = message.get("content")
    if message.get("role") == "assistant":
        conversation.assistant_turns += 1
        conversation.rounds_since_user += 1
        conversation.tool_results = []
        conversation.prompt_chars += len(text_of(content))
        return
    blocks = content if isinstance(content, list) else [{"type": "text", "text": text_of(content)}]
    results = [text_of(b.get("content")) for b in blocks
               if isinstance(b, dict) and b.get("type") == "tool_result"]
    text = "".join(b.get("text", "") for b in blocks
                   if isinstance(b, dict) and b.get("type") == "text")
    conversation.prompt_chars += len(text) + sum(len(r) for r in results)
    if results:
        # Results (even with some text after them) continue the tool-calling round.
        conversation.tool_results = results
    else:
        conversation.last_user_text = text
        conversation.rounds_since_user = 0
        conversation.tool_results = []
