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


# GenerateContentRequest's fields (v1beta), in both JSON spellings the API parses; the
# model comes from the path but may be repeated in the body. Anything else is
# 'Invalid JSON payload received. Unknown name "<name>": Cannot find field.'
REQUEST_FIELDS = frozenset({
    "model", "contents", "tools", "toolConfig", "tool_config", "safetySettings",
    "safety_settings", "systemInstruction", "system_instruction", "generationConfig",
    "generation_config", "cachedContent", "cached_content",
})
# A Part must set one member of its `data` oneof.
_DATA_FIELDS = (
    "text", "inlineData", "inline_data", "fileData", "file_data", "functionCall",
    "function_call", "functionResponse", "function_response", "executableCode",
    "executable_code", "codeExecutionResult", "code_execution_result",
)
_RESPONSE_TURN = ("Please ensure that function response turn comes immediately after a "
                  "function call turn.")
_CALL_TURN = ("Please ensure that function call turn comes immediately after a user turn or "
              "after a function response turn.")
_COUNT = ("Please ensure that the number of function response parts is equal to the number "
          "of function call parts of the function call turn.")


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

    def check(self, body: dict[str, Any]) -> None:
        check_request(body)

    def refusal_body(self, error: WireError) -> Any:
        body = self.error_body(error.status, str(error), None)
        if error.details:
            body["error"]["details"] = error.details
        return body

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


# -- strict mode: what the real API refuses --------------------------------------------


def check_request(body: dict[str, Any]) -> None:
    """Raise WireError as the real API would: unknown fields (a JSON parse error), then
    empty turns and parts (field validation), then the function call / response turns."""
    for key in body:
        if key not in REQUEST_FIELDS:
            message = f'Invalid JSON payload received. Unknown name "{key}": Cannot find field.'
            raise WireError(message, details=[{
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"description": message}]}])
    contents = body.get("contents")
    if not isinstance(contents, list):
        return
    for index, content in enumerate(contents):
        if isinstance(content, dict):
            _check_parts(index, content.get("parts"))
    for index, content in enumerate(contents):
        previous = contents[index - 1] if index > 0 else None
        following = contents[index + 1] if index + 1 < len(contents) else None
        _check_turn(content, previous, following)


def _check_parts(index: int, parts: Any) -> None:
    # Google's validator ends each of its lines with a newline, kept here.
    if not parts:
        raise WireError(f"* GenerateContentRequest.contents[{index}].parts: contents.parts "
                        "must not be empty.\n")
    for number, part in enumerate(parts if isinstance(parts, list) else ()):
        if isinstance(part, dict) and not _has_data(part):
            raise WireError(f"* GenerateContentRequest.contents[{index}].parts[{number}].data: "
                            "required oneof field 'data' must have one initialized field\n")


def _has_data(part: dict[str, Any]) -> bool:
    # An empty string reads as unset, so {"text": ""} sets no data (clients meet that
    # 400 when they echo an empty text part). A part that carries a thought signature is
    # let through: the real API's handling of an empty signed text part is not known
    # here, and refusing a valid request is worse than accepting a doubtful one.
    if "thoughtSignature" in part or "thought_signature" in part:
        return True
    return any(part.get(name) not in (None, "") for name in _DATA_FIELDS)


def _calls(content: Any) -> int:
    if not isinstance(content, dict) or content.get("role") != "model":
        return 0
    return sum(1 for p in content.get("parts") or () if isinstance(p, dict)
               and _get(p, "functionCall", "function_call") is not None)


def _responses(content: Any) -> int:
    if not isinstance(content, dict) or content.get("role") == "model":
        return 0
    return sum(1 for p in content.get("parts") or () if isinstance(p, dict)
               and _get(p, "functionResponse", "function_response") is not None)


def _check_turn(content: Any, previous: Any, following: Any) -> None:
    calls, responses = _calls(content), _responses(content)
    if calls:
        if previous is None or (isinstance(previous, dict) and previous.get("role") == "model"):
            raise WireError(_CALL_TURN)
        if following is not None and _responses(following) != calls \
                and not (isinstance(following, dict) and following.get("role") == "model"):
            # The next user turn must answer every call (a model turn right after is
            # not something this server knows the API to refuse).
            raise WireError(_COUNT)
    if responses:
        if not _calls(previous):
            raise WireError(_RESPONSE_TURN)
        if responses != _calls(previous):
            raise WireError(_COUNT)
