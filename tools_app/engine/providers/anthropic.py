"""Anthropic Messages (POST {base_url}/v1/messages, `x-api-key`, `anthropic-version`).

Request: system messages go to the top-level `system`; tools carry `input_schema`;
tool_choice auto/any/tool/none (the engine's "required" is `any`, a named choice is
`tool`); parallel_tool_calls=False becomes `disable_parallel_tool_use`; `max_tokens`
is always sent (`default_max_tokens`, 4096, unless max_output_tokens is set);
temperature/top_p are sent only when set (the installed SDK's types no longer list
them, but the API accepted them in 2026 recordings). All the results of one round go
back as ONE user message made of tool_result blocks.

Response: every content block is kept verbatim in AiMessage.provider_blocks and sent
back as received, so thinking blocks keep their signatures and their place before
tool_use, and server-side tool blocks (server_tool_use, *_tool_result) round-trip;
only `tool_use` blocks become ToolExecutionRequests. When an assistant message is sent
back, its tool_use blocks are rewritten from the message's tool_execution_requests (so
a request edited by the user is what the API sees).

Usage: input_tokens counts the whole prompt (cache reads and writes included).

Streaming folds message_start / content_block_* / message_delta / message_stop into
the non-streamed message body. A finished tool_use whose streamed input is not valid
JSON keeps the raw text as its arguments, so the engine rejects it as an arguments
error (it is sent back as {"INVALID_JSON": raw}, since the API wants an object). An
`error` event, a stream that ends before message_stop, or a tool_use block that never
got its content_block_stop (an input cut off at max_tokens) raise instead of returning
anything.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

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
    RESPONSES_ITEM_TYPES,
    JsonObject,
    WireChatModel,
    arguments_object,
    as_dict,
    as_int,
    as_list,
    as_str,
    merge_custom,
    parse_json_event,
)

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
TOOL_CALL_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})

_STOP_REASONS = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "tool_use": FinishReason.TOOL_EXECUTION,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "refusal": FinishReason.CONTENT_FILTER,
    "pause_turn": FinishReason.OTHER,
}


class AnthropicChatModel(WireChatModel):
    """Anthropic Messages API."""

    provider: ClassVar[str] = "anthropic"
    default_base_url: ClassVar[str | None] = "https://api.anthropic.com"

    def __init__(self, settings: EndpointSettings | None = None, /, *,
                 default_max_tokens: int = DEFAULT_MAX_TOKENS,
                 anthropic_version: str = ANTHROPIC_VERSION, **options: Any) -> None:
        self.default_max_tokens = default_max_tokens
        self.anthropic_version = anthropic_version
        super().__init__(settings, **options)

    def default_headers(self) -> dict[str, str]:
        return {"anthropic-version": self.anthropic_version}

    def credentials(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key}

    def path(self, model: str, *, stream: bool) -> str:
        return "v1/messages"

    def build_body(
        self,
        messages: Sequence[ChatMessage],
        parameters: ChatRequestParameters,
        *,
        model: str,
        stream: bool,
    ) -> JsonObject:
        body: JsonObject = {
            "model": model,
            "max_tokens": parameters.max_output_tokens or self.default_max_tokens,
            "messages": map_messages(messages),
            "stream": stream,
        }
        system = "\n\n".join(m.text for m in messages if isinstance(m, SystemMessage))
        if system:
            body["system"] = system
        body.update(_map_tools(parameters))
        optional = {"temperature": parameters.temperature, "top_p": parameters.top_p,
                    "stop_sequences": list(parameters.stop_sequences or ()) or None}
        body.update({k: v for k, v in optional.items() if v is not None})
        return merge_custom(body, parameters.custom, self.custom_keys)

    async def read_stream(self, stream: EventStream) -> JsonObject:
        folder = _MessageFolder()
        async for event in stream.events():
            data = parse_json_event(event.data, stream, f"{event.event} event")
            if data.get("type") == "error" or event.event == "error":
                details = ErrorDetails.from_body(stream.redactor.json(data))
                raise stream.broken(f"the stream carried an error event: {details.describe()}",
                                    error_type=details.error_type, code=details.code)
            await folder.add(data, stream)
        if not folder.stopped:
            raise stream.broken("the stream ended before message_stop")
        unfinished = folder.unfinished_tool_calls()
        if unfinished:
            raise self.truncated_tool_call(unfinished, f"stop_reason {folder.stop_reason}",
                                           stream.request_id)
        return folder.message_body()

    def parse_response(self, body: JsonObject, request_id: str | None) -> ChatResponse:
        content = body.get("content")
        if body.get("type") == "error":
            raise self.error_in_body(body, request_id)
        if not isinstance(content, list):
            raise self.invalid("no content blocks", body, request_id)
        blocks = tuple(as_dict(block) for block in content)
        requests = tuple(_tool_request(b) for b in blocks if b.get("type") == "tool_use")
        finish = map_stop_reason(as_str(body.get("stop_reason")), bool(requests))
        if finish is FinishReason.LENGTH and requests:
            raise self.truncated_tool_call([r.name for r in requests], "stop_reason max_tokens",
                                           request_id)
        return ChatResponse(
            ai_message=AiMessage(
                text=_joined(blocks, "text", "text"),
                tool_execution_requests=requests,
                thinking=_joined(blocks, "thinking", "thinking"),
                provider_blocks=blocks,
            ),
            finish_reason=finish,
            usage=map_usage(as_dict(body.get("usage"))),
            model_name=as_str(body.get("model")),
            response_id=as_str(body.get("id")),
        )


# -- request -----------------------------------------------------------------------------


def map_messages(messages: Sequence[ChatMessage]) -> list[JsonObject]:
    """Wire messages; consecutive same-role turns are merged, so all the results of a
    round (and any user text after them) form one user message."""
    wire: list[JsonObject] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            continue
        role = "assistant" if isinstance(message, AiMessage) else "user"
        blocks = _blocks(message)
        if not blocks:
            continue
        if wire and wire[-1]["role"] == role:
            wire[-1]["content"].extend(blocks)
        else:
            wire.append({"role": role, "content": blocks})
    return wire


def _blocks(message: ChatMessage) -> list[JsonObject]:
    if isinstance(message, UserMessage):
        return [{"type": "text", "text": message.text}] if message.text else []
    if isinstance(message, ToolExecutionResultMessage):
        result: JsonObject = {"type": "tool_result", "tool_use_id": message.id}
        if message.text:
            result["content"] = message.text
        result["is_error"] = message.is_error
        return [result]
    if isinstance(message, AiMessage):
        return assistant_blocks(message)
    return []


def assistant_blocks(message: AiMessage) -> list[JsonObject]:
    """The received blocks as they came (thinking, server tools, text...), with the
    tool_use blocks taken from the message's requests; built afresh when the message
    did not come from Anthropic."""
    requests = {r.id: r for r in message.tool_execution_requests}
    blocks: list[JsonObject] = []
    for block in message.provider_blocks if _from_anthropic(message) else ():
        if block.get("type") == "tool_use":
            request = requests.pop(str(block.get("id")), None)
            if request is not None:
                blocks.append(_tool_use_block(request, block))
        elif block.get("type") != "text" or block.get("text"):
            blocks.append(dict(block))
    if not _from_anthropic(message) and message.text:
        blocks.append({"type": "text", "text": message.text})
    blocks.extend(_tool_use_block(r) for r in requests.values())
    return blocks


def _from_anthropic(message: AiMessage) -> bool:
    """Blocks with a type, and not the output items of OpenAI's Responses API."""
    return bool(message.provider_blocks) and all(
        isinstance(b.get("type"), str) for b in message.provider_blocks) and not all(
        b.get("type") in RESPONSES_ITEM_TYPES for b in message.provider_blocks)


def _tool_use_block(request: ToolExecutionRequest,
                    received: JsonObject | None = None) -> JsonObject:
    block = dict(received or {"type": "tool_use"})
    arguments = arguments_object(request.arguments)
    block.update(id=request.id, name=request.name,
                 input=arguments if arguments is not None else {"INVALID_JSON": request.arguments})
    return block


def _map_tools(parameters: ChatRequestParameters) -> JsonObject:
    if not parameters.tools:
        return {}
    mapped: JsonObject = {"tools": [map_tool(spec) for spec in parameters.tools]}
    choice = map_tool_choice(parameters.tool_choice, parameters.parallel_tool_calls)
    if choice is not None:
        mapped["tool_choice"] = choice
    return mapped


def map_tool(spec: ToolSpecification) -> JsonObject:
    tool: JsonObject = {"name": spec.name, "description": spec.description,
                        "input_schema": spec.parameters}
    if spec.strict is not None:
        tool["strict"] = spec.strict
    return tool


def map_tool_choice(choice: ToolChoice | None, parallel: bool | None) -> JsonObject | None:
    if isinstance(choice, NamedToolChoice):
        mapped: JsonObject = {"type": "tool", "name": choice.name}
    elif choice == "none":
        return {"type": "none"}
    elif choice == "required":
        mapped = {"type": "any"}
    elif choice == "auto" or parallel is False:
        mapped = {"type": "auto"}
    else:
        return None
    if parallel is False:
        mapped["disable_parallel_tool_use"] = True
    return mapped


# -- response ----------------------------------------------------------------------------


def _tool_request(block: JsonObject) -> ToolExecutionRequest:
    value = block.get("input")
    # A streamed input that was not valid JSON is kept as the raw string, so the
    # engine rejects it as an arguments error instead of running the tool.
    arguments = value if isinstance(value, str) else json.dumps(
        value if value is not None else {}, ensure_ascii=False, separators=(",", ":"))
    return ToolExecutionRequest(id=str(block.get("id") or ""), name=str(block.get("name") or ""),
                                arguments=arguments)


def _joined(blocks: Sequence[JsonObject], kind: str, key: str) -> str | None:
    parts = [as_str(b.get(key)) or "" for b in blocks if b.get("type") == kind]
    return "\n".join(p for p in parts if p) or None


def map_stop_reason(reason: str | None, has_tool_calls: bool) -> FinishReason:
    mapped = _STOP_REASONS.get(reason or "", FinishReason.OTHER if reason else None)
    if mapped is None:
        return FinishReason.TOOL_EXECUTION if has_tool_calls else FinishReason.STOP
    return mapped


def map_usage(usage: JsonObject) -> TokenUsage | None:
    """input_tokens counts the whole prompt, cached parts included (as OpenAI's does);
    cached_input_tokens the cache reads among them."""
    if not usage:
        return None
    counts = [as_int(usage.get(k)) for k in ("input_tokens", "cache_creation_input_tokens",
                                              "cache_read_input_tokens")]
    known = [c for c in counts if c is not None]
    input_tokens = sum(known) if known else None
    output_tokens = as_int(usage.get("output_tokens"))
    total = None if input_tokens is None or output_tokens is None else input_tokens + output_tokens
    return TokenUsage(input_tokens=input_tokens, output_tokens=output_tokens, total_tokens=total,
                      cached_input_tokens=counts[2])


# -- streaming ---------------------------------------------------------------------------


@dataclass
class _BlockFolder:
    block: JsonObject
    tool_index: int | None = None
    partial_json: list[str] = field(default_factory=list)
    finished: bool = False

    def finish(self) -> None:
        self.finished = True
        if self.block.get("type") not in TOOL_CALL_BLOCKS or not "".join(self.partial_json):
            return
        raw = "".join(self.partial_json)
        try:
            self.block["input"] = json.loads(raw)
        except ValueError:
            self.block["input"] = raw


@dataclass
class _MessageFolder:
    """Folds the Messages stream events into one message body."""

    message: JsonObject = field(default_factory=dict)
    blocks: dict[int, _BlockFolder] = field(default_factory=dict)
    usage: JsonObject = field(default_factory=dict)
    stop_reason: str | None = None
    stop_sequence: str | None = None
    stopped: bool = False
    tool_calls: int = 0

    async def add(self, data: JsonObject, stream: EventStream) -> None:
        kind = data.get("type")
        if kind == "message_start":
            self.message = as_dict(data.get("message"))
            self.usage.update(as_dict(self.message.get("usage")))
        elif kind == "content_block_start":
            await self._start_block(data, stream)
        elif kind == "content_block_delta":
            await self._delta(self._block(data, stream), as_dict(data.get("delta")))
        elif kind == "content_block_stop":
            self._block(data, stream).finish()
        elif kind == "message_delta":
            delta = as_dict(data.get("delta"))
            self.stop_reason = as_str(delta.get("stop_reason")) or self.stop_reason
            self.stop_sequence = as_str(delta.get("stop_sequence")) or self.stop_sequence
            self.usage.update({k: v for k, v in as_dict(data.get("usage")).items()
                               if v is not None})
        elif kind == "message_stop":
            self.stopped = True

    def _block(self, data: JsonObject, stream: EventStream) -> _BlockFolder:
        index = as_int(data.get("index"))
        if index is None or index not in self.blocks:
            raise stream.broken(f"the stream referred to content block {index}, "
                                "which it never started")
        return self.blocks[index]

    async def _start_block(self, data: JsonObject, stream: EventStream) -> None:
        index = as_int(data.get("index"))
        if index is None:
            raise stream.broken("content_block_start without an index")
        block = dict(as_dict(data.get("content_block")))
        folder = _BlockFolder(block)
        self.blocks[index] = folder
        if block.get("type") == "tool_use":
            folder.tool_index, self.tool_calls = self.tool_calls, self.tool_calls + 1
            if observed():
                await emit(PartialToolCall(index=folder.tool_index, id=as_str(block.get("id")),
                                           name=as_str(block.get("name"))))
        elif block.get("type") == "text" and as_str(block.get("text")) and observed():
            await emit(PartialText(delta=block["text"]))

    async def _delta(self, folder: _BlockFolder, delta: JsonObject) -> None:
        kind, block = delta.get("type"), folder.block
        if kind == "text_delta":
            text = as_str(delta.get("text")) or ""
            block["text"] = (as_str(block.get("text")) or "") + text
            if observed():
                await emit(PartialText(delta=text))
        elif kind == "input_json_delta":
            fragment = as_str(delta.get("partial_json")) or ""
            folder.partial_json.append(fragment)
            if folder.tool_index is not None and fragment and observed():
                await emit(PartialToolCall(index=folder.tool_index, arguments_delta=fragment))
        elif kind == "thinking_delta":
            block["thinking"] = (as_str(block.get("thinking")) or "") + str(
                delta.get("thinking") or "")
        elif kind == "signature_delta":
            block["signature"] = delta.get("signature")
        elif kind == "citations_delta":
            block["citations"] = [*as_list(block.get("citations")), delta.get("citation")]

    def unfinished_tool_calls(self) -> list[str]:
        return [str(f.block.get("name") or "") for f in self.blocks.values()
                if not f.finished and f.block.get("type") in TOOL_CALL_BLOCKS]

    def message_body(self) -> JsonObject:
        for folder in self.blocks.values():
            if not folder.finished:
                folder.finish()
        return {
            **self.message,
            "content": [self.blocks[i].block for i in sorted(self.blocks)],
            "stop_reason": self.stop_reason,
            "stop_sequence": self.stop_sequence,
            "usage": self.usage,
        }

