"""OpenAI Chat Completions: POST /v1/chat/completions, JSON and SSE.

Shapes follow recorded real traffic: chatcmpl-/call_ ids, `finish_reason` tool_calls/stop,
the usage chunk with empty `choices` when stream_options.include_usage is set, and the
closing `data: [DONE]`.
"""

from __future__ import annotations

from typing import Any

from ..conversation import Conversation, Reply, ReplyCall, ToolDecl, text_of
from .base import StreamItem, WireError, bool_or, dumps, now, pieces, random_id

_FINISH = {"stop": "stop", "tool_calls": "tool_calls", "length": "length"}
_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}
_FINGERPRINT = "fp_fake0000"


class OpenAIWire:
    name = "openai"
    stream_content_type = "text/event-stream; charset=utf-8"
    event_separator = "\n\n"

    def parse(self, body: dict[str, Any], path_model: str | None, stream: bool) -> Conversation:
        model, messages = body.get("model"), body.get("messages")
        if not isinstance(model, str) or not model:
            raise WireError("you must provide a model parameter")
        if not isinstance(messages, list) or not messages:
            raise WireError("[] is too short - 'messages'")
        options = body.get("stream_options")
        conversation = Conversation(
            model=model,
            stream=bool_or(body.get("stream"), False),
            include_usage=isinstance(options, dict) and options.get("include_usage") is True,
            tools=_tools(body.get("tools")),
            parallel_allowed=bool_or(body.get("parallel_tool_calls"), True),
        )
        _tool_choice(body.get("tool_choice"), conversation)
        for message in messages:
            _read_message(message, conversation)
        return conversation

    def json_body(self, reply: Reply, conversation: Conversation) -> Any:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text,
                                   "refusal": None, "annotations": []}
        if reply.calls:
            message["tool_calls"] = [_call(call) for call in reply.calls]
        return {
            "id": random_id("chatcmpl-", 29),
            "object": "chat.completion",
            "created": now(),
            "model": conversation.model,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": _FINISH[reply.finish]}],
            "usage": _usage(reply),
            "service_tier": "default",
            "system_fingerprint": _FINGERPRINT,
        }

    def stream_items(self, reply: Reply, conversation: Conversation,
                     chunk_size: int) -> list[StreamItem]:
        envelope = _Chunks(conversation)
        first = {"role": "assistant", "content": None if reply.calls else "", "refusal": None}
        items = [envelope.delta(first)]
        items += [envelope.delta({"content": p}) for p in pieces(reply.text or "", chunk_size)]
        for index, call in enumerate(reply.calls):
            items.append(envelope.delta({"tool_calls": [{
                "index": index, "id": call.id or random_id("call_", 24), "type": "function",
                "function": {"name": call.name, "arguments": ""}}]}))
            items += [envelope.delta({"tool_calls": [{"index": index,
                                                      "function": {"arguments": p}}]})
                      for p in pieces(call.arguments, chunk_size)]
        items.append(envelope.delta({}, _FINISH[reply.finish]))
        if conversation.include_usage:
            items.append(envelope.usage(_usage(reply)))
        items.append((None, "[DONE]"))
        return items

    def error_body(self, status: int, message: str, error_type: str | None) -> Any:
        default_type, code = _ERROR_TYPES.get(status, ("server_error", None))
        return {"error": {"message": message, "type": error_type or default_type,
                          "param": None, "code": code}}

    def error_item(self, status: int, message: str, error_type: str | None) -> StreamItem:
        # The SDK raises APIError on a data chunk that carries "error" (no event name).
        return (None, self.error_body(status, message, error_type))

    def response_headers(self) -> list[tuple[bytes, bytes]]:
        return [(b"x-request-id", random_id("req_", 32).encode()),
                (b"openai-processing-ms", b"1")]


class _Chunks:
    """Builds chat.completion.chunk events sharing one id, like a real stream.

    Every chunk repeats the same envelope, so it is encoded once and each delta is
    spliced in: re-encoding it per fragment was most of a benchmark request's cost.
    """

    def __init__(self, conversation: Conversation) -> None:
        envelope = dumps({"id": random_id("chatcmpl-", 29), "object": "chat.completion.chunk",
                          "created": now(), "model": conversation.model,
                          "service_tier": "default", "system_fingerprint": _FINGERPRINT})
        self.head = envelope[:-1]
        # With include_usage every chunk carries "usage": null until the usage chunk.
        self.tail = ',"usage":null}' if conversation.include_usage else "}"

    def delta(self, delta: dict[str, Any], finish: str | None = None) -> StreamItem:
        return (None, f'{self.head},"choices":[{{"index":0,"delta":{dumps(delta)},'
                      f'"logprobs":null,"finish_reason":{dumps(finish)}}}]{self.tail}')

    def usage(self, usage: dict[str, Any]) -> StreamItem:
        return (None, f'{self.head},"choices":[],"usage":{dumps(usage)}}}')


def _call(call: ReplyCall) -> dict[str, Any]:
    return {"id": call.id or random_id("call_", 24), "type": "function",
            "function": {"name": call.name, "arguments": call.arguments}}


def _usage(reply: Reply) -> dict[str, Any]:
    return {
        "prompt_tokens": reply.input_tokens,
        "completion_tokens": reply.output_tokens,
        "total_tokens": reply.input_tokens + reply.output_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0,
                                      "rejected_prediction_tokens": 0},
    }


def _tools(tools: Any) -> list[ToolDecl]:
    declared: list[ToolDecl] = []
    for entry in tools if isinstance(tools, list) else ():
        function = entry.get("function") if isinstance(entry, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            schema = function.get("parameters")
            declared.append(ToolDecl(function["name"], schema if isinstance(schema, dict)
                                     else {}))
    return declared


def _tool_choice(choice: Any, conversation: Conversation) -> None:
    if choice in ("auto", "required", "none"):
        conversation.tool_choice = choice
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        conversation.tool_choice = "named"
        conversation.named_tool = choice["function"].get("name")


def _read_message(message: Any, conversation: Conversation) -> None:
    if not isinstance(message, dict):
        raise WireError("each message must be an object")
    role, text = message.get("role"), text_of(message.get("content"))
    conversation.prompt_chars += len(text)
    if role == "assistant":
        conversation.assistant_turns += 1
        conversation.rounds_since_user += 1
        conversation.tool_results = []
    elif role == "tool":
        conversation.tool_results.append(text)
    elif role == "user":
        conversation.last_user_text = text
        conversation.rounds_since_user = 0
        conversation.tool_results = []
