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
# The body fields of POST /v1/chat/completions (the openai SDK's CompletionCreateParams,
# 2026); anything else is "Unrecognized request argument supplied".
REQUEST_FIELDS = frozenset({
    "audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
    "max_completion_tokens", "max_tokens", "messages", "metadata", "modalities", "model",
    "moderation", "n", "parallel_tool_calls", "prediction", "presence_penalty",
    "prompt_cache_key", "prompt_cache_options", "prompt_cache_retention", "reasoning_effort",
    "response_format", "safety_identifier", "seed", "service_tier", "stop", "store", "stream",
    "stream_options", "temperature", "tool_choice", "tools", "top_logprobs", "top_p", "user",
    "verbosity", "web_search_options",
})
_ORPHAN_TOOL = ("Invalid parameter: messages with role 'tool' must be a response to a "
                "preceeding message with 'tool_calls'.")  # sic: the API's own spelling
_UNANSWERED = ("An assistant message with 'tool_calls' must be followed by tool messages "
               "responding to each 'tool_call_id'. The following tool_call_ids did not have "
               "response messages: ")


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

    def check(self, body: dict[str, Any]) -> None:
        check_request(body)

    def refusal_body(self, error: WireError) -> Any:
        return {"error": {"message": str(error), "type": "invalid_request_error",
                          "param": error.param, "code": error.code}}

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
    spliced in rather than re-encoding the envelope per fragment.
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


# -- strict mode: what the real API refuses --------------------------------------------


def check_request(body: dict[str, Any]) -> None:
    """Raise WireError as the real API would: unknown fields first, then the messages."""
    for key in body:
        if key not in REQUEST_FIELDS:
            raise WireError(f"Unrecognized request argument supplied: {key}")
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    calls: list[str] | None = None  # ids of the assistant tool_calls being answered
    pending: list[str] = []
    asked_at = 0
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        _check_content(index, role, message)
        if role == "tool":
            call_id = message.get("tool_call_id")
            if calls is None:
                raise WireError(_ORPHAN_TOOL, param=f"messages.[{index}].role")
            if call_id not in calls:
                raise WireError(f"Invalid parameter: 'tool_call_id' of '{call_id}' not found "
                                "in 'tool_calls' of previous message.",
                                param=f"messages.[{index}].tool_call_id")
            if call_id in pending:
                pending.remove(call_id)
            continue
        if pending:
            raise WireError(_UNANSWERED + ", ".join(pending), param=f"messages.[{asked_at}].role")
        tool_calls = message.get("tool_calls") if role == "assistant" else None
        calls = [str(c.get("id")) for c in tool_calls if isinstance(c, dict)] \
            if isinstance(tool_calls, list) and tool_calls else None
        pending, asked_at = list(calls or ()), index
    if pending:
        raise WireError(_UNANSWERED + ", ".join(pending), param=f"messages.[{asked_at}].role")


def _check_content(index: int, role: Any, message: dict[str, Any]) -> None:
    content = message.get("content")
    if content == []:
        raise WireError(f"Invalid 'messages[{index}].content': empty array. Expected an array "
                        "with minimum length 1, but got an empty array instead.",
                        param=f"messages[{index}].content", code="empty_array")
    if role not in ("system", "developer", "user", "tool"):
        # An assistant's content may be null or absent next to tool_calls; without them
        # (and for the legacy "function" role) the exact rule is not known here, so
        # nothing more is refused.
        return
    if "content" not in message:
        raise WireError(f"Missing required parameter: 'messages[{index}].content'.",
                        param=f"messages[{index}].content", code="missing_required_parameter")
    if content is None:
        raise WireError("Invalid value for 'content': expected a string, got null.",
                        param=f"messages.[{index}].content")
