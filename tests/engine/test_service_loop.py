"""The model <-> tools loop (seed 4.2, 4.3, 5.5): the seed's own scenario end to end."""

from collections.abc import Sequence

import pytest

from tools_app.engine import (
    AiMessage,
    ChatMessage,
    ChatRequest,
    ChatRequestParameters,
    FinishReason,
    FunctionChatModel,
    MaxRoundTripsExceededError,
    NamedToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolService,
    ToolSpecification,
    tool,
)

from .support import (
    ANSWER,
    QUESTION,
    WEATHER,
    WEATHER_SCHEMA,
    RecordingModel,
    WeatherTools,
    call,
    calls,
    final,
    scripted,
    user,
)

SEED_CALL = ToolExecutionRequest(id="call_0_0", name="get_weather", arguments='{"city": "杭州"}')


async def test_the_seeds_weather_scenario_end_to_end() -> None:
    weather = WeatherTools()
    service = ToolService().tools(weather)
    model = scripted(calls(call("get_weather", {"city": "杭州"})), final(ANSWER))

    result = await service.chat(model, [user(QUESTION)])

    assert result.final_response.ai_message.text == ANSWER
    assert result.final_response.finish_reason is FinishReason.STOP
    assert weather.cities == ["杭州"]
    [execution] = result.tool_executions
    assert execution.request == SEED_CALL
    assert execution.result_text == WEATHER
    assert execution.has_failed is False
    [intermediate] = result.intermediate_responses
    assert intermediate.ai_message.tool_execution_requests == (SEED_CALL,)
    assert intermediate.finish_reason is FinishReason.TOOL_EXECUTION
    assert result.returned_immediately is False


async def test_round_two_sends_the_tool_call_then_its_result_with_the_same_id() -> None:
    service = ToolService().tools(WeatherTools())
    model = scripted(calls(call("get_weather", {"city": "杭州"})), final(ANSWER))

    result = await service.chat(model, [user(QUESTION)])

    assert model.calls == 2
    assert model.requests[0].messages == (user(QUESTION),)
    assert model.requests[1].messages == (
        user(QUESTION),
        AiMessage(tool_execution_requests=(SEED_CALL,)),
        ToolExecutionResultMessage(id="call_0_0", tool_name="get_weather", text=WEATHER),
    )
    assert result.messages == [*model.requests[1].messages, AiMessage(text=ANSWER)]


async def test_both_rounds_offer_the_registered_tool_with_the_seeds_schema() -> None:
    service = ToolService().tools(WeatherTools())
    model = scripted(calls(call("get_weather", {"city": "杭州"})), final(ANSWER))
    await service.chat(model, [user()])
    for request in model.requests:
        [offered] = request.parameters.tools or ()
        assert offered.name == "get_weather"
        assert offered.description == "查询指定城市的当前天气"
        assert offered.parameters == WEATHER_SCHEMA


async def test_the_callers_message_list_is_not_modified() -> None:
    history: list[ChatMessage] = [user()]
    service = ToolService().tools(WeatherTools())
    await service.chat(scripted(calls(call("get_weather", {"city": "杭州"})), final()), history)
    assert history == [user()]


async def test_a_model_that_answers_at_once_runs_no_tools() -> None:
    weather = WeatherTools()
    model = scripted(final("I don't need tools."))
    result = await ToolService().tools(weather).chat(model, [user()])
    assert result.final_response.ai_message.text == "I don't need tools."
    assert result.tool_executions == []
    assert result.intermediate_responses == []
    assert weather.cities == []


async def test_several_rounds_accumulate_executions_and_intermediate_responses() -> None:
    weather = WeatherTools()
    model = scripted(
        calls(call("get_weather", {"city": "杭州"})),
        calls(call("get_weather", {"city": "上海"}), call("get_weather", {"city": "北京"})),
        final("all three"),
    )
    result = await ToolService().tools(weather).chat(model, [user()])
    assert weather.cities == ["杭州", "上海", "北京"]
    assert [e.request.id for e in result.tool_executions] == ["call_0_0", "call_1_0", "call_1_1"]
    assert len(result.intermediate_responses) == 2
    assert model.calls == 3
    assert len(result.messages) == 1 + 2 + 3 + 1


async def test_token_usage_is_summed_over_all_model_calls() -> None:
    model = scripted(calls(call("get_weather", {"city": "杭州"})), final(ANSWER))
    result = await ToolService().tools(WeatherTools()).chat(model, [user()])
    usages = [r.usage for r in [*result.intermediate_responses, result.final_response]]
    assert result.usage is not None
    assert result.usage.total_tokens == sum(u.total_tokens or 0 for u in usages if u)
    assert result.usage.total_tokens > 0


async def test_tool_executions_record_request_result_and_when_they_ran() -> None:
    result = await ToolService().tools(WeatherTools()).chat(
        scripted(calls(call("get_weather", {"city": "杭州"})), final()), [user()]
    )
    [execution] = result.tool_executions
    assert execution.request == SEED_CALL
    assert execution.result.result == WEATHER
    assert 0 < execution.started_at <= execution.finished_at
    assert execution.duration == execution.finished_at - execution.started_at


# -- parameter merging (seed 4.3) -------------------------------------------------------


def capturing_model() -> tuple[FunctionChatModel, list[ChatRequest]]:
    received: list[ChatRequest] = []

    def answer(messages: Sequence[ChatMessage], request: ChatRequest) -> str:
        received.append(request)
        return "ok"

    return FunctionChatModel(answer), received


async def test_registered_tools_are_added_to_the_request_without_parameters() -> None:
    model, received = capturing_model()
    await ToolService().tools(WeatherTools()).chat(model, [user()])
    [request] = received
    assert [t.name for t in request.parameters.tools or ()] == ["get_weather"]
    assert request.parameters.tool_choice is None
    assert request.parameters.temperature is None


async def test_the_callers_other_parameters_win() -> None:
    model, received = capturing_model()
    parameters = ChatRequestParameters(
        model_name="gpt-4o-mini",
        temperature=0.2,
        top_p=0.9,
        max_output_tokens=256,
        stop_sequences=("END",),
        tool_choice=NamedToolChoice(name="get_weather"),
        parallel_tool_calls=False,
        custom={"seed": 7},
    )
    await ToolService().tools(WeatherTools()).chat(model, [user()], parameters)
    [request] = received
    sent = request.parameters
    assert sent.model_name == "gpt-4o-mini"
    assert sent.temperature == 0.2
    assert sent.top_p == 0.9
    assert sent.max_output_tokens == 256
    assert sent.stop_sequences == ("END",)
    assert sent.tool_choice == NamedToolChoice(name="get_weather")
    assert isinstance(sent.tool_choice, NamedToolChoice)
    assert sent.parallel_tool_calls is False
    assert sent.custom == {"seed": 7}
    assert [t.name for t in sent.tools or ()] == ["get_weather"]


@pytest.mark.parametrize("choice", ["auto", "required", "none"])
async def test_a_string_tool_choice_is_passed_through(choice: str) -> None:
    model, received = capturing_model()
    parameters = ChatRequestParameters(tool_choice=choice)  # type: ignore[arg-type]
    await ToolService().tools(WeatherTools()).chat(model, [user()], parameters)
    assert received[0].parameters.tool_choice == choice


async def test_registered_tools_are_kept_when_the_caller_passes_tools_of_its_own() -> None:
    model, received = capturing_model()
    extra = ToolSpecification(name="server_search", description="Run by the provider")
    shadow = ToolSpecification(name="get_weather", description="The caller's copy")
    parameters = ChatRequestParameters(tools=(shadow, extra), temperature=0.0)
    await ToolService().tools(WeatherTools()).chat(model, [user()], parameters)
    tools = received[0].parameters.tools or ()
    assert [t.name for t in tools] == ["get_weather", "server_search"]
    assert tools[0].description == "查询指定城市的当前天气"
    assert received[0].parameters.temperature == 0.0


def test_override_with_keeps_unset_fields_and_replaces_set_ones() -> None:
    base = ChatRequestParameters(model_name="base", temperature=1.0, custom={"a": 1})
    merged = base.override_with(ChatRequestParameters(temperature=0.5))
    assert merged == ChatRequestParameters(model_name="base", temperature=0.5, custom={"a": 1})
    assert base.override_with(None) is base


# -- max_tool_calling_round_trips -------------------------------------------------------


def always_calling_tools() -> RecordingModel:
    def again(messages: Sequence[ChatMessage], request: ChatRequest) -> AiMessage:
        n = sum(isinstance(m, AiMessage) for m in messages)
        return AiMessage(tool_execution_requests=(
            ToolExecutionRequest(id=f"call_{n}", name="tick", arguments="{}"),
        ))

    return RecordingModel(FunctionChatModel(again))


def ticking_service(**options: int) -> tuple[ToolService, list[int]]:
    ticks: list[int] = []

    @tool
    async def tick() -> str:
        ticks.append(1)
        return "tick"

    return ToolService(**options).tool(tick), ticks  # type: ignore[arg-type]


def test_the_default_limit_is_100_round_trips() -> None:
    assert ToolService().max_tool_calling_round_trips == 100


async def test_the_default_limit_stops_a_model_that_never_stops_after_100_rounds() -> None:
    service, ticks = ticking_service()
    model = always_calling_tools()
    with pytest.raises(MaxRoundTripsExceededError) as caught:
        await service.chat(model, [user()])
    assert caught.value.limit == 100
    assert len(ticks) == 100
    assert model.calls == 101


@pytest.mark.parametrize("limit", [1, 3])
async def test_exceeding_the_limit_is_an_error_after_exactly_n_tool_rounds(limit: int) -> None:
    service, ticks = ticking_service(max_tool_calling_round_trips=limit)
    model = always_calling_tools()
    with pytest.raises(MaxRoundTripsExceededError, match=f"max_tool_calling_round_trips={limit}"):
        await service.chat(model, [user()])
    assert len(ticks) == limit
    assert model.calls == limit + 1


async def test_a_run_that_ends_exactly_at_the_limit_succeeds() -> None:
    service, ticks = ticking_service(max_tool_calling_round_trips=2)
    model = scripted(calls(call("tick")), calls(call("tick")), final("stopped in time"))
    result = await service.chat(model, [user()])
    assert result.final_response.ai_message.text == "stopped in time"
    assert len(ticks) == 2


@pytest.mark.parametrize("option", ["max_tool_calling_round_trips", "max_concurrency"])
def test_limits_below_one_are_rejected(option: str) -> None:
    with pytest.raises(ValueError, match=option):
        ToolService(**{option: 0})  # type: ignore[arg-type]

