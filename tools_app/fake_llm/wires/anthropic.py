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
# The body fields of POST /v1/messages: the anthropic SDK's MessageCreateParams (2026),
# its beta ones (sent with an anthropic-beta header; not checked here), `stream`, and
# temperature / top_p / top_k, which the API still accepts though the SDK's types
# dropped them. Anything else is "<name>: Extra inputs are not permitted".
REQUEST_FIELDS = frozenset({
    "billing_policy", "cache_control", "compaction", "container", "context_management",
    "diagnostics", "fallback_credit_token", "fallbacks", "inference_geo", "max_tokens",
    "mcp_servers", "messages", "metadata", "model", "output_config", "service_tier", "speed",
    "stop_sequences", "stream", "system", "temperature", "thinking", "thread", "tool_choice",
    "tools", "top_k", "top_p", "user_profile_id", "workspace_id",
})


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

    def check(self, body: dict[str, Any]) -> None:
        check_request(body)

    def refusal_body(self, error: WireError) -> Any:
        return self.error_body(error.status, str(error), None)

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
                            ["", *pieces(_input_text(call.arguments), chunk_size)])
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
    blocks += [_tool_use(call, _input_object(call.arguments)) for call in reply.calls]
    return blocks


def _input_object(raw: str) -> dict[str, Any]:
    """`tool_use.input` as the API sends it: always a JSON object.

    A script may hold arguments that are not a JSON object on purpose (invalid JSON, or
    a list or string). The real API never sends those, so they are wrapped as
    {"INVALID_JSON": "<raw text>"}: the key Anthropic's documentation suggests for
    passing invalid tool JSON back to the API (and the one our adapter uses), so the
    rehearsal still reaches the client as arguments that fail the tool's schema, and the
    call round-trips unchanged.
    """
    value = arguments_object(raw)
    return value if isinstance(value, dict) else {"INVALID_JSON": raw}


def _input_text(raw: str) -> str:
    """The streamed `partial_json` fragments, joined: the JSON text of `_input_object`,
    the script's own text when it already is an object."""
    return raw if raw.strip() and isinstance(arguments_object(raw), dict) \
        else dumps(_input_object(raw))


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


# -- strict mode: what the real API refuses --------------------------------------------


def check_request(body: dict[str, Any]) -> None:
    """Raise WireError as the real API would: unknown fields first, then the messages in
    order (a message's content, then its tool_use / tool_result pairing)."""
    for key in body:
        if key not in REQUEST_FIELDS:
            raise WireError(f"{key}: Extra inputs are not permitted")
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    last = len(messages) - 1
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        blocks = _check_content(index, message, final=index == last)
        if message.get("role") == "assistant":
            if index < last:
                _check_answered(index, blocks, messages[index + 1])
        else:
            previous = messages[index - 1] if index > 0 else None
            _check_results(index, blocks, previous)


def _check_content(index: int, message: dict[str, Any], *, final: bool) -> list[Any]:
    if "content" not in message:
        raise WireError(f"messages.{index}.content: Field required")
    content = message.get("content")
    if not content and not (final and message.get("role") == "assistant"):
        raise WireError(f"messages.{index}: all messages must have non-empty content except "
                        "for the optional final assistant message")
    if not isinstance(content, list):
        return []
    for number, block in enumerate(content):
        if not isinstance(block, dict) or block.get("type") != "text":
            continue
        # Only the empty text is refused: a recorded real request with a text block of
        # one space (an assistant message) was accepted.
        if block.get("text") == "":
            raise WireError(f"messages.{index}.content.{number}.text: text content blocks "
                            "must be non-empty")
    return content


def _ids(blocks: Any, kind: str, key: str) -> list[tuple[int, str]]:
    """(block number, id) of the `kind` blocks of a content list."""
    if not isinstance(blocks, list):
        return []
    return [(number, str(block.get(key))) for number, block in enumerate(blocks)
            if isinstance(block, dict) and block.get("type") == kind]


def _check_answered(index: int, blocks: list[Any], following: Any) -> None:
    uses = [use for _, use in _ids(blocks, "tool_use", "id")]
    if not uses:
        return
    answered = set()
    if isinstance(following, dict) and following.get("role") == "user":
        answered = {result for _, result in
                    _ids(following.get("content"), "tool_result", "tool_use_id")}
    missing = [use for use in uses if use not in answered]
    if missing:
        raise WireError(f"messages.{index}: `tool_use` ids were found without `tool_result` "
                        f"blocks immediately after: {', '.join(missing)}. Each `tool_use` block "
                        "must have a corresponding `tool_result` block in the next message.")


def _check_results(index: int, blocks: list[Any], previous: Any) -> None:
    results = _ids(blocks, "tool_result", "tool_use_id")
    if not results:
        return
    uses: set[str] = set()
    if isinstance(previous, dict) and previous.get("role") == "assistant":
        uses = {use for _, use in _ids(previous.get("content"), "tool_use", "id")}
    unexpected = [(number, result) for number, result in results if result not in uses]
    if unexpected:
        number = unexpected[0][0]
        ids = ", ".join(result for _, result in unexpected)
        raise WireError(f"messages.{index}.content.{number}: unexpected `tool_use_id` found in "
                        f"`tool_result` blocks: {ids}. Each `tool_result` block must have a "
                        "corresponding `tool_use` block in the previous message.")
