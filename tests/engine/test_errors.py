"""Error handling in the loop (seed 4.4): the two handlers and the hallucinated-tool strategy."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tools_app.engine import (
    AgentForgeError,
    HallucinatedToolError,
    MaxRoundTripsExceededError,
    ProviderError,
    ToolArgumentsError,
    ToolError,
    ToolErrorContext,
    ToolErrorHandlerResult,
    ToolExecutionError,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolLoopError,
    ToolService,
    ToolTimeoutError,
    ToolUnknownOutcomeError,
    tell_model_available_tools,
    tool,
)

from .support import WeatherTools, call, calls, final, scripted, user


class PolicyStop(Exception):
    """What a strict error handler raises to stop the run."""


@tool
def reserve(seats: int) -> str:
    return f"reserved {seats}"


@tool
def flaky() -> str:
    raise RuntimeError("database unavailable")


def sync_and_async(handler: Callable[..., Any]) -> list[Callable[..., Any]]:
    async def async_handler(*args: Any) -> Any:
        await asyncio.sleep(0)
        return handler(*args)

    return [handler, async_handler]


def test_the_exception_tree() -> None:
    assert issubclass(ToolArgumentsError, ToolError)
    assert issubclass(ToolExecutionError, ToolError)
    assert issubclass(ToolTimeoutError, ToolExecutionError)
    assert issubclass(ToolUnknownOutcomeError, ToolExecutionError)
    assert issubclass(HallucinatedToolError, ToolError)
    assert issubclass(MaxRoundTripsExceededError, ToolLoopError)
    assert not issubclass(ToolArgumentsError, ToolExecutionError)
    for error in (ToolError, ToolLoopError, ProviderError):
        assert issubclass(error, AgentForgeError)


# -- arguments errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "named"),
    [("{not json", "not valid JSON"), ("[1]", "JSON object"), ({}, "seats"),
     ({"seats": "many"}, "seats")],
    ids=["invalid-json", "not-an-object", "missing", "wrong-type"],
)
async def test_by_default_an_arguments_error_stops_the_run(
    arguments: dict[str, Any] | str, named: str
) -> None:
    model = scripted(calls(call("reserve", arguments)), final())
    with pytest.raises(ToolArgumentsError, match=named) as caught:
        await ToolService().tools([reserve]).chat(model, [user()])
    assert caught.value.tool_name == "reserve"
    assert model.calls == 1


@pytest.mark.parametrize(
    "handler",
    sync_and_async(lambda error, context: ToolErrorHandlerResult.text(
        f"call {context.request.id} had bad arguments: {error}")),
    ids=["sync", "async"],
)
async def test_an_arguments_handler_may_answer_the_model_instead(handler: Any) -> None:
    service = ToolService(arguments_error_handler=handler).tools([reserve])
    model = scripted(calls(call("reserve", {"seats": "many"})), final("let me fix that"))
    result = await service.chat(model, [user()])
    [message] = model.tool_results(1)
    assert message.id == "call_0_0"
    assert message.is_error is True
    assert message.text.startswith("call call_0_0 had bad arguments: ")
    assert "seats" in message.text
    assert result.final_response.ai_message.text == "let me fix that"
    assert result.tool_executions[0].has_failed


async def test_the_handler_receives_the_error_and_its_context() -> None:
    seen: list[tuple[ToolArgumentsError, ToolErrorContext]] = []

    def handler(error: ToolArgumentsError, context: ToolErrorContext) -> ToolErrorHandlerResult:
        seen.append((error, context))
        return ToolErrorHandlerResult.text("retry")

    service = ToolService(arguments_error_handler=handler).tools([reserve])
    model = scripted(calls(call("reserve", {"seats": 1})), calls(call("reserve", "oops")), final())
    await service.chat(model, [user()])
    [(error, context)] = seen
    assert isinstance(error, ToolArgumentsError)
    assert context.request == ToolExecutionRequest(id="call_1_0", name="reserve", arguments="oops")
    assert context.round_index == 1


# -- execution errors ------------------------------------------------------------------


async def test_by_default_an_execution_error_is_sent_to_the_model() -> None:
    model = scripted(calls(call("flaky")), final("the database is down, sorry"))
    result = await ToolService().tools([flaky]).chat(model, [user()])
    [message] = model.tool_results(1)
    assert message == ToolExecutionResultMessage(
        id="call_0_0", tool_name="flaky", text="RuntimeError: database unavailable", is_error=True
    )
    assert result.final_response.ai_message.text == "the database is down, sorry"
    [execution] = result.tool_executions
    assert execution.has_failed
    assert isinstance(execution.result.error, ToolExecutionError)
    assert isinstance(execution.result.error.cause, RuntimeError)


@pytest.mark.parametrize(
    "handler",
    sync_and_async(lambda error, context: ToolErrorHandlerResult.text("工具执行失败，请重试")),  # noqa: RUF001
    ids=["sync", "async"],
)
async def test_an_execution_handler_chooses_the_text_the_model_sees(handler: Any) -> None:
    service = ToolService(execution_error_handler=handler).tools([flaky])
    model = scripted(calls(call("flaky")), final())
    await service.chat(model, [user()])
    assert model.tool_results(1)[0].text == "工具执行失败，请重试"  # noqa: RUF001
    assert model.tool_results(1)[0].is_error is True


def raising(*args: Any) -> ToolErrorHandlerResult:
    raise PolicyStop("stopped by policy")


async def raising_async(*args: Any) -> ToolErrorHandlerResult:
    await asyncio.sleep(0)
    raise PolicyStop("stopped by policy")


@pytest.mark.parametrize("handler", [raising, raising_async], ids=["sync", "async"])
@pytest.mark.parametrize(
    ("option", "proposed"),
    [("arguments_error_handler", call("reserve", {})),
     ("execution_error_handler", call("flaky"))],
    ids=["arguments", "execution"],
)
async def test_a_handler_that_raises_stops_the_run_with_its_exception(
    handler: Callable[..., Awaitable[Any] | Any], option: str, proposed: Any
) -> None:
    service = ToolService(**{option: handler}).tools([reserve, flaky])
    model = scripted(calls(proposed), final())
    with pytest.raises(PolicyStop, match="stopped by policy"):
        await service.chat(model, [user()])
    assert model.calls == 1


async def test_a_handler_that_returns_something_else_is_a_type_error() -> None:
    service = ToolService(execution_error_handler=lambda e, c: "plain text").tools([flaky])
    with pytest.raises(TypeError, match="expected ToolErrorHandlerResult"):
        await service.chat(scripted(calls(call("flaky")), final()), [user()])


async def test_an_error_that_stops_a_parallel_round_is_raised_as_itself() -> None:
    model = scripted(calls(call("reserve", {"seats": 2}), call("reserve", "{broken")), final())
    with pytest.raises(ToolArgumentsError, match="not valid JSON"):
        await ToolService().tools([reserve]).chat(model, [user()])


async def test_a_hallucinated_call_in_a_parallel_round_is_raised_as_itself() -> None:
    model = scripted(calls(call("reserve", {"seats": 2}), call("imaginary")), final())
    with pytest.raises(HallucinatedToolError, match="imaginary"):
        await ToolService().tools([reserve]).chat(model, [user()])


async def test_a_raising_handler_in_a_parallel_round_cancels_the_other_calls() -> None:
    cancelled: list[str] = []

    @tool
    async def slow() -> str:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append("slow")
            raise
        return "finished"

    service = ToolService(execution_error_handler=raising).tools([slow, flaky])
    model = scripted(calls(call("slow"), call("flaky")), final())
    with pytest.raises(PolicyStop):
        await service.chat(model, [user()])
    assert cancelled == ["slow"]


async def test_a_call_that_stops_the_run_at_once_keeps_the_later_calls_from_starting() -> None:
    """As in a sequential round: the calls after one whose handler stopped the run
    before any call had to wait are never started."""
    started: list[str] = []

    @tool
    async def fails_now() -> str:
        raise RuntimeError("boom")

    @tool
    async def later() -> str:
        started.append("later")
        return "ran"

    service = ToolService(execution_error_handler=raising).tools([fails_now, later])
    model = scripted(calls(call("fails_now"), call("later"), call("later")), final())
    with pytest.raises(PolicyStop):
        await service.chat(model, [user()])
    assert started == []


async def test_a_parallel_round_returns_results_in_call_order() -> None:
    @tool
    async def pause(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    model = scripted(calls(call("pause", {"seconds": 0.05}), call("pause", {"seconds": 0}),
                           call("pause", {"seconds": 0.01})), final())
    await ToolService().tools([pause]).chat(model, [user()])
    assert [m.text for m in model.tool_results(1)] == ["slept 0.05", "slept 0.0", "slept 0.01"]


# -- hallucinated tool names -----------------------------------------------------------


async def test_by_default_a_hallucinated_tool_stops_the_run() -> None:
    model = scripted(calls(call("get_stock_price", {"symbol": "BABA"})), final())
    with pytest.raises(HallucinatedToolError) as caught:
        await ToolService().tools(WeatherTools()).chat(model, [user()])
    assert caught.value.tool_name == "get_stock_price"
    assert caught.value.available == ["get_weather"]
    assert "get_stock_price" in str(caught.value)
    assert "get_weather" in str(caught.value)


async def test_the_error_says_the_tool_was_not_offered_and_names_the_offered_ones() -> None:
    model = scripted(calls(call("get_stock_price", {"symbol": "BABA"})), final())
    with pytest.raises(HallucinatedToolError) as caught:
        await ToolService().tools([WeatherTools(), reserve]).chat(model, [user()])
    assert str(caught.value) == (
        "The model requested tool 'get_stock_price', which is not one of the tools offered "
        "to this run (offered: get_weather, reserve)")
    assert "not registered" not in str(caught.value)


def test_the_not_offered_messages_stay_bounded_with_many_tools_or_a_long_name() -> None:
    from tools_app.engine.errors import NAMED_TOOLS_LIMIT

    offered = [f"tool_{n:02}" for n in range(NAMED_TOOLS_LIMIT + 15)]
    long_name = "x" * 100_000
    error = HallucinatedToolError(long_name, offered)
    told = tell_model_available_tools(
        ToolExecutionRequest(id="c", name=long_name, arguments="{}"), offered)

    for text in (str(error), told.text):
        assert f"tool_{NAMED_TOOLS_LIMIT - 1:02} and 15 more" in text
        assert f"tool_{NAMED_TOOLS_LIMIT:02}" not in text
        assert len(text) < 1000
    assert error.tool_name == long_name  # the record keeps the name; the message cuts it
    assert str(HallucinatedToolError("ghost", [])).endswith("(offered: none)")


async def test_tell_model_available_tools_lets_the_model_correct_itself() -> None:
    service = ToolService(hallucinated_tool_strategy=tell_model_available_tools)
    service.tools([WeatherTools(), reserve])
    model = scripted(
        calls(call("get_stock_price", {"symbol": "BABA"})),
        calls(call("get_weather", {"city": "杭州"})),
        final("done"),
    )
    result = await service.chat(model, [user()])
    [message] = model.tool_results(1)
    assert message.id == "call_0_0"
    assert message.is_error is True
    assert "get_stock_price" in message.text
    assert message.text == ("Error: tool 'get_stock_price' is not one of the tools offered "
                            "to this run. Offered tools: get_weather, reserve")
    assert result.final_response.ai_message.text == "done"
    assert model.calls == 3


async def custom_strategy_async(
    request: ToolExecutionRequest, available: list[str]
) -> ToolExecutionResultMessage:
    return custom_strategy(request, available)


def custom_strategy(
    request: ToolExecutionRequest, available: list[str]
) -> ToolExecutionResultMessage:
    return ToolExecutionResultMessage(
        id="ignored", tool_name=request.name, text=f"No {request.name}; try {available[0]}"
    )


@pytest.mark.parametrize("strategy", [custom_strategy, custom_strategy_async],
                         ids=["sync", "async"])
async def test_a_custom_strategy_answers_the_hallucinated_call(strategy: Any) -> None:
    service = ToolService(hallucinated_tool_strategy=strategy).tools(WeatherTools())
    model = scripted(calls(call("weather")), final("sorry"))
    result = await service.chat(model, [user()])
    [message] = model.tool_results(1)
    assert message == ToolExecutionResultMessage(
        id="call_0_0", tool_name="weather", text="No weather; try get_weather", is_error=True
    )
    assert result.final_response.ai_message.text == "sorry"
    assert result.tool_executions[0].has_failed


async def test_a_hallucinated_call_next_to_a_real_one_keeps_both_results_in_order() -> None:
    service = ToolService(hallucinated_tool_strategy=tell_model_available_tools)
    service.tools(WeatherTools())
    model = scripted(calls(call("nope"), call("get_weather", {"city": "杭州"})), final())
    await service.chat(model, [user()])
    results = model.tool_results(1)
    assert [(m.tool_name, m.is_error) for m in results] == [("nope", True), ("get_weather", False)]
