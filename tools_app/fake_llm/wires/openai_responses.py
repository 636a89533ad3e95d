"""OpenAI Responses API: POST /v1/responses, JSON and SSE.

Shapes follow recorded real traffic (gpt-5, 2025-2026): a `reasoning` item before the
answer (its `encrypted_content` when `include` asks for `reasoning.encrypted_content`),
`function_call` items with fc_ ids and call_ ids, `message` items with `output_text`
parts; streamed as response.created ... response.output_item.added / .done,
response.function_call_arguments.delta / .done, response.output_text.delta ...
response.completed (or response.incomplete at the token limit), each event named and
numbered (`sequence_number`).

Every output item of one response shares the response's id stem (as real ids appear
to), which lets this server tell which reasoning item a function_call item it issued
needs back without remembering it: strict mode refuses a follow-up that names the call's
id without it, with the real API's message.

Stored responses (`store` true, the API's default) are remembered, the most recent
RESPONSES_KEPT of them, so `previous_response_id` continues one: its input and output
come before the request's items (an unknown or unstored id: the real 400).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from threading import Lock
from typing import Any

from ..conversation import Conversation, Reply, ReplyCall, ToolDecl, text_of
from .base import StreamItem, WireError, bool_or, now, pieces, random_id
from .responses_check import check_request, required_reasoning  # noqa: F401

_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}
_THOUGHT = "Deciding what to answer."
RESPONSES_KEPT = 4096


class OpenAIResponsesWire:
    name = "openai_responses"
    stream_content_type = "text/event-stream; charset=utf-8"
    event_separator = "\n\n"

    def __init__(self) -> None:
        self._stored: OrderedDict[str, list[Any]] = OrderedDict()
        self._lock = Lock()

    def parse(self, body: dict[str, Any], path_model: str | None, stream: bool) -> Conversation:
        body = self.continued(body)
        model, items = body.get("model"), body.get("input")
        if not isinstance(model, str) or not model:
            raise WireError("Missing required parameter: 'model'.", param="model",
                            code="missing_required_parameter")
        include = body.get("include")
        conversation = Conversation(
            model=model,
            stream=bool_or(body.get("stream"), False),
            tools=_tools(body.get("tools")),
            parallel_allowed=bool_or(body.get("parallel_tool_calls"), True),
            encrypted_reasoning=isinstance(include, list)
            and "reasoning.encrypted_content" in include,
        )
        _tool_choice(body.get("tool_choice"), conversation)
        if body.get("store") is not False:
            conversation.stored_input = list(items) if isinstance(items, list) else [
                {"role": "user", "content": items}]
        conversation.prompt_chars += len(text_of(body.get("instructions")))
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        for item in items if isinstance(items, list) else ():
            _read_item(item, conversation)
        return conversation

    def check(self, body: dict[str, Any]) -> None:
        check_request(self.continued(body))

    def continued(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body with the stored response it continues before its own input items."""
        previous = body.get("previous_response_id")
        if previous is None:
            return body
        with self._lock:
            history = self._stored.get(previous) if isinstance(previous, str) else None
        if history is None:
            raise WireError(f"Previous response with id '{previous}' not found.",
                            param="previous_response_id", code="previous_response_not_found")
        items = body.get("input")
        own = items if isinstance(items, list) else [] if items is None else [
            {"role": "user", "content": items}]
        return {**body, "input": [*history, *own]}

    def _remember(self, response: dict[str, Any], conversation: Conversation) -> None:
        if conversation.stored_input is None or response["status"] == "in_progress":
            return
        with self._lock:
            self._stored[response["id"]] = [*conversation.stored_input, *response["output"]]
            while len(self._stored) > RESPONSES_KEPT:
                self._stored.popitem(last=False)

    def refusal_body(self, error: WireError) -> Any:
        return {"error": {"message": str(error), "type": "invalid_request_error",
                          "param": error.param, "code": error.code}}

    def json_body(self, reply: Reply, conversation: Conversation) -> Any:
        stem = _stem()
        response = _response(reply, conversation, stem, _output(reply, conversation, stem))
        self._remember(response, conversation)
        return response

    def stream_items(self, reply: Reply, conversation: Conversation,
                     chunk_size: int) -> list[StreamItem]:
        stem = _stem()
        output = _output(reply, conversation, stem)
        events: list[dict[str, Any]] = []
        started = _response(reply, conversation, stem, [], status="in_progress")
        events += [{"type": "response.created", "response": started},
                   {"type": "response.in_progress", "response": started}]
        for index, item in enumerate(output):
            events += _item_events(index, item, chunk_size)
        final = _response(reply, conversation, stem, output)
        self._remember(final, conversation)
        ending = "response.incomplete" if final["status"] == "incomplete" else \
            "response.completed"
        events.append({"type": ending, "response": final})
        return [(e["type"], {**e, "sequence_number": n}) for n, e in enumerate(events)]

    def error_body(self, status: int, message: str, error_type: str | None) -> Any:
        default_type, code = _ERROR_TYPES.get(status, ("server_error", None))
        return {"error": {"message": message, "type": error_type or default_type,
                          "param": None, "code": code}}

    def error_item(self, status: int, message: str, error_type: str | None) -> StreamItem:
        _, code = _ERROR_TYPES.get(status, ("server_error", None))
        return ("error", {"type": "error", "code": error_type or code or "server_error",
                          "message": message, "param": None, "sequence_number": 0})

    def response_headers(self) -> list[tuple[bytes, bytes]]:
        return [(b"x-request-id", random_id("req_", 32).encode()),
                (b"openai-processing-ms", b"1")]


# -- ids: one stem per response, the item's place after it ------------------------------


def _stem() -> str:
    """48 hex characters: with the 4 of an item's place, 52 (real ids have 50, so a
    recorded real id is never taken for one of these)."""
    return random_id("", 48).encode().hex()[:48]


def item_id(prefix: str, stem: str, index: int) -> str:
    return f"{prefix}_{stem}{index:04x}"


def encrypted_content(reasoning_id: str) -> str:
    """An opaque token, as the real one is (Fernet-looking); it is never decrypted."""
    return "gAAAAA" + hashlib.sha256(reasoning_id.encode()).hexdigest()


# -- the response ------------------------------------------------------------------------


def _output(reply: Reply, conversation: Conversation, stem: str) -> list[dict[str, Any]]:
    reasoning_id = item_id("rs", stem, 0)
    reasoning: dict[str, Any] = {"id": reasoning_id, "type": "reasoning",
                                 "summary": [{"type": "summary_text", "text": _THOUGHT}]}
    if conversation.encrypted_reasoning:
        reasoning["encrypted_content"] = encrypted_content(reasoning_id)
    output = [reasoning]
    if reply.text:
        output.append({"id": item_id("msg", stem, len(output)), "type": "message",
                       "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": reply.text,
                                    "annotations": [], "logprobs": []}]})
    output += [_call_item(call, item_id("fc", stem, len(output) + n))
               for n, call in enumerate(reply.calls)]
    return output


def _call_item(call: ReplyCall, fc_id: str) -> dict[str, Any]:
    return {"id": fc_id, "type": "function_call", "status": "completed",
            "arguments": call.arguments, "call_id": call.id or random_id("call_", 24),
            "name": call.name}


def _response(reply: Reply, conversation: Conversation, stem: str,
              output: list[dict[str, Any]], status: str | None = None) -> dict[str, Any]:
    cut = reply.finish == "length"
    status = status or ("incomplete" if cut else "completed")
    finished = status != "in_progress"
    return {
        "id": f"resp_{stem}ffff", "object": "response", "created_at": now(),
        "status": status, "background": False, "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if cut and finished else None,
        "instructions": None, "max_output_tokens": None, "model": conversation.model,
        "output": output, "parallel_tool_calls": conversation.parallel_allowed,
        "previous_response_id": None, "reasoning": {"effort": "medium", "summary": None},
        "store": conversation.stored_input is not None, "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": _choice_back(conversation),
        "tools": [{"type": "function", "name": t.name, "parameters": t.schema,
                   "strict": False, "description": None} for t in conversation.tools],
        "top_p": 1.0, "truncation": "disabled",
        "usage": _usage(reply) if finished else None, "metadata": {},
    }


def _usage(reply: Reply) -> dict[str, Any]:
    return {"input_tokens": reply.input_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": reply.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": reply.input_tokens + reply.output_tokens}


def _choice_back(conversation: Conversation) -> Any:
    if conversation.tool_choice == "named":
        return {"type": "function", "name": conversation.named_tool}
    return conversation.tool_choice


def _item_events(index: int, item: dict[str, Any], size: int) -> list[dict[str, Any]]:
    where = {"output_index": index, "item_id": item["id"]}
    if item["type"] == "function_call":
        added = {**item, "arguments": "", "status": "in_progress"}
        return [{"type": "response.output_item.added", "output_index": index, "item": added},
                *({"type": "response.function_call_arguments.delta", **where, "delta": p}
                  for p in pieces(item["arguments"], size)),
                {"type": "response.function_call_arguments.done", **where,
                 "arguments": item["arguments"]},
                {"type": "response.output_item.done", "output_index": index, "item": item}]
    if item["type"] == "message":
        text = item["content"][0]["text"]
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        at = {**where, "content_index": 0}
        return [{"type": "response.output_item.added", "output_index": index,
                 "item": {**item, "content": [], "status": "in_progress"}},
                {"type": "response.content_part.added", **at, "part": part},
                *({"type": "response.output_text.delta", **at, "delta": p, "logprobs": []}
                  for p in pieces(text, size)),
                {"type": "response.output_text.done", **at, "text": text, "logprobs": []},
                {"type": "response.content_part.done", **at, "part": {**part, "text": text}},
                {"type": "response.output_item.done", "output_index": index, "item": item}]
    return [{"type": "response.output_item.added", "output_index": index,
             "item": {**item, "summary": []}},
            {"type": "response.output_item.done", "output_index": index, "item": item}]


# -- the request -------------------------------------------------------------------------


def _tools(tools: Any) -> list[ToolDecl]:
    declared: list[ToolDecl] = []
    for entry in tools if isinstance(tools, list) else ():
        if isinstance(entry, dict) and entry.get("type") == "function" \
                and isinstance(entry.get("name"), str):
            schema = entry.get("parameters")
            declared.append(ToolDecl(entry["name"], schema if isinstance(schema, dict) else {}))
    return declared


def _tool_choice(choice: Any, conversation: Conversation) -> None:
    if choice in ("auto", "required", "none"):
        conversation.tool_choice = choice
    elif isinstance(choice, dict) and choice.get("type") == "function":
        conversation.tool_choice = "named"
        conversation.named_tool = choice.get("name")


def _read_item(item: Any, conversation: Conversation) -> None:
    """One input item: an assistant turn is its reasoning, messages and calls together."""
    if not isinstance(item, dict):
        raise WireError("Invalid type for 'input': expected an object.", param="input")
    kind = item.get("type", "message")
    if kind == "function_call_output":
        text = text_of(item.get("output"))
        conversation.prompt_chars += len(text)
        conversation.tool_results.append(text)
        conversation.last_was_assistant = False
        return
    assistant = kind in ("reasoning", "function_call") or item.get("role") == "assistant"
    if assistant:
        if not conversation.last_was_assistant:
            conversation.assistant_turns += 1
            conversation.rounds_since_user += 1
            conversation.tool_results = []
        conversation.last_was_assistant = True
        conversation.prompt_chars += len(text_of(item.get("content")))
        return
    conversation.last_was_assistant = False
    if item.get("role") in ("user", "developer", "system"):
        text = text_of(item.get("content"))
        conversation.prompt_chars += len(text)
        if item.get("role") == "user":
            conversation.last_user_text = text
            conversation.rounds_since_user = 0
            conversation.tool_results = []
