"""Every recorded Responses API exchange (gpt-4o to gpt-5.5, JSON and streamed), replayed
through OpenAIResponsesModel: what it parses, that the openai SDK's Response type parses
every recorded response too, and that its follow-up requests carry the same items the
recorded client sent (reasoning items with their encrypted content, function calls and
their outputs) in bodies the SDK's request types accept."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import Response

from tools_app.engine import (
    ChatMessage,
    ChatRequest,
    ChatRequestParameters,
    ChatResponse,
    NamedToolChoice,
    SystemMessage,
    TokenUsage,
    ToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolSpecification,
    UserMessage,
)
from tools_app.engine.providers.openai_responses import OpenAIResponsesModel

from .support import Replay, recording, recordings, replay_recording, validate_responses_body

FOLDER = "cassettes/openai-responses"
Call = tuple[str, str, str | None]  # None: arguments not compared (a long summary)

# (calls, text, usage) of each response, read off the recordings by hand.
EXPECTED: dict[str, list[tuple[list[Call], str | None, tuple[int, int, int]]]] = {
    "pydantic-ai__nonstream_function_call_then_answer.json": [
        ([("call_YfwRsW8sUxDKipwyhWTzOXCA", "get_capital", '{"country":"PotatoLand"}')],
         None, (40, 18, 58)),
        ([], "The capital of PotatoLand is Potato City.", (67, 11, 78))],
    "pydantic-ai__nonstream_parallel_function_calls_with_retry.json": [
        ([("call_LWVp74L5HaH2KNvgVz9PJsrj", "get_location", '{"loc_name":"Londos"}'),
          ("call_YnRAWeTyxI91m5uNa5bxXwVO", "get_location", '{"loc_name":"London"}')],
         None, (0, 0, 0)),
        ([], 'It seems "Londos" might be incorrect or unknown. If you meant something else, '
         "please clarify.\n\nFor **London**, it's located at approximately latitude 51° N "
         "and longitude 0° W.", (335, 44, 379))],
    "pydantic-ai__nonstream_reasoning_function_call_encrypted_reasoning_passed_back.json": [
        ([("call_cp3x6W9eeyMIryJUNhgMaP5w", "get_meaning_of_life", "{}")], None,
         (40, 148, 188)),
        ([], "42", (257, 5, 262))],
    "pydantic-ai__nonstream_tool_choice_allowed_tools_then_output_tool.json": [
        ([("call_CV6BaAADlqML8HxE2Y7aSYVR", "get_weather", '{"city":"Paris"}')], None,
         (98, 299, 397)),
        ([("call_tiZYSQIyK69kGZoFccuG8ynZ", "final_result", None)], None, (415, 224, 639))],
    "pydantic-ai__nonstream_tool_choice_auto_then_answer.json": [
        ([("call_E4xGYcmG4CvUzTabsGjXo6ba", "get_weather", '{"city":"Paris"}')], None,
         (50, 81, 131)),
        ([], "Currently it's sunny in Paris with a temperature of 22°C.", (149, 17, 166))],
    "pydantic-ai__nonstream_tool_choice_named_function.json": [
        ([("call_VfwnLMHhNSM9WQ5l8wXDFKHF", "get_weather", '{"city":"Paris"}')], None,
         (68, 95, 163))],
    "pydantic-ai__nonstream_tool_choice_required.json": [
        ([("call_1qsWTcKZwQRwKLxPFIMpbnzV", "get_weather", '{"city":"Paris"}')], None,
         (48, 105, 153))],
    "pydantic-ai__stream_function_call_then_answer.json": [
        ([("call_kL0PCQV7M2WMoVX8V8OtYSAL", "get_capital", '{"country":"France"}')], None,
         (255, 16, 271)),
        ([], "The capital of France is Paris.", (278, 9, 287))],
    "pydantic-ai__stream_reasoning_commentary_function_call_encrypted_reasoning_passed_back.json": [
        ([("call_LabG58Uhrq9kZvR52BYKjToD", "get_capital", '{"country":"PotatoLand"}')],
         "I\u2019ll check the capital lookup tool for \u201cPotatoLand.\u201d", (63, 69, 132)),
        ([], "The capital of PotatoLand is **Potato City**.", (147, 16, 163))],
}


def path_of(name: str) -> str:
    return f"{FOLDER}/{name}"


def test_every_recording_is_covered() -> None:
    assert sorted(recordings(FOLDER)) == sorted(map(path_of, EXPECTED))


# -- replaying a recording ---------------------------------------------------------------


def engine_messages(recorded: dict[str, Any]) -> list[ChatMessage]:
    messages: list[ChatMessage] = []
    if recorded.get("instructions"):
        messages.append(SystemMessage(text=recorded["instructions"]))
    messages += [UserMessage(text=item["content"]) for item in recorded["input"]
                 if item.get("role") == "user"]
    return messages


def engine_parameters(recorded: dict[str, Any]) -> ChatRequestParameters:
    tools = tuple(ToolSpecification(name=t["name"], description=t.get("description") or "",
                                    parameters=t["parameters"], strict=t.get("strict"))
                  for t in recorded.get("tools", []))
    choice: Any = recorded.get("tool_choice")
    engine_choice: ToolChoice | None = None  # allowed_tools has no engine form
    if isinstance(choice, dict) and choice.get("type") == "function":
        engine_choice = NamedToolChoice(name=choice["name"])
    elif choice in ("auto", "required", "none"):
        engine_choice = choice
    return ChatRequestParameters(tools=tools or None, tool_choice=engine_choice)


def results_from(next_request: dict[str, Any], requests: tuple[ToolExecutionRequest, ...]
                 ) -> list[ToolExecutionResultMessage]:
    outputs = [i for i in next_request["input"] if i.get("type") == "function_call_output"]
    return [ToolExecutionResultMessage(id=r.id, tool_name=r.name, text=o["output"])
            for r, o in zip(requests, outputs[-len(requests):], strict=True)]


async def replay_conversation(name: str) -> tuple[list[ChatResponse], Replay]:
    interactions = recording(path_of(name))["interactions"]
    first = interactions[0]["request"]
    replay = replay_recording(path_of(name), validate_responses_body)
    model = OpenAIResponsesModel(
        base_url=first["url"].removesuffix("/responses"), model=first["json"]["model"],
        api_key="sk-test", stream=first["json"].get("stream", False),
        transport=replay.transport)
    messages = engine_messages(first["json"])
    parameters = engine_parameters(first["json"])
    responses = []
    for index in range(len(interactions)):
        response = await model.chat(ChatRequest(messages=tuple(messages),
                                                parameters=parameters))
        responses.append(response)
        if index + 1 < len(interactions):
            messages.append(response.ai_message)
            messages += results_from(interactions[index + 1]["request"]["json"],
                                     response.ai_message.tool_execution_requests)
    return responses, replay


def recorded_bodies(name: str) -> list[dict[str, Any]]:
    return [i["request"]["json"] for i in recording(path_of(name))["interactions"]]


# pydantic-ai once sent a streamed call's item id (fc_...) as its call_id, and the API
# took it; calls and outputs are compared by their order there.
REIDED = {"pydantic-ai__stream_function_call_then_answer.json"}
# The recorder wrote ASCII quotes in the request where the response had typographic ones.
_QUOTES = str.maketrans({"\u2019": "'", "\u201c": '"', "\u201d": '"'})


def projected(items: list[dict[str, Any]], *, by_order: bool = False) -> list[tuple[Any, ...]]:
    """The items as the API reads them: what a message says, a reasoning item's id and
    encrypted content, a call's id, name and arguments, an output's call and text."""
    kept: list[tuple[Any, ...]] = []
    order: dict[str, str] = {}
    for item in items:
        if by_order and "call_id" in item:
            item = {**item, "call_id": order.setdefault(item["call_id"], f"#{len(order)}")}
        kind = item.get("type", "message")
        if kind == "message":
            text = item["content"] if isinstance(item["content"], str) else "".join(
                part["text"] for part in item["content"])
            if text:
                kept.append((item["role"], text.translate(_QUOTES), item.get("phase")))
        elif kind == "reasoning":
            kept.append(("reasoning", item["id"], item.get("encrypted_content")))
        elif kind == "function_call":
            kept.append(("function_call", item["call_id"], item["name"],
                         json.loads(item["arguments"])))
        else:
            kept.append((kind, item["call_id"], item["output"]))
    return kept


# -- what is parsed ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_it_parses_every_recorded_response(name: str) -> None:
    responses, _ = await replay_conversation(name)

    for response, (calls, text, usage) in zip(responses, EXPECTED[name], strict=True):
        requests = response.ai_message.tool_execution_requests
        assert [(r.id, r.name) for r in requests] == [(c[0], c[1]) for c in calls]
        assert [r.arguments for r in requests if r.name != "final_result"] == [
            c[2] for c in calls if c[1] != "final_result"]
        assert response.ai_message.text == text
        assert response.usage is not None
        assert response.usage.model_copy(update={"cached_input_tokens": None}) == TokenUsage(
            input_tokens=usage[0], output_tokens=usage[1], total_tokens=usage[2])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_sdk_parses_every_recorded_response(name: str) -> None:
    for interaction in recording(path_of(name))["interactions"]:
        recorded = interaction["response"]
        if "json" in recorded:
            body = recorded["json"]
        else:
            events = [json.loads(line[6:]) for line in recorded["sse"].splitlines()
                      if line.startswith("data: ")]
            body = next(e["response"] for e in events if e["type"] == "response.completed")
        assert Response.model_validate(with_later_sdk_fields(body)).id == body["id"]


def with_later_sdk_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The recording with the usage field the SDK made required after it was recorded
    (input_tokens_details.cache_write_tokens), so everything else is checked as sent."""
    usage = body.get("usage")
    if not usage:
        return body
    details = {"cache_write_tokens": 0, **usage["input_tokens_details"]}
    return {**body, "usage": {**usage, "input_tokens_details": details}}


# -- what is sent ------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in sorted(EXPECTED) if len(EXPECTED[n]) > 1])
async def test_follow_ups_carry_the_recorded_items(name: str) -> None:
    _, replay = await replay_conversation(name)

    recorded = recorded_bodies(name)
    by_order = name in REIDED
    assert [projected(b["input"], by_order=by_order) for b in replay.bodies] == [
        projected(b["input"], by_order=by_order) for b in recorded]


@pytest.mark.parametrize("name", [n for n in sorted(EXPECTED) if len(EXPECTED[n]) > 1])
async def test_reasoning_items_go_back_with_the_ids_of_what_followed_them(name: str) -> None:
    _, replay = await replay_conversation(name)

    for built, recorded in zip(replay.bodies, recorded_bodies(name), strict=True):
        if not any(i.get("type") == "reasoning" for i in recorded["input"]):
            continue
        assert [i.get("id") for i in built["input"]] == [
            i.get("id") for i in recorded["input"]]


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_reasoning_models_ask_for_encrypted_reasoning_as_the_recorded_client_did(
        name: str) -> None:
    _, replay = await replay_conversation(name)

    for built, recorded in zip(replay.bodies, recorded_bodies(name), strict=True):
        assert built.get("include") == recorded.get("include")
        assert built["store"] is False
        assert built.get("instructions") == (recorded.get("instructions") or None)
