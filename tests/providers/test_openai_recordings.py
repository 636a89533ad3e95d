"""Every recorded OpenAI (and OpenAI-compatible) exchange, replayed through
OpenAIChatModel: what it parses, and the follow-up requests it writes."""

from __future__ import annotations

import copy
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
    ToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolSpecification,
    UserMessage,
)
from tools_app.engine.providers.openai import OpenAIChatModel, map_messages

from .support import (
    Replay,
    Sleeps,
    captured_events,
    normalized_openai,
    of_kind,
    policy,
    recorded_response,
    recording,
    replay_recording,
    validate_openai_body,
)

TOOL = FinishReason.TOOL_EXECUTION
STOP = FinishReason.STOP


@dataclass(frozen=True)
class Turn:
    calls: tuple[tuple[str, str, str], ...] = ()
    finish: FinishReason = STOP
    usage: tuple[int, int, int] | None = None
    text: str | None = None


def calls(*items: tuple[str, str, str]) -> tuple[tuple[str, str, str], ...]:
    return items


EXPECTED: dict[str, list[Turn]] = {
    "cassettes/openai/pydantic-ai__nonstream_tool_call_then_answer.json": [
        Turn(calls(("call_aDdJTteHrpMdhdkEkyxjxEHH", "get_weather", '{"city":"Paris"}')),
             TOOL, (132, 23, 155)),
        Turn(finish=STOP, usage=(167, 171, 338), text="It's sunny in Paris right now, about "
             "22°C (≈72°F). Would you like an hourly forecast, the forecast for tomorrow, or "
             "weather for another city?"),
    ],
    "cassettes/openai/pydantic-ai__nonstream_tool_choice_required.json": [
        Turn(calls(("call_injwxidE5XUzmiKVfOH3rxf2", "get_weather", '{"city":"Paris"}')),
             TOOL, (130, 87, 217)),
    ],
    "cassettes/openai/pydantic-ai__nonstream_tool_choice_named_function.json": [
        Turn(calls(("call_ZRDY1xLOEab4YUsDuuJMA1tF", "get_weather", '{"city":"Paris"}')),
             TOOL, (150, 23, 173)),
    ],
    "cassettes/openai/pydantic-ai__nonstream_parallel_tool_calls.json": [
        Turn(calls(("call_HMKxpFuWMpNPfuK5352En5En", "delete_file", '{"path": ".env"}'),
                   ("call_CAES42XVgl0EvrUmnIoHkMSS", "create_file", '{"path": "test.txt"}')),
             TOOL, (71, 46, 117)),
        Turn(usage=(133, 20, 153), text="The file `.env` has been deleted, and `test.txt` has "
             "been successfully created."),
    ],
    "cassettes/openai/pydantic-ai__nonstream_multi_step_with_retry.json": [
        Turn(calls(("call_EpsjIY9eR0MmTjkqqtRm82oV", "get_weather_in_city", '{"city":"CDMX"}')),
             TOOL, (47, 17, 64)),
        Turn(calls(("call_2IrUdlpgInWUCEEqKKvUZ7pR", "get_weather_in_city",
                    '{"city":"Mexico City"}')), TOOL, (87, 17, 104)),
        Turn(usage=(116, 10, 126), text="The weather in Mexico City is currently sunny."),
    ],
    "cassettes/openai/pydantic-ai__stream_tool_call_then_answer.json": [
        Turn(calls(("call_ZR5UUuTt3pf61kjwAJIYdVMj", "get_capital", '{"country":"UK"}')),
             TOOL, (53, 15, 68)),
        Turn(usage=(78, 9, 87), text="The capital of the UK is London."),
    ],
    "cassettes/openai/pydantic-ai__stream_parallel_tool_calls_19_tools.json": [
        Turn(calls(("call_q2UyBRP7eXNTzAoR8lEhjc9Z", "get_country", "{}"),
                   ("call_b51ijcpFkDiTQG1bQzsrmtW5", "get_product_name", "{}")),
             TOOL, (364, 40, 404)),
        Turn(calls(("call_LwxJUB9KppVyogRRLQsamRJv", "get_weather", '{"city":"Mexico City"}')),
             TOOL, (423, 15, 438)),
        Turn(calls(("call_CCGIWaMeYWmxOQ91orkmTvzn", "final_result",
                    '{"answers":[{"label":"Capital","answer":"The capital of Mexico is Mexico '
                    'City."},{"label":"Weather","answer":"The weather in Mexico City is '
                    'currently sunny."},{"label":"Product Name","answer":"The product name is '
                    'Pydantic AI."}]}')), TOOL, (448, 62, 510)),
    ],
    "cassettes/openai/pydantic-ai__compat_gemini_tool_call_without_id.json": [
        # The compatible endpoint sent id "": a stable id is made from the response id.
        Turn(calls(("call_3SE-aKjdCcCEz7IPxpqjCA_0", "get_current_time", "{}")),
             TOOL, (35, 12, 109)),
        Turn(usage=(66, 6, 100), text="The current time is Noon."),
    ],
    "cassettes/openai/simonw-llm__nonstream_chain_of_two_calls.json": [
        Turn(calls(("call_TTY8UFNo7rNCaOBUNtlRSvMG", "lookup_population",
                    '{"country":"Crumpet"}')), TOOL, (92, 17, 109)),
        Turn(calls(("call_aq9UyiSFkzX6W8Ydc33DoI9Y", "can_have_dragons",
                    '{"population":123124}')), TOOL, (118, 18, 136)),
        Turn(usage=(146, 3, 149), text="YES"),
    ],
    "cassettes/openai/simonw-llm__stream_tool_call_then_answer.json": [
        Turn(calls(("call_1EYWDzueHEp8OsB8jJSEp7WB", "multiply", '{"a":1231,"b":2331}')),
             TOOL, (54, 20, 74)),
        Turn(usage=(87, 26, 113),
             text="The result of \\( 1231 \\times 2331 \\) is \\( 2,869,461 \\)."),
    ],
    # OpenAI-compatible streaming quirks (OpenRouter/Novita/Fireworks...).
    "cassettes/openai/simonw-llm__compat_stream_variant_a_args_empty_then_braces.json": [
        Turn(calls(("0", "llm_version", "{}")), TOOL, (57, 17, 74)),  # no finish_reason
        Turn(usage=(107, 15, 122), text="The current version of *llm* is **0.fixed-version**."),
    ],
    "cassettes/openai/simonw-llm__compat_stream_variant_b_args_braces_first.json": [
        Turn(calls(("0", "llm_version", "{}")), TOOL, (57, 17, 74)),
        Turn(usage=(107, 15, 122), text="The current version of *llm* is **0.fixed-version**."),
    ],
    "cassettes/openai/simonw-llm__compat_stream_variant_c_leading_space.json": [
        Turn(calls(("llm_version:0", "llm_version", "{}")), TOOL, (56, 12, 68)),
        Turn(usage=(105, 16, 121),
             text="The installed version of LLM on this system is 0.fixed-version."),
    ],
    "cassettes/openai/simonw-llm__compat_stream_variant_d_args_null.json": [
        Turn(calls(("0", "llm_version", "{}")), TOOL, (57, 17, 74)),  # arguments: null
        Turn(usage=(107, 15, 122), text="The current version of *llm* is **0.fixed-version**."),
    ],
    "sse/openai/openai-python__stream_parallel_tool_calls.json": [
        Turn(calls(("call_JMW1whyEaYG438VE1OIflxA2", "GetWeatherArgs",
                    '{"city": "Edinburgh", "country": "GB", "units": "c"}'),
                   ("call_DNYTawLBoN8fj3KN6qU9N1Ou", "get_stock_price",
                    '{"ticker": "AAPL", "exchange": "NASDAQ"}')), TOOL, (149, 60, 209)),
    ],
    "sse/openai/openai-python__stream_tool_call_non_strict.json": [
        Turn(calls(("call_4XzlGBLtUe9dy3GVNV4jhq7h", "get_weather",
                    '{"city":"New York City"}')), TOOL, (44, 16, 60)),
    ],
    "sse/openai/openai-python__stream_tool_call_pydantic.json": [
        Turn(calls(("call_c91SqDXlYFuETYv8mUHzz6pp", "GetWeatherArgs",
                    '{"city":"Edinburgh","country":"UK","units":"c"}')), TOOL, (76, 24, 100)),
    ],
    "sse/openai/openai-python__stream_tool_call_strict.json": [
        Turn(calls(("call_CTf1nWJLqSeRgDqaCG27xZ74", "get_weather",
                    '{"city":"San Francisco","state":"CA"}')), TOOL, (48, 19, 67)),
    ],
}


# -- turning a recorded request into engine objects -------------------------------------


def engine_messages(recorded: dict[str, Any]) -> list[ChatMessage]:
    messages: list[ChatMessage] = []
    for message in recorded["messages"]:
        if message["role"] == "system":
            messages.append(SystemMessage(text=message["content"]))
        elif message["role"] == "user":
            messages.append(UserMessage(text=message["content"]))
    return messages


def engine_tool_choice(value: Any) -> ToolChoice | None:
    if isinstance(value, dict):
        return NamedToolChoice(name=value["function"]["name"])
    return value  # type: ignore[no-any-return]


def engine_parameters(recorded: dict[str, Any]) -> ChatRequestParameters:
    tools = tuple(
        ToolSpecification(name=t["function"]["name"], description=t["function"]["description"],
                          parameters=t["function"]["parameters"],
                          strict=t["function"].get("strict"))
        for t in recorded.get("tools", []))
    return ChatRequestParameters(tools=tools or None,
                                 tool_choice=engine_tool_choice(recorded.get("tool_choice")))


def model_for(relative: str, replay: Replay, **overrides: Any) -> OpenAIChatModel:
    first = recording(relative)["interactions"][0]
    request = first["request"] or {"url": "https://api.openai.com/v1/chat/completions",
                                   "json": {"model": "gpt-4o", "stream": True}}
    return OpenAIChatModel(
        base_url=request["url"].removesuffix("/chat/completions"), model=request["json"]["model"],
        api_key="sk-test", stream=request["json"].get("stream", False),
        transport=replay.transport, **overrides)


def results_from(next_request: dict[str, Any], requests: tuple[ToolExecutionRequest, ...]
                 ) -> list[ToolExecutionResultMessage]:
    """The tool results the recorder sent next, paired with our requests by position
    (recorders sometimes re-id calls, as the empty-id one does)."""
    tool_messages = [m for m in next_request["messages"] if m["role"] == "tool"]
    answered = tool_messages[-len(requests):]
    return [ToolExecutionResultMessage(id=r.id, tool_name=r.name, text=m["content"])
            for r, m in zip(requests, answered, strict=True)]


async def replay_conversation(relative: str) -> tuple[list[ChatResponse], Replay, list[Any]]:
    """Play the whole recording: each answer's tool results go back in the next call."""
    interactions = recording(relative)["interactions"]
    replay = replay_recording(relative, validate_openai_body)
    model = model_for(relative, replay)
    first = interactions[0]["request"]["json"] if interactions[0]["request"] else {"messages": []}
    messages = engine_messages(first) or [UserMessage(text="Go")]
    parameters = engine_parameters(first)
    responses = []
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


def with_positional_ids(body: dict[str, Any]) -> dict[str, Any]:
    """Tool-call ids replaced by their order of appearance (recorders re-id calls)."""
    body = copy.deepcopy(body)
    order: dict[str, str] = {}
    for message in body["messages"]:
        for call in message.get("tool_calls", []):
            call["id"] = order.setdefault(call["id"], f"#{len(order)}")
        if message["role"] == "tool":
            message["tool_call_id"] = order.get(message["tool_call_id"], "?")
    # simonw/llm sends the empty streamed text as its own assistant message.
    body["messages"] = [m for m in body["messages"]
                        if not (m["role"] == "assistant" and m.get("content") == ""
                                and not m.get("tool_calls"))]
    return body


# -- what is parsed ----------------------------------------------------------------------


@pytest.mark.parametrize("relative", sorted(EXPECTED))
async def test_it_parses_every_recorded_response_exactly(relative: str) -> None:
    responses, _, _ = await replay_conversation(relative)

    for response, expected in zip(responses, EXPECTED[relative], strict=True):
        requests = response.ai_message.tool_execution_requests
        assert [(r.id, r.name, r.arguments) for r in requests] == list(expected.calls)
        assert response.finish_reason is expected.finish
        assert expected.usage is not None
        assert response.usage is not None
        assert response.usage.model_copy(update={"cached_input_tokens": None}) == TokenUsage(
            input_tokens=expected.usage[0], output_tokens=expected.usage[1],
            total_tokens=expected.usage[2])
        assert response.ai_message.text == expected.text


@pytest.mark.parametrize("relative", sorted(EXPECTED))
async def test_it_reports_the_response_ids_and_models_of_the_recording(relative: str) -> None:
    responses, _, _ = await replay_conversation(relative)

    for response, interaction in zip(responses, recording(relative)["interactions"], strict=True):
        recorded = interaction["response"]
        if "json" in recorded:
            assert response.response_id == recorded["json"]["id"]
            assert response.model_name == recorded["json"]["model"]
        else:
            assert response.response_id
            assert response.response_id in recorded["sse"]


# -- what is sent ------------------------------------------------------------------------

PYDANTIC_AI = [r for r in EXPECTED if "pydantic-ai__" in r]
# The recorder replaced the empty id the server sent with its own; we use ours.
REIDED = {"cassettes/openai/pydantic-ai__compat_gemini_tool_call_without_id.json"}
OTHER_RECORDERS = [r for r in EXPECTED if "simonw-llm__" in r]


@pytest.mark.parametrize("relative", PYDANTIC_AI)
async def test_every_request_matches_the_recorded_one(relative: str) -> None:
    _, replay, _ = await replay_conversation(relative)

    recorded = [normalized_openai(i["request"]["json"])
                for i in recording(relative)["interactions"]]
    built = [normalized_openai(b) for b in replay.bodies]
    if relative in REIDED:
        recorded, built = [with_positional_ids(b) for b in recorded], [
            with_positional_ids(b) for b in built]
    assert built == recorded


@pytest.mark.parametrize("relative", OTHER_RECORDERS)
async def test_follow_up_requests_have_the_recorded_shape(relative: str) -> None:
    _, replay, _ = await replay_conversation(relative)

    recorded = [i["request"]["json"] for i in recording(relative)["interactions"]]
    assert [with_positional_ids(normalized_openai(b)) for b in replay.bodies] == [
        with_positional_ids(normalized_openai(r)) for r in recorded]


@pytest.mark.parametrize("relative", [r for r in EXPECTED if len(EXPECTED[r]) > 1])
async def test_results_go_back_paired_with_the_calls_they_answer(relative: str) -> None:
    responses, replay, _ = await replay_conversation(relative)

    for response, next_body in zip(responses, replay.bodies[1:], strict=False):
        ids = [r.id for r in response.ai_message.tool_execution_requests]
        messages = next_body["messages"]
        assistant = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        assert [c["id"] for c in messages[assistant]["tool_calls"]] == ids
        assert [m["tool_call_id"] for m in messages[assistant + 1:]] == ids
        assert all(m["role"] == "tool" for m in messages[assistant + 1:])


async def test_a_call_without_id_gets_the_same_stable_id_on_every_replay() -> None:
    relative = "cassettes/openai/pydantic-ai__compat_gemini_tool_call_without_id.json"

    first, _, _ = await replay_conversation(relative)
    again, replay, _ = await replay_conversation(relative)

    call_id = first[0].ai_message.tool_execution_requests[0].id
    assert call_id == again[0].ai_message.tool_execution_requests[0].id != ""
    follow_up = replay.bodies[1]["messages"]
    assert follow_up[1]["tool_calls"][0]["id"] == follow_up[2]["tool_call_id"] == call_id


async def test_streamed_fragments_are_reported_as_they_arrive() -> None:
    relative = "cassettes/openai/pydantic-ai__stream_tool_call_then_answer.json"

    _, _, events = await replay_conversation(relative)

    fragments = of_kind(events, "partial_tool_call")
    assert fragments[0].id == "call_ZR5UUuTt3pf61kjwAJIYdVMj"
    assert fragments[0].name == "get_capital"
    assert "".join(f.arguments_delta for f in fragments) == '{"country":"UK"}'
    assert len(fragments) == 6  # the id/name chunk, then 5 argument pieces
    text = "".join(e.delta for e in of_kind(events, "partial_text"))
    assert text == "The capital of the UK is London."


async def test_a_name_repeated_in_every_chunk_is_reported_once() -> None:
    relative = "cassettes/openai/simonw-llm__compat_stream_variant_a_args_empty_then_braces.json"

    _, _, events = await replay_conversation(relative)

    names = [f.name for f in of_kind(events, "partial_tool_call") if f.name]
    assert names == ["llm_version"]


async def test_the_wire_events_carry_the_bodies() -> None:
    relative = "cassettes/openai/pydantic-ai__stream_tool_call_then_answer.json"

    _, replay, events = await replay_conversation(relative)

    sent = of_kind(events, "provider_wire_request")
    assert [e.body for e in sent] == replay.bodies
    # The bytes sent ride along for observers that store them, outside the dump.
    assert [e.content for e in sent] == [r.content for r in replay.requests]
    assert "content" not in sent[0].model_dump()
    assert all(e.url == "https://api.openai.com/v1/chat/completions" and e.stream for e in sent)
    received = of_kind(events, "provider_wire_response")
    assert received[0].body["choices"][0]["message"]["tool_calls"][0]["function"] == {
        "name": "get_capital", "arguments": '{"country":"UK"}'}


# -- recorded errors ---------------------------------------------------------------------


async def one_call(relative: str, **overrides: Any) -> tuple[Replay, ProviderError, Sleeps]:
    sleeps = Sleeps()
    replay = replay_recording(relative, validate_openai_body)
    model = model_for(relative, replay, retry=policy(sleeps), **overrides)
    first = recording(relative)["interactions"][0]["request"]["json"]
    with pytest.raises(ProviderError) as caught:
        await model.chat(ChatRequest(messages=tuple(engine_messages(first))))
    return replay, caught.value, sleeps


@pytest.mark.parametrize(("relative", "status", "code", "text"), [
    ("cassettes/errors/pydantic-ai__openai_404_model_not_found.json", 404, "model_not_found",
     "The model `gpt-5.2-proo` does not exist or you do not have access to it."),
    ("cassettes/errors/pydantic-ai__openai_400_unsupported_value_param.json", 400,
     "unsupported_value",
     "Unsupported value: 'messages[0].role' does not support 'developer' with this model."),
])
async def test_a_recorded_client_error_is_not_retried(relative: str, status: int, code: str,
                                                      text: str) -> None:
    replay, error, sleeps = await one_call(relative)

    assert len(replay.requests) == 1
    assert sleeps.waits == []
    assert (error.status, error.code, error.error_type) == (status, code, "invalid_request_error")
    assert error.retryable is False
    assert text in str(error)


async def test_a_400_in_the_middle_of_a_tool_loop_stops_with_the_providers_message() -> None:
    relative = "cassettes/errors/pydantic-ai__openai_400_mid_tool_loop.json"
    replay = replay_recording(relative, validate_openai_body)
    model = model_for(relative, replay)
    first = recording(relative)["interactions"][0]["request"]["json"]
    messages: list[ChatMessage] = engine_messages(first)
    response = await model.chat(ChatRequest(messages=tuple(messages),
                                            parameters=engine_parameters(first)))
    call = response.ai_message.tool_execution_requests[0]
    assert (call.id, call.name, call.arguments) == ("call_olB2PJlx3uEDR50VFTaOrd1O", "get_file",
                                                    "{}")

    messages += [response.ai_message, ToolExecutionResultMessage(
        id=call.id, tool_name=call.name, text="See file 2d36ae.")]
    with pytest.raises(ProviderError) as caught:
        await model.chat(ChatRequest(messages=tuple(messages),
                                     parameters=engine_parameters(first)))

    assert caught.value.status == 400
    assert caught.value.code == "invalid_value"
    assert "Invalid 'messages[3]'" in str(caught.value)
    assert len(replay.requests) == 2


async def test_openrouter_429_three_times_is_retried_twice_then_fails() -> None:
    relative = "cassettes/errors/pydantic-ai__compat_openrouter_429_x3.json"

    with captured_events() as events:
        replay, error, sleeps = await one_call(relative)

    assert len(replay.requests) == 3
    assert sleeps.waits == [0.5, 1.0]
    assert error.status == 429
    assert error.code == "429"
    assert error.retryable
    assert str(error).startswith("openai: provider unavailable after 3 attempts (last: HTTP 429")
    assert "Provider returned error" in str(error)
    attempts = of_kind(events, "provider_attempt")
    assert [(a.attempt, a.status, a.wait_s) for a in attempts] == [
        (1, 429, 0.5), (2, 429, 1.0), (3, 429, None)]


async def test_groq_tool_use_failed_is_a_client_error_then_the_next_call_recovers() -> None:
    relative = ("cassettes/errors/"
                "pydantic-ai__compat_groq_400_tool_args_schema_mismatch_then_recovery.json")
    interactions = recording(relative)["interactions"]
    replay, error, _ = await one_call(relative)

    assert error.status == 400
    assert error.code == "tool_use_failed"
    assert "parameters for tool get_something_by_name did not match schema" in str(error)
    assert len(replay.requests) == 1

    model = model_for(relative, replay)
    second = interactions[1]["request"]["json"]
    response = await model.chat(ChatRequest(messages=tuple(engine_messages(second)),
                                            parameters=engine_parameters(second)))
    call = response.ai_message.tool_execution_requests[0]
    assert (call.id, call.name, call.arguments) == (
        "fc_311ba17b-89f9-48d3-8fd9-7e74a1264855", "get_something_by_name", '{"name":"test"}')
    assert response.ai_message.thinking == (
        'We need to call with correct param: name field. Use some name, e.g., "test".')
    assert response.usage == TokenUsage(input_tokens=301, output_tokens=52, total_tokens=353)


async def test_groq_required_tool_not_called_is_reported_with_its_message() -> None:
    relative = "cassettes/errors/pydantic-ai__compat_groq_400_required_tool_not_called.json"

    replay, error, _ = await one_call(relative)

    assert (error.status, error.code) == (400, "tool_use_failed")
    assert "Tool choice is required, but model did not call a tool" in str(error)
    assert len(replay.requests) == 1


async def test_the_thinking_of_a_compatible_server_is_kept_but_never_sent_back() -> None:
    relative = "cassettes/errors/pydantic-ai__compat_groq_400_required_tool_not_called.json"
    replay = Replay([recorded_response(recording(relative)["interactions"][1])],
                    validate_openai_body)
    model = model_for(relative, replay)

    response = await model.chat(ChatRequest(messages=(UserMessage(text="again"),)))

    assert response.ai_message.thinking
    assert "final_result" in response.ai_message.thinking
    sent_back = map_messages([response.ai_message])[0]
    assert set(sent_back) == {"role", "content", "tool_calls"}


def test_an_ai_message_without_tool_calls_is_sent_as_plain_text() -> None:
    assert map_messages([AiMessage(text="hi")]) == [{"role": "assistant", "content": "hi"}]
