"""Google Gemini (POST {base_url}/models/{model}:generateContent, or
:streamGenerateContent?alt=sse; the key goes in the `x-goog-api-key` header).

Request: system messages become `systemInstruction`; tools become one `tools` entry of
`functionDeclarations` whose JSON Schemas are converted to Gemini's subset
(gemini_schema.py); tool_choice maps to toolConfig.functionCallingConfig mode
AUTO/ANY/NONE, a named choice to ANY + allowedFunctionNames; the results of one round
go back as one user turn of functionResponse parts ({"output": text}, or
{"error": text} when the call failed). Gemini has no parallel_tool_calls switch.

Response: functionCall parts become ToolExecutionRequests. Gemini usually sends no call
id, so a stable one is made from the responseId and the call's position; a real id,
when sent, is kept and echoed in the functionResponse. The parts are kept verbatim in
AiMessage.provider_blocks and sent back as received, which preserves the thought
signatures Gemini requires next to function calls.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from tools_app.engine.providers.http.client import EventStream
from tools_app.engine.providers.http.wire_errors import ErrorDetails

from ..events import PartialText, PartialToolCall, emit, observed
from ..messages import (
    AiMessage,
    ChatMessage,
    ChatRequestParameters,
    ChatResponse,
    FinishReason,
    NamedToolChoice,
    SystemMessage,
    TokenUsage,
    ToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from ..spec import ToolSpecification
from .adapter import (
    JsonObject,
    WireChatModel,
    arguments_object,
    as_dict,
    as_int,
    as_list,
    as_str,
    dedupe_call_ids,
    merge_custom,
    parse_json_event,
)
from .gemini_schema import to_gemini_schema

_FINISH_REASONS = {
    "STOP": FinishReason.STOP,
    "MAX_TOKENS": FinishReason.LENGTH,
    "SAFETY": FinishReason.CONTENT_FILTER,
    "RECITATION": FinishReason.CONTENT_FILTER,
    "BLOCKLIST": FinishReason.CONTENT_FILTER,
    "PROHIBITED_CONTENT": FinishReason.CONTENT_FILTER,
    "SPII": FinishReason.CONTENT_FILTER,
    "IMAGE_SAFETY": FinishReason.CONTENT_FILTER,
}


class GeminiChatModel(WireChatModel):
    """Gemini generateContent / streamGenerateContent."""

    provider: ClassVar[str] = "gemini"
    default_base_url: ClassVar[str | None] = "https://generativelanguage.googleapis.com/v1beta"

    def credentials(self, api_key: str) -> dict[str, str]:
        return {"x-goog-api-key": api_key}

    def path(self, model: str, *, stream: bool) -> str:
        name = model.removeprefix("models/")
        return (f"models/{name}:streamGenerateContent?alt=sse" if stream
                else f"models/{name}:generateContent")

    def build_body(
        self,
        messages: Sequence[ChatMessage],
        parameters: ChatRequestParameters,
        *,
        model: str,
        stream: bool,
    ) -> JsonObject:
        body: JsonObject = {"contents": map_contents(messages)}
        system = "\n\n".join(m.text for m in messages if isinstance(m, SystemMessage))
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        if parameters.tools:
            body["tools"] = [{"functionDeclarations": [map_tool(t) for t in parameters.tools]}]
            if parameters.tool_choice is not None:
                body["toolConfig"] = {"functionCallingConfig":
                                      map_tool_choice(parameters.tool_choice)}
        generation = _generation_config(parameters)
        if generation:
            body["generationConfig"] = generation
        return merge_custom(body, parameters.custom, self.custom_keys)

    async def read_stream(self, stream: EventStream) -> JsonObject:
        folder = _ResponseFolder()
        async for event in stream.events():
            chunk = parse_json_event(event.data, stream, "chunk")
            if "error" in chunk:
                details = ErrorDetails.from_body(stream.redactor.json(chunk))
                raise stream.broken(f"the stream carried an error: {details.describe()}",
                                    error_type=details.error_type, code=details.code)
            await folder.add(chunk)
        if not folder.complete:
            raise stream.broken("the stream ended before a finishReason")
        return folder.response()

    def parse_response(self, body: JsonObject, request_id: str | None) -> ChatResponse:
        candidates = as_list(body.get("candidates"))
        if not candidates:
            return self._without_candidates(body, request_id)
        candidate = as_dict(candidates[0])
        parts = tuple(as_dict(p) for p in as_list(as_dict(candidate.get("content")).get("parts")))
        response_id = as_str(body.get("responseId"))
        requests = map_function_calls(parts, response_id)
        finish = map_finish_reason(as_str(candidate.get("finishReason")), bool(requests))
        if finish is FinishReason.LENGTH and requests:
            raise self.truncated_tool_call([r.name for r in requests], "finishReason MAX_TOKENS",
                                           request_id)
        return ChatResponse(
            ai_message=AiMessage(text=_text(parts, thought=False),
                                 tool_execution_requests=requests,
                                 thinking=_text(parts, thought=True), provider_blocks=parts),
            finish_reason=finish,
            usage=map_usage(as_dict(body.get("usageMetadata"))),
            model_name=as_str(body.get("modelVersion")),
            response_id=response_id,
        )

    def _without_candidates(self, body: JsonObject, request_id: str | None) -> ChatResponse:
        blocked = as_str(as_dict(body.get("promptFeedback")).get("blockReason"))
        if "error" in body:
            raise self.error_in_body(body, request_id)
        if blocked is None:
            raise self.invalid("no candidates", body, request_id)
        return ChatResponse(ai_message=AiMessage(), finish_reason=FinishReason.CONTENT_FILTER,
                            usage=map_usage(as_dict(body.get("usageMetadata"))),
                            model_name=as_str(body.get("modelVersion")),
                            response_id=as_str(body.get("responseId")))


# -- request -----------------------------------------------------------------------------


def map_contents(messages: Sequence[ChatMessage]) -> list[JsonObject]:
    """Gemini turns; consecutive same-role turns are merged, so a round's function
    responses form one user turn."""
    native_ids = _native_call_ids(messages)
    contents: list[JsonObject] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            continue
        role = "model" if isinstance(message, AiMessage) else "user"
        parts = _parts(message, native_ids)
        if not parts:
            continue
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})
    return contents


def _parts(message: ChatMessage, native_ids: set[str]) -> list[JsonObject]:
    if isinstance(message, UserMessage):
        return [{"text": message.text}] if message.text else []
    if isinstance(message, ToolExecutionResultMessage):
        response: JsonObject = {"name": message.tool_name,
                                "response": {"error" if message.is_error else "output":
                                             message.text}}
        if message.id in native_ids:
            response["id"] = message.id
        return [{"functionResponse": response}]
    if isinstance(message, AiMessage):
        return model_parts(message)
    return []


def model_parts(message: AiMessage) -> list[JsonObject]:
    """The received parts verbatim (thought signatures included), with the function
    calls taken from the message's requests in order; built afresh otherwise."""
    requests = list(message.tool_execution_requests)
    parts: list[JsonObject] = []
    for part in message.provider_blocks if _from_gemini(message) else ():
        if "functionCall" not in part:
            parts.append(dict(part))
        elif requests:
            parts.append({**part, "functionCall": _function_call(requests.pop(0), part)})
    if not _from_gemini(message) and message.text:
        parts.append({"text": message.text})
    parts.extend({"functionCall": _function_call(r)} for r in requests)
    return parts


def _from_gemini(message: AiMessage) -> bool:
    return bool(message.provider_blocks) and not any(
        "type" in part for part in message.provider_blocks)


def _function_call(request: ToolExecutionRequest, part: JsonObject | None = None) -> JsonObject:
    call: JsonObject = {"name": request.name,
                        "args": arguments_object(request.arguments) or {}}
    received_id = as_str(as_dict((part or {}).get("functionCall")).get("id"))
    if received_id:
        call["id"] = received_id
    return call


def _native_call_ids(messages: Sequence[ChatMessage]) -> set[str]:
    ids: set[str] = set()
    for message in messages:
        if isinstance(message, AiMessage) and _from_gemini(message):
            ids.update(as_str(as_dict(p.get("functionCall")).get("id")) or ""
                       for p in message.provider_blocks)
    ids.discard("")
    return ids


def map_tool(spec: ToolSpecification) -> JsonObject:
    declaration: JsonObject = {"name": spec.name, "description": spec.description}
    parameters = to_gemini_schema(spec.name, spec.parameters)
    if parameters is not None:
        declaration["parameters"] = parameters
    return declaration


def map_tool_choice(choice: ToolChoice) -> JsonObject:
    if isinstance(choice, NamedToolChoice):
        return {"mode": "ANY", "allowedFunctionNames": [choice.name]}
    return {"mode": {"auto": "AUTO", "required": "ANY", "none": "NONE"}[choice]}


def _generation_config(parameters: ChatRequestParameters) -> JsonObject:
    config = {"temperature": parameters.temperature, "topP": parameters.top_p,
              "maxOutputTokens": parameters.max_output_tokens,
              "stopSequences": list(parameters.stop_sequences or ()) or None}
    return {k: v for k, v in config.items() if v is not None}


# -- response ----------------------------------------------------------------------------


def map_function_calls(parts: Sequence[JsonObject],
                       response_id: str | None) -> tuple[ToolExecutionRequest, ...]:
    calls = [as_dict(p.get("functionCall")) for p in parts if "functionCall" in p]
    names = [as_str(c.get("name")) or "" for c in calls]
    arguments = [json.dumps(as_dict(c.get("args")), ensure_ascii=False, separators=(",", ":"))
                 for c in calls]
    ids = dedupe_call_ids([as_str(c.get("id")) for c in calls], response_id, names, arguments)
    return tuple(ToolExecutionRequest(id=i, name=n, arguments=a)
                 for i, n, a in zip(ids, names, arguments, strict=True))


def map_finish_reason(reason: str | None, has_tool_calls: bool) -> FinishReason:
    """Gemini says STOP (or nothing) when it calls functions."""
    mapped = _FINISH_REASONS.get(reason or "", FinishReason.OTHER if reason else None)
    if has_tool_calls and mapped in (None, FinishReason.STOP):
        return FinishReason.TOOL_EXECUTION
    return mapped or FinishReason.STOP


def map_usage(usage: JsonObject) -> TokenUsage | None:
    """Output tokens include the thinking tokens, which are billed as output."""
    if not usage:
        return None
    candidates, thoughts = (as_int(usage.get("candidatesTokenCount")),
                            as_int(usage.get("thoughtsTokenCount")))
    output = None if candidates is None and thoughts is None else (candidates or 0) + (
        thoughts or 0)
    return TokenUsage(input_tokens=as_int(usage.get("promptTokenCount")), output_tokens=output,
                      total_tokens=as_int(usage.get("totalTokenCount")),
                      cached_input_tokens=as_int(usage.get("cachedContentTokenCount")))


def _text(parts: Sequence[JsonObject], *, thought: bool) -> str | None:
    texts = [as_str(p.get("text")) or "" for p in parts
             if "text" in p and bool(p.get("thought")) is thought]
    return "".join(texts) or None


# -- streaming ---------------------------------------------------------------------------


@dataclass
class _ResponseFolder:
    """Folds streamed GenerateContentResponse chunks into one response."""

    parts: list[JsonObject] = field(default_factory=list)
    finish_reason: str | None = None
    extra: JsonObject = field(default_factory=dict)
    calls: int = 0

    @property
    def complete(self) -> bool:
        blocked = as_dict(self.extra.get("promptFeedback")).get("blockReason")
        return self.finish_reason is not None or blocked is not None

    async def add(self, chunk: JsonObject) -> None:
        for key in ("responseId", "modelVersion", "usageMetadata", "promptFeedback"):
            if key in chunk:
                self.extra[key] = chunk[key]
        candidates = as_list(chunk.get("candidates"))
        candidate = as_dict(candidates[0]) if candidates else {}
        self.finish_reason = as_str(candidate.get("finishReason")) or self.finish_reason
        for part in as_list(as_dict(candidate.get("content")).get("parts")):
            await self._add_part(dict(as_dict(part)))

    async def _add_part(self, part: JsonObject) -> None:
        if "functionCall" in part:
            call = as_dict(part["functionCall"])
            if observed():
                await emit(PartialToolCall(index=self.calls, id=as_str(call.get("id")),
                                           name=as_str(call.get("name")),
                                           arguments_delta=json.dumps(as_dict(call.get("args")))))
            self.calls += 1
            self.parts.append(part)
            return
        text = as_str(part.get("text"))
        if text and not part.get("thought") and observed():
            await emit(PartialText(delta=text))
        last = self.parts[-1] if self.parts else None
        if text is not None and last is not None and _continues(last, part):
            last["text"] = str(last["text"]) + text
            if "thoughtSignature" in part:
                last["thoughtSignature"] = part["thoughtSignature"]
            return
        self.parts.append(part)

    def response(self) -> JsonObject:
        candidate: JsonObject = {"content": {"role": "model", "parts": self.parts}, "index": 0}
        if self.finish_reason is not None:
            candidate["finishReason"] = self.finish_reason
        return {"candidates": [candidate], **self.extra}


def _continues(last: JsonObject, part: JsonObject) -> bool:
    """A streamed text part that extends the previous one (same kind, not yet signed)."""
    return ("text" in last and "functionCall" not in last and "thoughtSignature" not in last
            and bool(last.get("thought")) == bool(part.get("thought"))
            and set(part) <= {"text", "thought", "thoughtSignature"})
