"""Synthetic provider responses in each wire format, built from the documented shapes
(for what no public recording covers: Gemini, scripted multi-round runs, faults)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

Call = tuple[str, str, dict[str, Any]]  # id, name, arguments


def sse_text(events: Sequence[tuple[str | None, Any]]) -> str:
    lines = []
    for name, data in events:
        payload = data if isinstance(data, str) else json.dumps(data)
        lines.append((f"event: {name}\n" if name else "") + f"data: {payload}\n\n")
    return "".join(lines)


# -- OpenAI Chat Completions -------------------------------------------------------------


def openai_completion(*, text: str | None = None, calls: Sequence[Call] = (),
                      finish: str | None = None, usage: tuple[int, int] = (10, 5),
                      response_id: str = "chatcmpl-test") -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in calls]
    return {"id": response_id, "object": "chat.completion", "model": "gpt-test",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": finish or ("tool_calls" if calls else "stop")}],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                      "total_tokens": sum(usage)}}


def openai_chunks(*, text: str | None = None, calls: Sequence[Call] = (),
                  finish: str | None = None, usage: tuple[int, int] = (10, 5),
                  response_id: str = "chatcmpl-test") -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
        return {"id": response_id, "object": "chat.completion.chunk", "model": "gpt-test",
                "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    for piece in _pieces(text or ""):
        chunks.append(chunk({"content": piece}))
    for index, (call_id, name, arguments) in enumerate(calls):
        chunks.append(chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                             "function": {"name": name, "arguments": ""}}]}))
        for piece in _pieces(json.dumps(arguments)):
            chunks.append(chunk({"tool_calls": [{"index": index,
                                                 "function": {"arguments": piece}}]}))
    chunks.append(chunk({}, finish or ("tool_calls" if calls else "stop")))
    chunks.append({"id": response_id, "object": "chat.completion.chunk", "model": "gpt-test",
                   "choices": [], "usage": {"prompt_tokens": usage[0],
                                            "completion_tokens": usage[1],
                                            "total_tokens": sum(usage)}})
    return chunks


def openai_sse(**kwargs: Any) -> str:
    return sse_text([(None, c) for c in openai_chunks(**kwargs)] + [(None, "[DONE]")])


# -- Anthropic Messages ------------------------------------------------------------------


def anthropic_message(*, text: str | None = None, calls: Sequence[Call] = (),
                      stop_reason: str | None = None, usage: tuple[int, int] = (10, 5),
                      message_id: str = "msg_test") -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]
    return {"id": message_id, "type": "message", "role": "assistant", "model": "claude-test",
            "content": content, "stop_reason": stop_reason or ("tool_use" if calls else "end_turn"),
            "stop_sequence": None,
            "usage": {"input_tokens": usage[0], "output_tokens": usage[1]}}


def anthropic_events(*, text: str | None = None, calls: Sequence[Call] = (),
                     stop_reason: str | None = None, usage: tuple[int, int] = (10, 5),
                     message_id: str = "msg_test") -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {
        "type": "message_start", "message": {
            "id": message_id, "type": "message", "role": "assistant", "model": "claude-test",
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": usage[0], "output_tokens": 1}}})]
    index = 0
    if text:
        events.append(("content_block_start", {"type": "content_block_start", "index": 0,
                                               "content_block": {"type": "text", "text": ""}}))
        events += [("content_block_delta", {"type": "content_block_delta", "index": 0,
                                            "delta": {"type": "text_delta", "text": p}})
                   for p in _pieces(text)]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
        index = 1
    for offset, (call_id, name, arguments) in enumerate(calls):
        at = index + offset
        events.append(("content_block_start", {"type": "content_block_start", "index": at,
                                               "content_block": {"type": "tool_use", "id": call_id,
                                                                 "name": name, "input": {}}}))
        events += [("content_block_delta", {"type": "content_block_delta", "index": at,
                                            "delta": {"type": "input_json_delta",
                                                      "partial_json": p}})
                   for p in _pieces(json.dumps(arguments))]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": at}))
    events.append(("message_delta", {"type": "message_delta", "delta": {
        "stop_reason": stop_reason or ("tool_use" if calls else "end_turn"),
        "stop_sequence": None}, "usage": {"output_tokens": usage[1]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def anthropic_sse(**kwargs: Any) -> str:
    return sse_text(anthropic_events(**kwargs))


# -- Gemini ------------------------------------------------------------------------------


def gemini_response(*, text: str | None = None, calls: Sequence[tuple[str, dict[str, Any]]] = (),
                    finish: str | None = "STOP", usage: tuple[int, int] = (10, 5),
                    response_id: str = "resp-test", signature: str | None = None
                    ) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"text": text}] if text else []
    for position, (name, arguments) in enumerate(calls):
        part: dict[str, Any] = {"functionCall": {"name": name, "args": arguments}}
        if signature and position == 0:
            part["thoughtSignature"] = signature
        parts.append(part)
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate],
            "usageMetadata": {"promptTokenCount": usage[0], "candidatesTokenCount": usage[1],
                              "totalTokenCount": sum(usage)},
            "modelVersion": "gemini-test", "responseId": response_id}


def gemini_chunks(*, text: str | None = None, calls: Sequence[tuple[str, dict[str, Any]]] = (),
                  finish: str | None = "STOP", usage: tuple[int, int] = (10, 5),
                  response_id: str = "resp-test") -> list[dict[str, Any]]:
    def chunk(parts: list[dict[str, Any]], reason: str | None = None) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if reason:
            candidate["finishReason"] = reason
        return {"candidates": [candidate], "modelVersion": "gemini-test",
                "responseId": response_id}

    chunks = [chunk([{"text": piece}]) for piece in _pieces(text or "")]
    chunks += [chunk([{"functionCall": {"name": n, "args": a}}]) for n, a in calls]
    last = chunk([], finish)
    last["usageMetadata"] = {"promptTokenCount": usage[0], "candidatesTokenCount": usage[1],
                             "totalTokenCount": sum(usage)}
    return [*chunks, last]


def gemini_sse(**kwargs: Any) -> str:
    return sse_text([(None, c) for c in gemini_chunks(**kwargs)])


def _pieces(text: str, size: int = 7) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]
