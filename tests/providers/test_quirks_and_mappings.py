"""Finish-reason tables and the OpenAI-compatible quirks no recording shows."""

from __future__ import annotations

from typing import Any

import pytest

from tools_app.engine import ChatRequest, FinishReason, ProviderError, UserMessage
from tools_app.engine.providers.anthropic import map_stop_reason
from tools_app.engine.providers.openai import OpenAIChatModel, map_finish_reason

from .support import FIXTURES, Replay, json_response, sse_response
from .wire import openai_completion, sse_text

REQUEST = ChatRequest(messages=(UserMessage(text="Go"),))


@pytest.mark.parametrize(("reason", "calls", "expected"), [
    ("stop", False, FinishReason.STOP), ("tool_calls", True, FinishReason.TOOL_EXECUTION),
    ("function_call", True, FinishReason.TOOL_EXECUTION), ("length", False, FinishReason.LENGTH),
    ("content_filter", False, FinishReason.CONTENT_FILTER), ("eos", False, FinishReason.OTHER),
    (None, True, FinishReason.TOOL_EXECUTION), (None, False, FinishReason.STOP),
    ("stop", True, FinishReason.TOOL_EXECUTION),  # Ollama/vLLM say "stop" next to calls
])
def test_openai_finish_reasons(reason: str | None, calls: bool, expected: FinishReason) -> None:
    assert map_finish_reason(reason, calls) is expected


@pytest.mark.parametrize(("reason", "calls", "expected"), [
    ("end_turn", False, FinishReason.STOP), ("stop_sequence", False, FinishReason.STOP),
    ("tool_use", True, FinishReason.TOOL_EXECUTION), ("max_tokens", False, FinishReason.LENGTH),
    ("model_context_window_exceeded", False, FinishReason.LENGTH),
    ("refusal", False, FinishReason.CONTENT_FILTER), ("pause_turn", False, FinishReason.OTHER),
    (None, True, FinishReason.TOOL_EXECUTION), (None, False, FinishReason.STOP),
])
def test_anthropic_stop_reasons(reason: str | None, calls: bool,
                                expected: FinishReason) -> None:
    assert map_stop_reason(reason, calls) is expected


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "gen-1", "model": "m", "choices": [{"index": 0, "delta": delta,
                                                      "finish_reason": finish}]}


async def streamed(*chunks: dict[str, Any]) -> Any:
    replay = Replay([sse_response(sse_text([(None, c) for c in chunks] + [(None, "[DONE]")]))])
    model = OpenAIChatModel(base_url="http://127.0.0.1:1/v1", model="m", stream=True,
                            transport=replay.transport)
    return await model.chat(REQUEST)


async def test_tool_fragments_without_an_index_are_matched_by_id() -> None:
    response = await streamed(
        chunk({"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": '{"x":'}}]}),
        chunk({"tool_calls": [{"function": {"arguments": " 1}"}}]}),
        chunk({"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": "{}"}}]}),
        chunk({}, "tool_calls"))

    assert [(r.id, r.name, r.arguments) for r in response.ai_message.tool_execution_requests] == [
        ("a", "f", '{"x": 1}'), ("b", "g", "{}")]


async def test_arguments_sent_whole_twice_are_kept_once() -> None:
    call = {"index": 0, "id": "c", "function": {"name": "f", "arguments": '{"x": 1}'}}

    response = await streamed(chunk({"tool_calls": [call]}), chunk({"tool_calls": [call]}),
                              chunk({}, "tool_calls"))

    assert response.ai_message.tool_execution_requests[0].arguments == '{"x": 1}'


async def test_repeated_ids_in_one_response_are_made_unique() -> None:
    body = openai_completion(calls=[("0", "f", {}), ("0", "f", {"y": 2})], response_id="gen-9")
    replay = Replay([json_response(200, body)])
    model = OpenAIChatModel(base_url="http://127.0.0.1:1/v1", model="m",
                            transport=replay.transport)

    response = await model.chat(REQUEST)

    assert [r.id for r in response.ai_message.tool_execution_requests] == ["0", "call_gen-9_1"]


async def test_content_parts_and_refusals_become_text() -> None:
    parts = openai_completion()
    parts["choices"][0]["message"]["content"] = [{"type": "text", "text": "a"},
                                                 {"type": "text", "text": "b"}]
    refusal = openai_completion()
    refusal["choices"][0]["message"].update(content=None, refusal="I can't help with that.")
    replay = Replay([json_response(200, parts), json_response(200, refusal)])
    model = OpenAIChatModel(base_url="http://127.0.0.1:1/v1", model="m",
                            transport=replay.transport)

    assert (await model.chat(REQUEST)).ai_message.text == "ab"
    assert (await model.chat(REQUEST)).ai_message.text == "I can't help with that."


async def test_tool_calls_cut_at_the_length_limit_are_refused_without_streaming() -> None:
    body = openai_completion(calls=[("c", "f", {"x": 1})], finish="length")
    replay = Replay([json_response(200, body)])
    model = OpenAIChatModel(base_url="http://127.0.0.1:1/v1", model="m",
                            transport=replay.transport)

    with pytest.raises(ProviderError, match="cut off \\(finish_reason length\\)"):
        await model.chat(REQUEST)


def test_every_recording_is_used_by_a_test() -> None:
    sources = "".join(p.read_text() for p in FIXTURES.parent.parent.parent.joinpath(
        "providers").glob("test_*.py"))
    unused = [p.name for p in FIXTURES.rglob("*.json") if p.name not in sources]

    assert unused == []
