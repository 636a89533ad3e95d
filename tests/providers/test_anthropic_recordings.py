"""Every recorded Anthropic Messages exchange, replayed through AnthropicChatModel."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from tools_app.engine import (
    AiMessage,
    ChatMessage,
    ChatRequest,
    ChatRequestParameters,
    ChatResponse,
    FinishReason,
    NamedToolChoice,
    ProviderError,
    SystemMessage,
    TokenUsage,
    ToolArgumentsError,
    ToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolService,
    ToolSpecification,
    UserMessage,
    tool,
)
from tools_app.engine.errors import ToolErrorHandlerResult
from tools_app.engine.providers.anthropic import AnthropicChatModel, map_messages

from .support import (
    Replay,
    Sleeps,
    captured_events,
    normalized_anthropic_messages,
    of_kind,
    policy,
    recorded_response,
    recording,
    replay_recording,
    sse_response,
    validate_anthropic_body,
)
from .wire import anthropic_sse

TOOL = FinishReason.TOOL_EXECUTION
STOP = FinishReason.STOP


@dataclass(frozen=True)
class Turn:
    calls: tuple[tuple[str, str, str], ...]
    finish: FinishReason
    usage: tuple[int, int]
    blocks: tuple[str, ...]
    response_id: str


EXPECTED: dict[str, list[Turn]] = {
    "cassettes/anthropic/pydantic-ai__nonstream_tool_use_then_answer.json": [
        Turn((("toolu_01WN4AuToBnJyXNQXwQBBebj", "get_weather", '{"city":"Paris"}'),), TOOL,
             (572, 53), ("tool_use",), "msg_0157RbBMVd2po91eocfMnSDy"),
        Turn((), STOP, (646, 31), ("text",), "msg_016ZQ7FNypND5WzmJJ8stJRh"),
    ],
    "cassettes/anthropic/pydantic-ai__nonstream_tool_choice_any.json": [
        Turn((("toolu_01Dxp8hdnkA8bsrVJJ8LB9q1", "get_weather", '{"city":"Paris"}'),), TOOL,
             (655, 38), ("tool_use",), "msg_01XLMRBfoG8znkbH9NTqYZFU"),
    ],
    "cassettes/anthropic/pydantic-ai__nonstream_tool_choice_named_tool.json": [
        Turn((("toolu_01J5u9yypnwo1Sqf4Fx9uMNG", "get_weather", '{"city":"Paris"}'),), TOOL,
             (713, 33), ("tool_use",), "msg_01NahiMLLfXaAJWTZGxZPjXx"),
    ],
    "cassettes/anthropic/pydantic-ai__nonstream_parallel_tool_use_x4.json": [
        Turn((("toolu_0167cfEnoQaPviGdVXA95zcu", "retrieve_entity_info", '{"name":"Alice"}'),
              ("toolu_01EEe2V5HD1Ac4rKiUR4HD2T", "retrieve_entity_info", '{"name":"Bob"}'),
              ("toolu_01XFyAjstT3966qvRynZyVPo", "retrieve_entity_info", '{"name":"Charlie"}'),
              ("toolu_013mnQZbgtK2oe3Mo3XKJsx3", "retrieve_entity_info", '{"name":"Daisy"}')),
             TOOL, (423, 202), ("text", "tool_use", "tool_use", "tool_use", "tool_use"),
             "msg_011S3wxtqL5CVescWqS3zeg2"),
        Turn((), STOP, (771, 77), ("text",), "msg_01JVqZPgDwmnyb2kKC3MwCVf"),
    ],
    "cassettes/anthropic/pydantic-ai__nonstream_parallel_tool_use_then_output_tool.json": [
        Turn((("toolu_01KWZYbjFVqYdpqBiJbw8zJB", "get_population", '{"city":"London"}'),
              ("toolu_01XTbK9b3Attg9LFsW4L6Fr5", "get_area", '{"city":"London"}')), TOOL,
             (781, 74), ("tool_use", "tool_use"), "msg_013GVLcwrDVEp3LaeoxxzgrK"),
        Turn((("toolu_016azQkdtG6MwDX3CVF2uRiN", "final_result",
               '{"city":"London","country":"United Kingdom","population":8900000}'),), TOOL,
             (947, 75), ("tool_use",), "msg_01Y1mRAohGFVReSJ1saG8y66"),
    ],
    "cassettes/anthropic/pydantic-ai__nonstream_tool_use_with_thinking.json": [
        Turn((("toolu_01YGzqpRE16Vricda3Aqcejo", "get_user_country", "{}"),), TOOL, (398, 155),
             ("thinking", "text", "tool_use"), "msg_01WvueFjZVbHcj4H4zUzeGv2"),
        Turn((), STOP, (566, 126), ("text",), "msg_01SZ8KP8HhB1TxP6Ybbv6iKz"),
    ],
    "cassettes/anthropic/pydantic-ai__stream_tool_use_after_server_tool.json": [
        # The server-side tool search is recorded but never becomes a request.
        Turn((("toolu_01EFn5wTNBYA8Reni8rbmnHT", "get_exchange_rate",
               '{"from_currency":"USD","to_currency":"EUR"}'),), TOOL, (1591, 175),
             ("text", "server_tool_use", "tool_search_tool_result", "text", "tool_use"),
             "msg_01E3Wn1NynZw9FALZ68znj9S"),
        Turn((), STOP, (1007, 59), ("text",), "msg_011oC3yivUSFxqbo3krQu9Nt"),
    ],
    "cassettes/anthropic/llm-anthropic__stream_parallel_tool_use.json": [
        Turn((("toolu_01LtHJmixrs9NcWQkK8hu8hj", "pelican_name_generator", "{}"),
              ("toolu_01N8a4jWyf116qKTMqKKmjyt", "pelican_name_generator", "{}")), TOOL,
             (542, 62), ("tool_use", "tool_use"), "msg_01V2noLbAb2NgKnjaNw6Cn3w"),
        Turn((), STOP, (678, 82), ("text",), "msg_01XMATm4UFnjP841TckVuNF4"),
    ],
    "cassettes/anthropic/llm-anthropic__stream_tool_chain.json": [
        Turn((("toolu_01UmKD1vMphVCN9vw8PEMk1q", "fixed_version", "{}"),), TOOL, (563, 37),
             ("tool_use",), "msg_01JkKGRKoYijkdjA9GZkPyBG"),
        Turn((), STOP, (617, 41), ("text",), "msg_01YCYWvfbPCQ6d3brBEd45iz"),
    ],
    "sse/anthropic/anthropic-sdk-python__text_only.json": [
        Turn((), STOP, (11, 6), ("text",), "msg_4QpJur2dWWDjF6C758FbBw5vm12BaVipnK"),
    ],
    "sse/anthropic/anthropic-sdk-python__tool_use.json": [
        Turn((("toolu_01NRLabsLyVHZPKxbKvkfSMn", "get_weather", '{"location":"Paris"}'),), TOOL,
             (377, 65), ("text", "tool_use"), "msg_019Q1hrJbZG26Fb9BQhrkHEr"),
    ],
}

TEXTS = {
    "cassettes/anthropic/llm-anthropic__stream_tool_chain.json": [
        None, "The version is **0.32a0**.\n\nHere's a joke: I guess you could say this version "
              "is still in the \"alpha\" stages of being useful! 😄"],
    "sse/anthropic/anthropic-sdk-python__text_only.json": ["Hello there!"],
    "sse/anthropic/anthropic-sdk-python__tool_use.json": [
        "I'll check the current weather in Paris for you."],
    "cassettes/anthropic/pydantic-ai__stream_tool_use_after_server_tool.json": [
        "Let me search for a tool that can provide current exchange rate information.\n"
        "I found the right tool! Let me fetch the current USD to EUR exchange rate for you.",
        "The current exchange rate is **1 USD = 0.92 EUR**. This means that for every US "
        "Dollar, you get approximately **92 Euro cents**. Keep in mind that exchange rates "
        "fluctuate constantly, so this rate may change throughout the day."],
}


# -- replaying ---------------------------------------------------------------------------


def _text_of(content: Any) -> str:
    return content if isinstance(content, str) else "".join(b["text"] for b in content)


def engine_tool_choice(value: dict[str, Any] | None) -> ToolChoice | None:
    if value is None:
        return None
    kinds: dict[str, ToolChoice] = {"auto": "auto", "any": "required", "none": "none"}
    return NamedToolChoice(name=value["name"]) if value["type"] == "tool" else kinds[value["type"]]


def engine_parameters(recorded: dict[str, Any]) -> ChatRequestParameters:
    tools = tuple(ToolSpecification(name=t["name"], description=t.get("description", ""),
                                    parameters=t["input_schema"], strict=t.get("strict"))
                  for t in recorded.get("tools", []) if "input_schema" in t)
    custom = {k: recorded[k] for k in ("thinking",) if k in recorded}
    return ChatRequestParameters(
        tools=tools or None, tool_choice=engine_tool_choice(recorded.get("tool_choice")),
        max_output_tokens=recorded["max_tokens"], temperature=recorded.get("temperature"),
        custom=custom or None)


def engine_messages(recorded: dict[str, Any]) -> list[ChatMessage]:
    system = [SystemMessage(text=recorded["system"])] if "system" in recorded else []
    return [*system, UserMessage(text=_text_of(recorded["messages"][0]["content"]))]


def results_from(next_request: dict[str, Any],
                 requests: tuple[ToolExecutionRequest, ...]) -> list[ToolExecutionResultMessage]:
    blocks = {b["tool_use_id"]: b for b in next_request["messages"][-1]["content"]
              if b["type"] == "tool_result"}
    return [ToolExecutionResultMessage(id=r.id, tool_name=r.name,
                                       text=_text_of(blocks[r.id]["content"]),
                                       is_error=blocks[r.id].get("is_error", False))
            for r in requests]


def validator(relative: str) -> Any:
    # simonw/llm-anthropic sends temperature, which the real API took (the recording
    # says 200) but the installed SDK's types no longer list.
    unlisted = ("temperature",) if "llm-anthropic" in relative else ()
    return lambda body: validate_anthropic_body(body, unlisted=unlisted)


def model_for(relative: str, replay: Replay, **overrides: Any) -> AnthropicChatModel:
    first = recording(relative)["interactions"][0]
    stream = "sse" in first["response"]
    model = first["request"]["json"]["model"] if first["request"] else "claude-sonnet-4-0"
    return AnthropicChatModel(model=model, api_key="sk-ant-test", stream=stream,
                              transport=replay.transport, **overrides)


async def replay_conversation(relative: str) -> tuple[list[ChatResponse], Replay, list[Any]]:
    interactions = recording(relative)["interactions"]
    replay = replay_recording(relative, validator(relative))
    model = model_for(relative, replay)
    first = interactions[0]["request"]
    messages = engine_messages(first["json"]) if first else [UserMessage(text="Go")]
    parameters = engine_parameters(first["json"]) if first else ChatRequestParameters()
    responses: list[ChatResponse] = []
    with captured_events() as events:
        for index in range(len(interactions)):
            response = await model.chat(ChatRequest(messages=tuple(messages),
                                                    parameters=parameters))
            responses.append(response)
            if index + 1 < len(interactions):
                messages.append(response.ai_message)
                messages.extend(results_from(interactions[index + 1]["request"]["json"],
                                             response.ai_message.tool_execution_requests))
    return responses, replay, events


# -- what is parsed ----------------------------------------------------------------------


@pytest.mark.parametrize("relative", sorted(EXPECTED))
async def test_it_parses_every_recorded_response_exactly(relative: str) -> None:
    responses, _, _ = await replay_conversation(relative)

    for response, expected in zip(responses, EXPECTED[relative], strict=True):
        requests = response.ai_message.tool_execution_requests
        assert [(r.id, r.name, r.arguments) for r in requests] == list(expected.calls)
        assert response.finish_reason is expected.finish
        assert response.usage is not None
        assert response.usage.model_copy(update={"cached_input_tokens": None}) == TokenUsage(
            input_tokens=expected.usage[0], output_tokens=expected.usage[1],
            total_tokens=sum(expected.usage))
        assert tuple(b["type"] for b in response.ai_message.provider_blocks) == expected.blocks
        assert response.response_id == expected.response_id


@pytest.mark.parametrize("relative", sorted(TEXTS))
async def test_it_assembles_the_streamed_text(relative: str) -> None:
    responses, _, _ = await replay_conversation(relative)

    assert [r.ai_message.text for r in responses] == TEXTS[relative]


@pytest.mark.parametrize("relative", [r for r in EXPECTED if r.startswith("cassettes/")
                                      and "json" in recording(r)["interactions"][0]["response"]])
async def test_non_streamed_blocks_are_kept_verbatim(relative: str) -> None:
    responses, _, _ = await replay_conversation(relative)

    for response, interaction in zip(responses, recording(relative)["interactions"], strict=True):
        assert list(response.ai_message.provider_blocks) == interaction["response"]["json"][
            "content"]


async def test_thinking_is_kept_with_its_signature() -> None:
    relative = "cassettes/anthropic/pydantic-ai__nonstream_tool_use_with_thinking.json"

    responses, _, _ = await replay_conversation(relative)

    message = responses[0].ai_message
    assert message.thinking is not None
    assert message.thinking.startswith("The user is asking about the largest city")
    assert message.provider_blocks[0]["signature"].startswith("EqEECkYICxgCKkAo3UA4")


# -- what is sent ------------------------------------------------------------------------

WHOLE_BODY = [r for r in EXPECTED if "pydantic-ai__nonstream" in r]


@pytest.mark.parametrize("relative", WHOLE_BODY)
async def test_every_request_matches_the_recorded_one(relative: str) -> None:
    _, replay, _ = await replay_conversation(relative)

    assert replay.bodies == [i["request"]["json"] for i in recording(relative)["interactions"]]


@pytest.mark.parametrize("relative", [r for r in EXPECTED if r not in WHOLE_BODY
                                      and len(EXPECTED[r]) > 1])
async def test_follow_up_messages_have_the_recorded_shape(relative: str) -> None:
    _, replay, _ = await replay_conversation(relative)

    recorded = [i["request"]["json"] for i in recording(relative)["interactions"]]
    assert [normalized_anthropic_messages(b["messages"]) for b in replay.bodies] == [
        normalized_anthropic_messages(r["messages"]) for r in recorded]
    assert [(b["model"], b["max_tokens"], b["stream"]) for b in replay.bodies] == [
        (r["model"], r["max_tokens"], r["stream"]) for r in recorded]


@pytest.mark.parametrize("relative", [r for r in EXPECTED if len(EXPECTED[r]) > 1])
async def test_all_results_of_a_round_go_back_in_one_user_message(relative: str) -> None:
    responses, replay, _ = await replay_conversation(relative)

    for response, body in zip(responses, replay.bodies[1:], strict=False):
        ids = [r.id for r in response.ai_message.tool_execution_requests]
        assistant, results = body["messages"][-2:]
        assert assistant["role"] == "assistant"
        assert results["role"] == "user"
        assert [b["id"] for b in assistant["content"] if b["type"] == "tool_use"] == ids
        assert [b["tool_use_id"] for b in results["content"]] == ids
        assert {b["type"] for b in results["content"]} == {"tool_result"}


async def test_thinking_goes_back_first_with_its_signature() -> None:
    relative = "cassettes/anthropic/pydantic-ai__nonstream_tool_use_with_thinking.json"

    responses, replay, _ = await replay_conversation(relative)

    sent = replay.bodies[1]["messages"][1]["content"]
    assert [b["type"] for b in sent] == ["thinking", "text", "tool_use"]
    assert sent[0] == responses[0].ai_message.provider_blocks[0]


async def test_server_tool_blocks_go_back_but_are_never_executed() -> None:
    relative = "cassettes/anthropic/pydantic-ai__stream_tool_use_after_server_tool.json"

    responses, replay, _ = await replay_conversation(relative)

    assert [r.name for r in responses[0].ai_message.tool_execution_requests] == [
        "get_exchange_rate"]
    sent = replay.bodies[1]["messages"][1]["content"]
    assert [b["type"] for b in sent] == ["text", "server_tool_use", "tool_search_tool_result",
                                         "text", "tool_use"]
    assert sent[1]["input"] == {"query": "USD EUR exchange rate currency conversion"}


async def test_streamed_tool_input_is_reported_in_fragments() -> None:
    relative = "sse/anthropic/anthropic-sdk-python__tool_use.json"

    _, _, events = await replay_conversation(relative)

    fragments = of_kind(events, "partial_tool_call")
    assert (fragments[0].index, fragments[0].id, fragments[0].name) == (
        0, "toolu_01NRLabsLyVHZPKxbKvkfSMn", "get_weather")
    assert [f.arguments_delta for f in fragments[1:]] == ['{"locati', 'on": "P', "ar", 'is"}']


# -- recorded faults ---------------------------------------------------------------------


async def test_a_tool_input_cut_off_at_max_tokens_is_never_returned() -> None:
    relative = "sse/anthropic/anthropic-sdk-python__tool_use_truncated_max_tokens.json"
    replay = replay_recording(relative, validate_anthropic_body)
    model = model_for(relative, replay)

    with captured_events() as events, pytest.raises(ProviderError) as caught:
        await model.chat(ChatRequest(messages=(UserMessage(text="Write taxes.txt"),)))

    assert "cut off (stop_reason max_tokens)" in str(caught.value)
    assert "'make_file'" in str(caught.value)
    assert "not executed" in str(caught.value)
    assert caught.value.retryable is False
    assert len(replay.requests) == 1
    assert of_kind(events, "provider_wire_response") == []
    assert of_kind(events, "partial_tool_call")[0].name == "make_file"


async def test_a_truncated_tool_call_never_reaches_a_tool() -> None:
    relative = "sse/anthropic/anthropic-sdk-python__tool_use_truncated_max_tokens.json"
    replay = replay_recording(relative, validate_anthropic_body)
    written: list[str] = []
    service = ToolService().tool(
        ToolSpecification(name="make_file"), lambda request: written.append(request.arguments))

    with pytest.raises(ProviderError):
        await service.chat(model_for(relative, replay), [UserMessage(text="Write taxes.txt")])

    assert written == []


async def test_invalid_streamed_json_is_rejected_by_the_engine_not_executed() -> None:
    relative = "sse/anthropic/anthropic-sdk-python__tool_use_invalid_json_EDITED.json"
    replay = Replay([recorded_response(recording(relative)["interactions"][0]),
                     sse_response(anthropic_sse(text="Sorry."))], validate_anthropic_body)
    ran: list[str] = []

    def reject(error: ToolArgumentsError, context: Any) -> ToolErrorHandlerResult:
        return ToolErrorHandlerResult.text(f"invalid arguments: {error}")

    @tool
    def get_weather(location: str, unit: str = "celsius") -> str:
        ran.append(location)
        return "sunny"

    service = ToolService(arguments_error_handler=reject).tool(get_weather)
    model = model_for(relative, replay)

    result = await service.chat(model, [UserMessage(text="Weather in Paris?")])

    assert ran == []
    assert result.final_response.ai_message.text == "Sorry."
    assistant, results = replay.bodies[1]["messages"][1:]
    assert assistant["content"][1]["input"] == {
        "INVALID_JSON": '{"location": "Paris", "unit": celsius}'}
    assert results["content"][0]["is_error"] is True


async def one_call(relative: str) -> tuple[Replay, ProviderError]:
    sleeps = Sleeps()
    replay = replay_recording(relative, validate_anthropic_body)
    model = model_for(relative, replay, retry=policy(sleeps))
    recorded = recording(relative)["interactions"][0]["request"]["json"]
    with pytest.raises(ProviderError) as caught:
        await model.chat(ChatRequest(messages=tuple(engine_messages(recorded))))
    assert sleeps.waits == []
    return replay, caught.value


@pytest.mark.parametrize(("relative", "status", "kind", "text", "request_id"), [
    ("cassettes/errors/pydantic-ai__anthropic_400_invalid_request_error.json", 400,
     "invalid_request_error",
     "This model does not support effort level 'xhigh'. Supported levels: high, low, max, "
     "medium.", "req_011Ca7jT9AHpgXgdv8igm4z9"),
    ("cassettes/errors/pydantic-ai__anthropic_404_not_found_error.json", 404, "not_found_error",
     "model: claude-sonet-4-5", "req_011CdufXo8Y2LVfY2veyuQWG"),
])
async def test_a_recorded_client_error_is_reported_and_not_retried(
    relative: str, status: int, kind: str, text: str, request_id: str
) -> None:
    replay, error = await one_call(relative)

    assert len(replay.requests) == 1
    assert (error.status, error.error_type, error.request_id) == (status, kind, request_id)
    assert str(error) == f"anthropic: HTTP {status} {kind}: {text} [request id {request_id}]"
    assert error.retryable is False


def test_the_tool_use_input_is_sent_back_as_an_object() -> None:
    message = AiMessage(text="Let me look.", tool_execution_requests=(
        ToolExecutionRequest(id="toolu_1", name="f", arguments='{"a": [1, 2]}'),))

    assert map_messages([message]) == [{"role": "assistant", "content": [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": [1, 2]}}]}]
    assert json.loads(message.tool_execution_requests[0].arguments) == {"a": [1, 2]}
