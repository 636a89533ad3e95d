"""OpenAI Responses API (POST {base_url}/responses).

Request: system messages become `instructions`; the rest of the conversation is `input`
items: user and assistant messages, `function_call` items (one per tool call, carrying
its `call_id`) and `function_call_output` items (a result by `call_id`); tools are
`{"type": "function", "name", "description", "parameters", "strict"}` (strict false
unless the tool is strict: the API's default is true); tool_choice
auto/required/none or `{"type": "function", "name"}`; parallel_tool_calls;
`max_output_tokens`. `store` is false unless the endpoint's `custom` sets it: nothing is
kept at OpenAI, so the whole conversation is sent every round. The Responses API has no
stop sequences (a run asking for them is refused before it starts).

Reasoning items: every output item of a response (reasoning, messages, function calls,
server-side tool items) is kept verbatim in AiMessage.provider_blocks and sent back in
its place, as the API requires (a `function_call` item that names its id needs the
reasoning item that preceded it). With `store: false` a reasoning item can only be sent
back with its `encrypted_content`, so reasoning models (o-series, gpt-5 and later, codex)
are asked for it (`include: ["reasoning.encrypted_content"]`; other models refuse that
include, and `custom.include` overrides the choice). A reasoning item that came without
it is left out, together with the ids of the items after it, which the API would
otherwise look up.

`previous_response_id` is an endpoint option in `custom` (with `store: true`): a response
id is sent as given; "auto" chains the requests, each continuing the previous response
(whose id the AiMessage keeps as a `{"type": "response", "id"}` block) and sending only
the messages after it, as the API documents for stored conversations.

Response: `function_call` items become ToolExecutionRequests (id = `call_id`); the
`output_text` parts of message items are the text; reasoning summaries the thinking.
Status `incomplete` for max_output_tokens is a cut-off (an error when it cut a call),
`failed` an error.

Streaming folds `response.output_item.added`, `response.function_call_arguments.delta`
/ `.done`, `response.output_text.delta`, `response.output_item.done` into the items and
ends on `response.completed` or `response.incomplete`; `response.failed`, an `error`
event, or a stream that ends before either raise instead of returning anything.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from contextlib import aclosing
from typing import Any, ClassVar

from tools_app.engine.providers.http.client import EventStream
from tools_app.engine.providers.http.wire_errors import ErrorDetails

from ..errors import ProviderError
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
    MessageCache,
    WireChatModel,
    as_dict,
    as_int,
    as_list,
    as_str,
    dedupe_call_ids,
    merge_custom,
    normalize_arguments,
    parse_json_event,
)
from .openai_responses_stream import ResponseFolder

ENCRYPTED_REASONING = "reasoning.encrypted_content"
CHAIN = "auto"
"""`custom.previous_response_id` that chains each request to the previous response."""
# Models that reason (and so accept the encrypted-reasoning include); gpt-5-chat does not.
_REASONING_MODEL = re.compile(r"^(o\d|gpt-5(?!(\.\d+)?-chat)|gpt-[6-9]|codex)", re.IGNORECASE)
_INCOMPLETE = {"max_output_tokens": FinishReason.LENGTH,
               "content_filter": FinishReason.CONTENT_FILTER}


class OpenAIResponsesModel(WireChatModel):
    """OpenAI Responses API. `api_key=None` sends no Authorization header."""

    provider: ClassVar[str] = "openai_responses"
    default_base_url: ClassVar[str | None] = "https://api.openai.com/v1"

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self.messages = MessageCache(_map_plain_message)

    def credentials(self, api_key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"}

    def path(self, model: str, *, stream: bool) -> str:
        return "responses"

    def build_body(
        self,
        messages: Sequence[ChatMessage],
        parameters: ChatRequestParameters,
        *,
        model: str,
        stream: bool,
    ) -> JsonObject:
        custom = dict(parameters.custom or {})
        store = custom.get("store") is True
        previous = None
        if custom.get("previous_response_id") == CHAIN:
            del custom["previous_response_id"]
            if store:
                messages, previous = _after_last_response(messages)
        body: JsonObject = {"model": model, "input": self._input(messages, store=store),
                            "stream": stream, "store": False}
        if previous:
            body["previous_response_id"] = previous
        instructions = "\n\n".join(m.text for m in messages if isinstance(m, SystemMessage))
        if instructions:
            body["instructions"] = instructions
        if not store and _REASONING_MODEL.match(model):
            body["include"] = [ENCRYPTED_REASONING]
        body.update(_map_parameters(parameters))
        return merge_custom(body, custom, self.custom_keys)

    def _input(self, messages: Sequence[ChatMessage], *, store: bool) -> list[JsonObject]:
        items: list[JsonObject] = []
        for message in messages:
            if isinstance(message, AiMessage):
                items.extend(assistant_items(message, store=store))
            elif not isinstance(message, SystemMessage):
                items.append(self.messages.translate(message))
        return items

    async def read_stream(self, stream: EventStream) -> JsonObject:
        folder = ResponseFolder()
        async with aclosing(stream.events()) as events:
            async for event in events:
                data = parse_json_event(event.data, stream, f"{event.event} event")
                kind = data.get("type") or event.event
                if kind in ("error", "response.failed"):
                    raise _stream_failure(stream, data)
                await folder.add(kind, data)
                if folder.final is not None:
                    await stream.drain(events)  # the connection goes back to the pool
                    break
        if folder.final is None:
            raise stream.broken("the stream ended before response.completed")
        return folder.response_body()

    def parse_response(self, body: JsonObject, request_id: str | None) -> ChatResponse:
        error = body.get("error")
        if isinstance(error, dict) and (body.get("status") == "failed"
                                        or not isinstance(body.get("output"), list)):
            raise self.error_in_body(body, request_id)
        output = body.get("output")
        if not isinstance(output, list):
            raise self.invalid("no output items", body, request_id)
        items = tuple(as_dict(item) for item in output)
        requests = map_function_calls(items, as_str(body.get("id")))
        finish = map_status(body, bool(requests))
        if finish is FinishReason.LENGTH and requests:
            raise self.truncated_tool_call([r.name for r in requests],
                                           "status incomplete: max_output_tokens", request_id)
        response_id = as_str(body.get("id"))
        blocks = (*items, {"type": "response", "id": response_id}) if response_id else items
        return ChatResponse(
            ai_message=AiMessage(text=output_text(items), tool_execution_requests=requests,
                                 thinking=reasoning_text(items), provider_blocks=blocks),
            finish_reason=finish,
            usage=map_usage(as_dict(body.get("usage"))),
            model_name=as_str(body.get("model")),
            response_id=response_id,
        )


def _stream_failure(stream: EventStream, data: JsonObject) -> ProviderError:
    """`error` carries code/message at its top level, `response.failed` in response.error."""
    failed = as_dict(as_dict(data.get("response")).get("error"))
    source = failed or {k: data.get(k) for k in ("code", "message", "param") if k in data}
    details = ErrorDetails.from_body(stream.redactor.json({"error": source}))
    return stream.broken(f"the stream carried an error: {details.describe()}",
                         error_type=details.error_type, code=details.code)


# -- request -----------------------------------------------------------------------------


def _after_last_response(messages: Sequence[ChatMessage],
                         ) -> tuple[Sequence[ChatMessage], str | None]:
    """The messages after the last answer the API stored, and that answer's response id
    (all the messages and None when no answer came from this API). System messages stay:
    the API does not carry instructions over."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AiMessage) and (response_id := _response_id(message)):
            system = [m for m in messages[:index] if isinstance(m, SystemMessage)]
            return [*system, *messages[index + 1:]], response_id
    return messages, None


def _response_id(message: AiMessage) -> str | None:
    if not from_responses(message):
        return None
    return next((as_str(b.get("id")) for b in message.provider_blocks
                 if b.get("type") == "response"), None)


def _map_plain_message(message: ChatMessage) -> JsonObject:
    if isinstance(message, UserMessage):
        return {"role": "user", "content": message.text}
    if isinstance(message, ToolExecutionResultMessage):
        return {"type": "function_call_output", "call_id": message.id, "output": message.text}
    raise TypeError(f"not a plain message: {type(message).__name__}")


def assistant_items(message: AiMessage, *, store: bool) -> list[JsonObject]:
    """The received output items in their places (function calls taken from the message's
    requests, so an edited call is what the API sees); built afresh for a message that did
    not come from the Responses API."""
    requests = {r.id: r for r in message.tool_execution_requests}
    received = message.provider_blocks if from_responses(message) else ()
    # Without its encrypted content an unstored reasoning item cannot be sent back, and
    # the items after it may not name their ids then.
    keep_ids = store or all(_sendable_reasoning(i) for i in received
                            if i.get("type") == "reasoning")
    items: list[JsonObject] = []
    for item in received:
        kind = item.get("type")
        if kind == "reasoning":
            if keep_ids:
                items.append(_reasoning_item(item))
        elif kind == "function_call":
            request = requests.pop(str(item.get("call_id")), None)
            if request is not None:
                items.append(_function_call_item(request, item, keep_ids))
        elif kind == "message":
            items.append(_message_item(item, keep_ids))
        elif kind == "response":
            continue  # the response's id, kept for chaining; not an item
        else:
            items.append(dict(item))
    if not received and message.text:
        items.append({"role": "assistant", "content": message.text})
    items.extend(_function_call_item(r) for r in requests.values())
    return items


def from_responses(message: AiMessage) -> bool:
    return bool(message.provider_blocks) and all(
        b.get("type") in RESPONSES_ITEM_TYPES for b in message.provider_blocks)


def _sendable_reasoning(item: JsonObject) -> bool:
    return bool(as_str(item.get("encrypted_content")))


def _reasoning_item(item: JsonObject) -> JsonObject:
    sent: JsonObject = {"type": "reasoning", "id": item.get("id"),
                        "summary": [{"type": "summary_text", "text": as_str(p.get("text")) or ""}
                                    for p in map(as_dict, as_list(item.get("summary")))]}
    if _sendable_reasoning(item):
        sent["encrypted_content"] = item["encrypted_content"]
    content = [{"type": "reasoning_text", "text": as_str(p.get("text")) or ""}
               for p in map(as_dict, as_list(item.get("content")))]
    if content:
        sent["content"] = content
    return sent


def _function_call_item(request: ToolExecutionRequest, received: JsonObject | None = None,
                        keep_id: bool = True) -> JsonObject:
    item: JsonObject = {"type": "function_call", "call_id": request.id, "name": request.name,
                        "arguments": normalize_arguments(request.arguments)}
    item_id = as_str((received or {}).get("id"))
    if item_id and keep_id:
        item["id"] = item_id
    return item


def _message_item(item: JsonObject, keep_id: bool) -> JsonObject:
    parts = [as_dict(p) for p in as_list(item.get("content"))]
    item_id = as_str(item.get("id"))
    if not keep_id or not item_id:
        return {"role": "assistant", "content": _parts_text(parts)}
    sent: JsonObject = {"type": "message", "id": item_id, "role": "assistant",
                        "status": "completed", "content": [_output_part(p) for p in parts]}
    if as_str(item.get("phase")):
        sent["phase"] = item["phase"]  # commentary or final_answer, as received
    return sent


def _output_part(part: JsonObject) -> JsonObject:
    if part.get("type") == "refusal":
        return {"type": "refusal", "refusal": as_str(part.get("refusal")) or ""}
    return {"type": "output_text", "text": as_str(part.get("text")) or "",
            "annotations": as_list(part.get("annotations"))}


def _map_parameters(parameters: ChatRequestParameters) -> JsonObject:
    mapped: JsonObject = {}
    if parameters.tools:
        mapped["tools"] = [map_tool(spec) for spec in parameters.tools]
        if parameters.tool_choice is not None:
            mapped["tool_choice"] = map_tool_choice(parameters.tool_choice)
        if parameters.parallel_tool_calls is not None:
            mapped["parallel_tool_calls"] = parameters.parallel_tool_calls
    optional = {"max_output_tokens": parameters.max_output_tokens,
                "temperature": parameters.temperature, "top_p": parameters.top_p}
    mapped.update({k: v for k, v in optional.items() if v is not None})
    return mapped


def map_tool(spec: ToolSpecification) -> JsonObject:
    """`strict` is always sent: the Responses API makes a tool strict when it is left out
    (or null), and refuses a schema that strict mode cannot take."""
    return {"type": "function", "name": spec.name, "description": spec.description,
            "parameters": spec.parameters, "strict": bool(spec.strict)}


def map_tool_choice(choice: ToolChoice) -> str | JsonObject:
    if isinstance(choice, NamedToolChoice):
        return {"type": "function", "name": choice.name}
    return choice


# -- response ----------------------------------------------------------------------------


def map_function_calls(items: Sequence[JsonObject],
                       response_id: str | None) -> tuple[ToolExecutionRequest, ...]:
    calls = [i for i in items if i.get("type") == "function_call"]
    names = [as_str(c.get("name")) or "" for c in calls]
    arguments = [normalize_arguments(c.get("arguments")) for c in calls]
    ids = dedupe_call_ids([as_str(c.get("call_id")) for c in calls], response_id, names,
                          arguments)
    return tuple(ToolExecutionRequest(id=i, name=n, arguments=a)
                 for i, n, a in zip(ids, names, arguments, strict=True))


def map_status(body: JsonObject, has_tool_calls: bool) -> FinishReason:
    status = as_str(body.get("status"))
    if status == "incomplete":
        reason = as_str(as_dict(body.get("incomplete_details")).get("reason")) or ""
        return _INCOMPLETE.get(reason, FinishReason.OTHER)
    if status not in (None, "completed"):
        return FinishReason.OTHER
    return FinishReason.TOOL_EXECUTION if has_tool_calls else FinishReason.STOP


def map_usage(usage: JsonObject) -> TokenUsage | None:
    if not usage:
        return None
    details = as_dict(usage.get("input_tokens_details"))  # cache reads, priced apart
    return TokenUsage(input_tokens=as_int(usage.get("input_tokens")),
                      output_tokens=as_int(usage.get("output_tokens")),
                      total_tokens=as_int(usage.get("total_tokens")),
                      cached_input_tokens=as_int(details.get("cached_tokens")))


def output_text(items: Sequence[JsonObject]) -> str | None:
    texts = [_parts_text([as_dict(p) for p in as_list(i.get("content"))])
             for i in items if i.get("type") == "message"]
    return "\n".join(t for t in texts if t) or None


def _parts_text(parts: Sequence[JsonObject]) -> str:
    return "".join(as_str(p.get("text")) or as_str(p.get("refusal")) or "" for p in parts)


def reasoning_text(items: Sequence[JsonObject]) -> str | None:
    texts = [as_str(as_dict(p).get("text")) or ""
             for i in items if i.get("type") == "reasoning"
             for p in (*as_list(i.get("summary")), *as_list(i.get("content")))]
    return "\n".join(t for t in texts if t) or None
