"""OpenAI Chat Completions (POST {base_url}/chat/completions), and every server that
speaks it: Ollama, vLLM, DeepSeek, Groq, LiteLLM, OpenRouter...

Request: system/user/assistant(+tool_calls)/tool messages; tools[].function with name,
description, parameters and strict; tool_choice auto/required/none/named;
parallel_tool_calls; max_output_tokens goes out as `max_completion_tokens` for
OpenAI (`max_tokens` is deprecated there and refused by reasoning models) and as
`max_tokens` for OpenAI-compatible servers, which mostly know only that one (both are
configurable with `max_tokens_field`); `custom` parameters are merged into the body last
(only the keys request_limits.py allows).
Tool-call arguments that are empty or null are the empty object "{}"; reasoning text
(`reasoning_content`, `reasoning`) becomes AiMessage.thinking and is never sent back.

Quirks of compatible servers that are tolerated. Seen in recordings: a function name
repeated in every chunk, `arguments: null`, a leading space before `data:`, no
finish_reason at all, an empty tool-call id. Guarded against as well: arguments resent
whole, fragments without an index, a missing or repeated id. A missing id is replaced
by a stable one made from the response id and the call's index.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from tools_app.engine.providers.http.client import EventStream
from tools_app.engine.providers.http.endpoint import EndpointSettings
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
    MessageCache,
    WireChatModel,
    arguments_object,
    as_dict,
    as_int,
    as_list,
    as_str,
    dedupe_call_ids,
    merge_custom,
    normalize_arguments,
    parse_json_event,
)

MaxTokensField = Literal["max_completion_tokens", "max_tokens"]

_FINISH_REASONS = {
    "stop": FinishReason.STOP,
    "tool_calls": FinishReason.TOOL_EXECUTION,
    "function_call": FinishReason.TOOL_EXECUTION,
    "length": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
}


class OpenAIChatModel(WireChatModel):
    """OpenAI Chat Completions. `api_key=None` sends no Authorization header."""

    provider: ClassVar[str] = "openai"
    default_base_url: ClassVar[str | None] = "https://api.openai.com/v1"
    default_max_tokens_field: ClassVar[MaxTokensField] = "max_completion_tokens"

    def __init__(self, settings: EndpointSettings | None = None, /, *,
                 max_tokens_field: MaxTokensField | None = None, **options: Any) -> None:
        super().__init__(settings, **options)
        self.max_tokens_field: MaxTokensField = (max_tokens_field
                                                 or self.default_max_tokens_field)
        self.messages = MessageCache(_map_message)
        # Tool lists mapped once, keyed by the specification objects: a loop
        # sends the same ones every round (and every run of a ToolService the same).
        self._tools: dict[tuple[int, ...], _MappedTools] = {}

    def credentials(self, api_key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"}

    def path(self, model: str, *, stream: bool) -> str:
        return "chat/completions"

    def build_body(
        self,
        messages: Sequence[ChatMessage],
        parameters: ChatRequestParameters,
        *,
        model: str,
        stream: bool,
    ) -> JsonObject:
        translated = [self.messages.translate(message) for message in messages]
        body: JsonObject = {"model": model, "messages": translated, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        body.update(self._map_parameters(parameters))
        return merge_custom(body, parameters.custom, self.custom_keys)

    def _mapped_tools(self, specifications: tuple[ToolSpecification, ...]) -> list[JsonObject]:
        key = tuple(map(id, specifications))  # the entry keeps them alive: ids stay unique
        cached = self._tools.get(key)
        if cached is None:
            if len(self._tools) >= _TOOL_LISTS_KEPT:
                self._tools.clear()
            mapped = [map_tool(spec) for spec in specifications]
            cached = self._tools[key] = _MappedTools(specifications, mapped)
        return cached.mapped

    def _map_parameters(self, parameters: ChatRequestParameters) -> JsonObject:
        mapped: JsonObject = {}
        if parameters.tools:
            mapped["tools"] = self._mapped_tools(parameters.tools)
            if parameters.tool_choice is not None:
                mapped["tool_choice"] = map_tool_choice(parameters.tool_choice)
            if parameters.parallel_tool_calls is not None:
                mapped["parallel_tool_calls"] = parameters.parallel_tool_calls
        if parameters.max_output_tokens is not None:
            mapped[self.max_tokens_field] = parameters.max_output_tokens
        optional = {"temperature": parameters.temperature, "top_p": parameters.top_p,
                    "stop": list(parameters.stop_sequences or ()) or None}
        mapped.update({k: v for k, v in optional.items() if v is not None})
        return mapped

    async def read_stream(self, stream: EventStream) -> JsonObject:
        folder = _StreamFolder()
        async with aclosing(stream.events()) as events:
            async for event in events:
                if event.data.strip() == "[DONE]":
                    folder.done = True
                    await stream.drain(events)
                    break
                await folder.add(_chunk(event.data, stream))
        if not folder.complete:
            raise stream.broken("the stream ended before the response was complete "
                                "(no finish_reason and no [DONE])")
        return folder.completion()

    def parse_response(self, body: JsonObject, request_id: str | None) -> ChatResponse:
        choices = as_list(body.get("choices"))
        if not choices or not isinstance(choices[0], dict):
            if "error" in body:
                raise self.error_in_body(body, request_id)
            raise self.invalid("no choices", body, request_id)
        choice = choices[0]
        message = as_dict(choice.get("message"))
        requests = map_tool_calls(as_list(message.get("tool_calls")), as_str(body.get("id")))
        finish = map_finish_reason(as_str(choice.get("finish_reason")), bool(requests))
        if finish is FinishReason.LENGTH and requests:
            raise self.truncated_tool_call([r.name for r in requests], "finish_reason length",
                                           request_id)
        return ChatResponse(
            ai_message=AiMessage(text=_message_text(message), tool_execution_requests=requests,
                                 thinking=_reasoning(message)),
            finish_reason=finish,
            usage=map_usage(as_dict(body.get("usage"))),
            model_name=as_str(body.get("model")),
            response_id=as_str(body.get("id")),
        )


def _chunk(data: str, stream: EventStream) -> JsonObject:
    chunk = parse_json_event(data, stream, "chunk")
    if "error" in chunk:  # OpenAI and OpenRouter report a mid-stream failure this way
        details = ErrorDetails.from_body(stream.redactor.json(chunk))
        raise stream.broken(f"the stream carried an error: {details.describe()}",
                            error_type=details.error_type, code=details.code)
    return chunk


_TOOL_LISTS_KEPT = 64


@dataclass(frozen=True)
class _MappedTools:
    specifications: tuple[ToolSpecification, ...]
    mapped: list[JsonObject]


class OpenAICompatibleChatModel(OpenAIChatModel):
    """Any OpenAI-compatible server: a base_url, a model name, extra headers, and an API
    key only when the server needs one."""

    provider: ClassVar[str] = "openai_compatible"
    default_base_url: ClassVar[str | None] = None
    default_max_tokens_field: ClassVar[MaxTokensField] = "max_tokens"


# -- request -----------------------------------------------------------------------------


def map_messages(messages: Sequence[ChatMessage]) -> list[JsonObject]:
    return [_map_message(message) for message in messages]


def _map_message(message: ChatMessage) -> JsonObject:
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": message.text}
    if isinstance(message, UserMessage):
        return {"role": "user", "content": message.text}
    if isinstance(message, ToolExecutionResultMessage):
        return {"role": "tool", "tool_call_id": message.id, "content": message.text}
    return _map_ai_message(message)


def _map_ai_message(message: AiMessage) -> JsonObject:
    if not message.tool_execution_requests:
        return {"role": "assistant", "content": message.text or ""}
    return {
        "role": "assistant",
        "content": message.text or None,
        "tool_calls": [
            {"id": r.id, "type": "function",
             "function": {"name": r.name, "arguments": normalize_arguments(r.arguments)}}
            for r in message.tool_execution_requests
        ],
    }


def map_tool(spec: ToolSpecification) -> JsonObject:
    function: JsonObject = {"name": spec.name, "description": spec.description,
                            "parameters": spec.parameters}
    if spec.strict is not None:
        function["strict"] = spec.strict
    return {"type": "function", "function": function}


def map_tool_choice(choice: ToolChoice) -> str | JsonObject:
    if isinstance(choice, NamedToolChoice):
        return {"type": "function", "function": {"name": choice.name}}
    return choice


# -- response ----------------------------------------------------------------------------


def map_tool_calls(calls: list[Any], response_id: str | None) -> tuple[ToolExecutionRequest, ...]:
    functions = [as_dict(as_dict(call).get("function")) for call in calls]
    names = [as_str(f.get("name")) or "" for f in functions]
    arguments = [normalize_arguments(f.get("arguments")) for f in functions]
    ids = dedupe_call_ids([as_str(as_dict(call).get("id")) for call in calls], response_id,
                          names, arguments)
    return tuple(ToolExecutionRequest(id=i, name=n, arguments=a)
                 for i, n, a in zip(ids, names, arguments, strict=True))


def map_finish_reason(reason: str | None, has_tool_calls: bool) -> FinishReason:
    """Compatible servers may send no reason, or "stop" next to tool calls."""
    mapped = _FINISH_REASONS.get(reason or "", FinishReason.OTHER if reason else None)
    if has_tool_calls and mapped in (None, FinishReason.STOP):
        return FinishReason.TOOL_EXECUTION
    return mapped or FinishReason.STOP


def map_usage(usage: JsonObject) -> TokenUsage | None:
    if not usage:
        return None
    details = as_dict(usage.get("prompt_tokens_details"))
    return TokenUsage(input_tokens=as_int(usage.get("prompt_tokens")),
                      output_tokens=as_int(usage.get("completion_tokens")),
                      total_tokens=as_int(usage.get("total_tokens")),
                      cached_input_tokens=as_int(details.get("cached_tokens")))


def _message_text(message: JsonObject) -> str | None:
    content = message.get("content")
    if isinstance(content, list):  # some compatible servers send content parts
        content = "".join(as_str(as_dict(p).get("text")) or "" for p in content)
    text = as_str(content) or None
    return text or as_str(message.get("refusal")) or None


def _reasoning(message: JsonObject) -> str | None:
    """DeepSeek/vLLM `reasoning_content`, Groq/OpenRouter `reasoning`; never sent back."""
    return as_str(message.get("reasoning_content")) or as_str(message.get("reasoning")) or None


# -- streaming ---------------------------------------------------------------------------


@dataclass
class _ToolCallFolder:
    id: str | None = None
    name: str = ""
    arguments: str = ""

    def add(self, fragment: JsonObject) -> tuple[str | None, str | None, str]:
        """Merge one fragment; returns what was new (id, name, arguments delta)."""
        new_id = fragment.get("id")
        new_id = new_id if new_id and isinstance(new_id, str) and not self.id else None
        function = fragment.get("function")
        if not isinstance(function, dict):
            function = {}
        name = function.get("name")
        name = name if name and isinstance(name, str) else None
        delta = function.get("arguments")
        delta = delta if delta and isinstance(delta, str) else ""
        self.id = self.id or new_id
        name = None if name == self.name else name  # a name repeated in every chunk
        self.name += name or ""
        if delta and delta == self.arguments and arguments_object(delta) is not None:
            delta = ""  # the whole arguments object sent again
        self.arguments += delta
        return new_id, name, delta

    def as_tool_call(self) -> JsonObject:
        return {"id": self.id or "", "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class _StreamFolder:
    """Folds chat.completion.chunk objects into one chat.completion body."""

    done: bool = False
    response_id: str | None = None
    model: str | None = None
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    calls: dict[int, _ToolCallFolder] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: JsonObject | None = None

    @property
    def complete(self) -> bool:
        return self.done or self.finish_reason is not None

    async def add(self, chunk: JsonObject) -> None:
        # Called for every event of a stream: plain lookups, no helper per field.
        if not self.response_id:
            self.response_id = as_str(chunk.get("id"))
        if not self.model:
            self.model = as_str(chunk.get("model"))
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        choices = chunk.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                if isinstance(choice, dict) and choice.get("index", 0) == 0:
                    await self._add_choice(choice)

    async def _add_choice(self, choice: JsonObject) -> None:
        reason = choice.get("finish_reason")
        if reason and isinstance(reason, str):
            self.finish_reason = reason
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        text = delta.get("content")
        if text and isinstance(text, str):
            self.text.append(text)
            if observed():
                await emit(PartialText(delta=text))
        if "reasoning_content" in delta or "reasoning" in delta:
            reasoning = (as_str(delta.get("reasoning_content"))
                         or as_str(delta.get("reasoning")))
            if reasoning:
                self.reasoning.append(reasoning)
        refusal = delta.get("refusal")
        if refusal and isinstance(refusal, str):
            self.refusal.append(refusal)
        fragments = delta.get("tool_calls")
        if fragments and isinstance(fragments, list):
            for position, fragment in enumerate(fragments):
                await self._add_tool_fragment(position, as_dict(fragment))

    async def _add_tool_fragment(self, position: int, fragment: JsonObject) -> None:
        index = as_int(fragment.get("index"))
        if index is None:  # servers that omit the index: match by id, else by position
            index = self._index_for(as_str(fragment.get("id")), position)
        folder = self.calls.get(index)
        if folder is None:
            folder = self.calls[index] = _ToolCallFolder()
        new_id, name, delta = folder.add(fragment)
        if (new_id or name or delta) and observed():
            await emit(PartialToolCall(index=index, id=new_id, name=name,
                                       arguments_delta=delta))

    def _index_for(self, call_id: str | None, position: int) -> int:
        if call_id:
            known = [i for i, folder in self.calls.items() if folder.id == call_id]
            return known[0] if known else len(self.calls)
        return max(self.calls) if self.calls else position

    def completion(self) -> JsonObject:
        message: JsonObject = {"role": "assistant", "content": "".join(self.text) or None}
        if self.calls:
            message["tool_calls"] = [self.calls[i].as_tool_call() for i in sorted(self.calls)]
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.refusal:
            message["refusal"] = "".join(self.refusal)
        body: JsonObject = {
            "id": self.response_id, "object": "chat.completion", "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
        }
        if self.usage is not None:
            body["usage"] = self.usage
        return body
