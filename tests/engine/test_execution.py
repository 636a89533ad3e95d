"""Executing one tool call (seed 3.2.3 / 3.2.4 / 6.2): parsing, binding, result text."""

import concurrent.futures
import dataclasses
import json
import threading
from typing import Annotated

import pytest
from pydantic import BaseModel

from tools_app.engine import (
    CallableToolExecutor,
    FunctionToolExecutor,
    P,
    ToolArgumentsError,
    ToolExecution,
    ToolExecutionError,
    ToolExecutionRequest,
    ToolExecutionResult,
    arguments_as_map,
    result_text,
    tool,
)

from .support import WEATHER, WeatherTools


def request(arguments: str = "", name: str = "t") -> ToolExecutionRequest:
    return ToolExecutionRequest(id="call_1", name=name, arguments=arguments)


# -- arguments_as_map ------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["", "{}", "  {}  "])
def test_empty_arguments_are_an_empty_object(raw: str) -> None:
    assert arguments_as_map(request(raw)) == {}


def test_an_arguments_object_is_parsed() -> None:
    assert arguments_as_map(request('{"city": "杭州", "days": 3}')) == {"city": "杭州", "days": 3}


def test_invalid_json_is_an_arguments_error_naming_the_tool() -> None:
    with pytest.raises(ToolArgumentsError, match="not valid JSON") as caught:
        arguments_as_map(request('{"city": ', name="get_weather"))
    assert caught.value.tool_name == "get_weather"
    assert "get_weather" in str(caught.value)
    assert isinstance(caught.value.__cause__, json.JSONDecodeError)


@pytest.mark.parametrize(("raw", "message"), [
    ('{"expression": "2 +', "Unterminated string starting at line 1 column 16"),
    ('{"city": ', "Expecting value at line 1 column 9"),
])
def test_an_invalid_json_error_names_its_position_once(raw: str, message: str) -> None:
    with pytest.raises(ToolArgumentsError) as caught:
        arguments_as_map(request(raw, name="calculator"))
    assert str(caught.value).endswith(f"are not valid JSON: {message}")
    assert "at at" not in str(caught.value)


@pytest.mark.parametrize("raw", ["[1, 2]", '"杭州"', "42", "true"])
def test_json_that_is_not_an_object_is_an_arguments_error(raw: str) -> None:
    with pytest.raises(ToolArgumentsError, match="must be a JSON object"):
        arguments_as_map(request(raw))


# -- result text -----------------------------------------------------------------------


class Forecast(BaseModel):
    city: str
    celsius: int


@dataclasses.dataclass
class Reading:
    city: str
    celsius: float


def test_result_text_rules() -> None:
    assert result_text(None) == "Success"
    assert result_text("杭州") == "杭州"
    assert result_text("") == ""
    assert json.loads(result_text({"a": [1, 2]})) == {"a": [1, 2]}


def returning(value: object) -> FunctionToolExecutor:
    def produce() -> object:
        return value

    return FunctionToolExecutor(produce)


async def test_a_tool_returning_none_reports_success() -> None:
    result = await returning(None).execute_with_result(request())
    assert result.text == "Success"
    assert result.result is None
    assert result.is_error is False


async def test_a_string_result_is_sent_as_is() -> None:
    result = await returning(WEATHER).execute_with_result(request())
    assert result.text == WEATHER
    assert result.result == WEATHER


@pytest.mark.parametrize(
    ("value", "expected_json"),
    [
        ({"city": "杭州", "celsius": 22}, {"city": "杭州", "celsius": 22}),
        ([1, "two", None], [1, "two", None]),
        (Forecast(city="杭州", celsius=22), {"city": "杭州", "celsius": 22}),
        (Reading(city="Hangzhou", celsius=22.5), {"city": "Hangzhou", "celsius": 22.5}),
        (42, 42),
    ],
    ids=["dict", "list", "pydantic-model", "dataclass", "int"],
)
async def test_other_results_become_json_and_the_raw_object_is_kept(
    value: object, expected_json: object
) -> None:
    result = await returning(value).execute_with_result(request())
    assert json.loads(result.text) == expected_json
    assert result.result is value


async def test_non_ascii_results_stay_readable_in_the_json_text() -> None:
    result = await returning({"city": "杭州"}).execute_with_result(request())
    assert "杭州" in result.text


async def test_execute_returns_only_the_text() -> None:
    text = await returning({"ok": True}).execute(request())
    assert text == '{"ok": true}'


# -- argument binding ------------------------------------------------------------------


def forecast(city: str, days: int = 1) -> str:
    return f"{city} x{days} ({type(days).__name__})"


async def test_arguments_are_bound_by_name() -> None:
    executor = FunctionToolExecutor(forecast)
    assert await executor.execute(request('{"days": 2, "city": "杭州"}')) == "杭州 x2 (int)"


async def test_a_missing_required_argument_is_an_arguments_error_naming_it() -> None:
    executor = FunctionToolExecutor(forecast)
    with pytest.raises(ToolArgumentsError) as caught:
        await executor.execute(request('{"days": 2}', name="forecast"))
    assert "city" in str(caught.value)
    assert "forecast" in str(caught.value)
    assert caught.value.errors[0]["loc"] == ["city"]
    assert caught.value.errors[0]["type"] == "missing"


async def test_a_value_that_cannot_be_coerced_is_an_arguments_error_naming_it() -> None:
    executor = FunctionToolExecutor(forecast)
    with pytest.raises(ToolArgumentsError) as caught:
        await executor.execute(request('{"city": "杭州", "days": "three"}'))
    assert "days" in str(caught.value)
    assert [error["loc"] for error in caught.value.errors] == [["days"]]


async def test_coercions_that_pydantic_allows_work() -> None:
    executor = FunctionToolExecutor(forecast)
    result = await executor.execute_with_result(request('{"city": "杭州", "days": "3"}'))
    assert result.text == "杭州 x3 (int)"


async def test_defaults_fill_in_missing_optional_arguments() -> None:
    executor = FunctionToolExecutor(forecast)
    assert await executor.execute(request('{"city": "杭州"}')) == "杭州 x1 (int)"


async def test_unknown_arguments_are_ignored_unless_the_tool_is_strict() -> None:
    @tool(strict=True)
    def exact(city: str) -> str:
        return city

    lenient = FunctionToolExecutor(forecast)
    assert await lenient.execute(request('{"city": "杭州", "mood": "sunny"}')) == "杭州 x1 (int)"
    with pytest.raises(ToolArgumentsError, match="mood"):
        await FunctionToolExecutor(exact).execute(request('{"city": "杭州", "mood": "sunny"}'))


async def test_an_aliased_parameter_is_bound_from_the_name_the_model_sees() -> None:
    def weather(city_name: Annotated[str, P("city", "城市名")]) -> str:
        return f"weather in {city_name}"

    executor = FunctionToolExecutor(weather)
    assert await executor.execute(request('{"city": "杭州"}')) == "weather in 杭州"
    with pytest.raises(ToolArgumentsError, match="city"):
        await executor.execute(request('{"city_name": "杭州"}'))


async def test_a_bound_method_is_executed_on_its_object() -> None:
    tools = WeatherTools()
    executor = FunctionToolExecutor(tools.get_weather)
    result = await executor.execute_with_result(request('{"city": "杭州"}', name="get_weather"))
    assert result.text == WEATHER
    assert tools.cities == ["杭州"]
    assert executor.name == "get_weather"


async def test_nested_model_arguments_arrive_as_model_instances() -> None:
    received: list[object] = []

    def record(forecast: Forecast, readings: list[Reading]) -> None:
        received.extend([forecast, *readings])

    executor = FunctionToolExecutor(record)
    arguments = {
        "forecast": {"city": "杭州", "celsius": "22"},
        "readings": [{"city": "Hangzhou", "celsius": 21.5}],
    }
    assert await executor.execute(request(json.dumps(arguments))) == "Success"
    assert received == [Forecast(city="杭州", celsius=22), Reading(city="Hangzhou", celsius=21.5)]
    assert isinstance(received[0], Forecast)
    assert isinstance(received[1], Reading)


# -- failures inside the tool ----------------------------------------------------------


async def test_a_tool_that_raises_is_an_execution_error_wrapping_the_cause() -> None:
    cause = ConnectionError("weather service unreachable")

    def failing() -> str:
        raise cause

    with pytest.raises(ToolExecutionError) as caught:
        await FunctionToolExecutor(failing).execute(request(name="failing"))
    assert caught.value.cause is cause
    assert caught.value.__cause__ is cause
    assert caught.value.tool_name == "failing"
    assert "weather service unreachable" in str(caught.value)
    assert "ConnectionError" in str(caught.value)


async def test_an_arguments_error_raised_inside_the_tool_stays_an_arguments_error() -> None:
    def picky(city: str) -> str:
        raise ToolArgumentsError(f"unknown city {city!r}", tool_name="picky")

    with pytest.raises(ToolArgumentsError, match="unknown city") as caught:
        await FunctionToolExecutor(picky).execute(request('{"city": "Atlantis"}'))
    assert not isinstance(caught.value, ToolExecutionError)


# -- sync and async tools --------------------------------------------------------------


async def test_async_tools_are_awaited() -> None:
    async def lookup(city: str) -> dict[str, str]:
        return {"city": city}

    executor = FunctionToolExecutor(lookup)
    assert executor.is_async
    result = await executor.execute_with_result(request('{"city": "杭州"}'))
    assert result.result == {"city": "杭州"}


async def test_async_tool_failures_are_execution_errors() -> None:
    async def broken() -> None:
        raise KeyError("missing")

    with pytest.raises(ToolExecutionError, match="KeyError"):
        await FunctionToolExecutor(broken).execute(request())


async def test_sync_tools_run_in_a_worker_thread() -> None:
    def where() -> int:
        return threading.get_ident()

    executor = FunctionToolExecutor(where)
    assert not executor.is_async
    result = await executor.execute_with_result(request())
    assert result.result != threading.get_ident()


# -- CallableToolExecutor (the seed's "a lambda is enough") ------------------------------


async def test_a_callable_executor_turns_its_value_into_result_text() -> None:
    executor = CallableToolExecutor(lambda req: {"echo": req.arguments})
    result = await executor.execute_with_result(request('{"a": 1}'))
    assert json.loads(result.text) == {"echo": '{"a": 1}'}


async def test_a_callable_executor_may_return_a_full_result() -> None:
    failure = ToolExecutionResult.failure("no such city")
    result = await CallableToolExecutor(lambda req: failure).execute_with_result(request())
    assert result is failure
    assert result.is_error


async def test_a_callable_executor_wraps_what_it_raises() -> None:
    def explode(req: ToolExecutionRequest) -> str:
        raise ValueError("bad")

    with pytest.raises(ToolExecutionError, match="ValueError: bad"):
        await CallableToolExecutor(explode).execute(request())


# -- ToolExecution ---------------------------------------------------------------------


def test_a_tool_execution_records_request_result_and_duration() -> None:
    req = request('{"city": "杭州"}', name="get_weather")
    execution = ToolExecution(req, ToolExecutionResult.success(WEATHER), 100.0, 102.5)
    assert execution.request is req
    assert execution.result_text == WEATHER
    assert execution.has_failed is False
    assert execution.duration == 2.5


def test_a_failed_execution_keeps_its_cause() -> None:
    cause = RuntimeError("x")
    execution = ToolExecution(request(), ToolExecutionResult.failure("x", cause), 1.0, 1.0)
    assert execution.has_failed is True
    assert execution.result.error is cause
    assert execution.duration == 0.0


async def test_sync_tools_do_not_need_the_event_loops_default_executor() -> None:
    """Stuck sync tools (timed out, their threads still running) must not starve the
    loop's default executor, which aiohttp needs to resolve host names; and a sync tool
    still sees the caller's context variables."""
    import asyncio
    import contextvars

    from tools_app.engine.execution import FunctionToolExecutor

    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")

    def who_runs_me() -> str:
        return f"{threading.current_thread().name} {marker.get()}"

    loop = asyncio.get_running_loop()
    release = threading.Event()
    default = concurrent.futures.ThreadPoolExecutor(2)
    loop.set_default_executor(default)
    blockers = [loop.run_in_executor(None, release.wait) for _ in range(4)]  # all taken
    try:
        marker.set("from the caller")
        result = await asyncio.wait_for(
            FunctionToolExecutor(who_runs_me).execute(
                ToolExecutionRequest(id="c1", name="who_runs_me", arguments="{}")),
            timeout=5)
    finally:
        release.set()
        await asyncio.gather(*blockers)
        default.shutdown()
    thread_name, _, value = result.partition(" ")
    assert thread_name.startswith("agentforge-tool")
    assert value == "from the caller"


# -- the arguments model, built once per function ---------------------------------------


def test_a_functions_arguments_model_is_built_once_per_strictness() -> None:
    """A worker builds each run's executors afresh: the pydantic model of a function's
    parameters is built once, not per run; strictness gives a model of its own."""

    def lookup(city: str, days: int = 1) -> str:
        return f"{city} x{days}"

    first, second = FunctionToolExecutor(lookup), FunctionToolExecutor(lookup)
    strict = FunctionToolExecutor(lookup, strict=True)

    assert first.arguments.model is second.arguments.model
    assert strict.arguments.model is not first.arguments.model
    assert first.validate(request('{"city": "Oslo", "extra": 1}')).model_dump() == {
        "city": "Oslo", "days": 1}
    with pytest.raises(ToolArgumentsError):
        strict.validate(request('{"city": "Oslo", "extra": 1}'))


def test_a_methods_arguments_model_is_shared_by_its_instances_and_held_weakly() -> None:
    import gc
    import weakref

    class Forecasts:
        def lookup(self, city: str) -> str:
            return city

    one, two = Forecasts(), Forecasts()
    assert (FunctionToolExecutor(one.lookup).arguments.model
            is FunctionToolExecutor(two.lookup).arguments.model)
    gone = weakref.ref(one)
    del one
    gc.collect()
    assert gone() is None  # the cache keeps no instance alive


def test_an_unhashable_callable_tool_still_gets_its_arguments_model() -> None:
    @dataclasses.dataclass  # eq=True without frozen: instances are unhashable
    class Greeter:
        greeting: str
        __name__ = "greet"

        def __call__(self, name: str) -> str:
            return f"{self.greeting}, {name}"

    executor = FunctionToolExecutor(Greeter("Hello"))

    assert executor.validate(request('{"name": "Ada"}')).model_dump() == {"name": "Ada"}
