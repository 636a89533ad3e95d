"""Gemini: POST /v1beta/models/{model}:generateContent and :streamGenerateContent.

The model comes from the path. `?alt=sse` streams server-sent events (each a whole
GenerateContentResponse); without it a stream is one JSON array of those responses.
Function calls arrive whole (Gemini does not fragment arguments) and carry no id unless
a script gives one, like the real API; finishReason is STOP for calls and text alike.
Requests are accepted in both the camelCase and the snake_case JSON spellings.
"""

from __future__ import annotations

import json
from typing import Any

from ..conversation import Conversation, Reply, ReplyCall, ToolDecl, text_of
from .base import StreamItem, WireError, arguments_object, pieces, random_id

_FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS"}
_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _get(mapping: Any, camel: str, snake: str) -> Any:
    if not isinstance(mapping, dict):
        return None
    return mapping.get(camel, mapping.get(snake))


class GeminiWire:
    name = "gemini"
    stream_content_type = "text/event-stream"
    # Google's front end separates events with CRLF pairs; clients must accept both.
    event_separator = "\r\n\r\n"

    def parse(self, body: dict[str, Any], path_model: str | None, stream: bool) -> Conversation:
        contents = body.get("contents")
        if not path_model:
            raise WireError("model is required in the path", status=404)
        if not isinstance(contents, list) or not contents:
            raise WireError("* GenerateContentRequest.contents: contents is not specified")
        conversation = Conversation(model=path_model, stream=stream, include_usage=True,
                                    tools=_tools(body.get("tools")))
        system = _get(body, "systemInstruction", "system_instruction")
        conversation.prompt_chars = len(text_of(_get(system, "parts", "parts")))
        _tool_config(_get(body, "toolConfig", "tool_config"), conversation)
        for content in contents:
            _read_content(content, conversation)
        return conversation

    def json_body(self, reply: Reply, conversation: Conversation) -> Any:
        return _response(conversation, _parts(reply), reply, finished=True,
                         response_id=random_id("", 22))

    def stream_items(self, reply: Reply, conversation: Conversation,
                     chunk_size: int) -> list[StreamItem]:
        response_id = random_id("", 22)
        groups = [[{"text": p}] for p in pieces(reply.text or "", chunk_size)]
        call_parts = [_call_part(call) for call in reply.calls]
        if call_parts:
            groups.append(call_parts)
        groups = groups or [[{"text": ""}]]
        return [(None, _response(conversation, parts, reply, finished=i == len(groups) - 1,
                                 response_id=response_id))
                for i, parts in enumerate(groups)]

    def error_body(self, status: int, message: str, error_type: str | None) -> Any:
        return {"error": {"code": status, "message": message,
                          "status": error_type or _STATUS.get(status, "UNKNOWN")}}

    def error_item(self, status: int, message: str, error_type: str | None) -> StreamItem:
        return (None, self.error_body(status, message, error_type))

    def response_headers(self) -> list[tuple[bytes, bytes]]:
        return [(b"server-timing", b"gfet4t7; dur=1")]


def _response(conversation: Conversation, parts: list[dict[str, Any]], reply: Reply, *,
              finished: bool, response_id: str) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    usage: dict[str, Any] = {"promptTokenCount": reply.input_tokens,
                             "totalTokenCount": reply.input_tokens,
                             "promptTokensDetails": [{"modality": "TEXT",
                                                      "tokenCount": reply.input_tokens}]}
    if finished:
        candidate["finishReason"] = _FINISH[reply.finish]
        usage["candidatesTokenCount"] = reply.output_tokens
        usage["totalTokenCount"] = reply.input_tokens + reply.output_tokens
    return {"candidates": [candidate], "usageMetadata": usage,
            "modelVersion": conversation.model, "responseId": response_id}


def _parts(reply: Reply) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if reply.text is not None:
        parts.append({"text": reply.text})
    parts += [_call_part(call) for call in reply.calls]
    return parts or [{"text": ""}]


def _call_part(call: ReplyCall) -> dict[str, Any]:
    function_call: dict[str, Any] = {"name": call.name, "args": arguments_object(call.arguments)}
    if call.id is not None:
        function_call["id"] = call.id
    return {"functionCall": function_call}


def _tools(tools: Any) -> list[ToolDecl]:
    declared: list[ToolDecl] = []
    for entry in tools if isinstance(tools, list) else ():
        for function in _get(entry, "functionDeclarations", "function_declarations") or ():
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                schema = (_get(function, "parametersJsonSchema", "parameters_json_schema")
                          or function.get("parameters") or {})
                declared.append(ToolDecl(function["name"], schema))
    return declared


def _tool_config(config: Any, conversation: Conversation) -> None:
    calling = _get(config, "functionCallingConfig", "function_calling_config")
    mode = str(_get(calling, "mode", "mode") or "AUTO").upper()
    allowed = _get(calling, "allowedFunctionNames", "allowed_function_names") or []
    if mode == "NONE":
        conversation.tool_choice = "none"
    elif mode in ("ANY", "VALIDATED") and len(allowed) == 1:
        conversation.tool_choice, conversation.named_tool = "named", str(allowed[0])
    elif mode == "ANY":
        conversation.tool_choice = "required"


def _read_content(content: Any, conversation: Conversation) -> None:
    if not isinstance(content, dict):
        raise WireError("* GenerateContentRequest.contents: each content must be an object")
    parts = [p for p in content.get("parts") or () if isinstance(p, dict)]
    if content.get("role") == "model":
        conversation.assistant_turns += 1
        conversation.rounds_since_user += 1
        conversation.tool_results = []
        conversation.prompt_chars += len(text_of(parts))
        return
    results = [_result_text(_get(p, "functionResponse", "function_response")) for p in parts
               if _get(p, "functionResponse", "function_response") is not None]
    text = text_of(parts)
    conversation.prompt_chars += len(text) + sum(len(r) for r in results)
    if results:
        conversation.tool_results = results
    else:
        conversation.last_user_text = text
        conversation.rounds_since_user = 0
        conversation.tool_results = []


def _result_text(function_response: Any) -> str:
    # Adapters wrap a plain result as {"result": "..."} (or "output"/"content"): quote
    # the inner string; anything richer is quoted as JSON.
    response = _get(function_response, "response", "response")
    if isinstance(response, dict) and len(response) == 1:
        (value,) = response.values()
        if isinstance(value, str):
            return value
    return json.dumps(response, ensure_ascii=False)
