"""Registering tools on a ToolService (seed 4.1): every source form, and unique names."""

import pytest

from tools_app.engine import (
    ChatRequest,
    ChatRequestParameters,
    FunctionChatModel,
    FunctionToolExecutor,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolService,
    ToolSpecification,
    tool,
    tool_specification_from,
)

from . import string_annotated_tools
from .support import WEATHER, WeatherTools, call, calls, final, scripted, user


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(name="shout")
def upper(text: str) -> str:
    return text.upper()


class Calendar:
    def __init__(self, owner: str) -> None:
        self.owner = owner

    @tool
    def today(self) -> str:
        """Today's date."""
        return f"{self.owner}: 2026-10-06"

    def not_exposed(self) -> str:
        return "secret"


def names(service: ToolService) -> list[str]:
    return [spec.name for spec in service.tool_specifications]


def test_an_object_registers_its_tool_methods_only() -> None:
    service = ToolService().tools(WeatherTools())
    assert names(service) == ["get_weather"]


def test_a_module_registers_the_tool_functions_defined_in_it() -> None:
    service = ToolService().tools(string_annotated_tools)
    assert names(service) == ["ship", "count_words"]


def test_a_list_may_mix_objects_and_tool_functions() -> None:
    service = ToolService().tools([WeatherTools(), add, Calendar("alice"), upper])
    assert names(service) == ["get_weather", "add", "today", "shout"]


def test_a_mapping_of_specifications_to_executors() -> None:
    spec = ToolSpecification(name="lookup", description="Look it up")
    service = ToolService().tools({spec: lambda request: "found"})
    assert service.tool_specifications == [spec]


def test_a_list_of_specification_executor_pairs() -> None:
    first = ToolSpecification(name="one")
    second = tool_specification_from(add)
    pairs = [(first, lambda request: "1"), (second, FunctionToolExecutor(add))]
    service = ToolService().tools(pairs)
    assert service.tool_specifications == [first, second]


def test_an_object_without_tools_is_rejected() -> None:
    with pytest.raises(ValueError, match="no @tool functions"):
        ToolService().tools(object())


def test_tool_registers_one_method_by_name() -> None:
    service = ToolService().tool(Calendar("bob"), "today")
    assert names(service) == ["today"]
    assert service.tool_specifications[0].description == "Today's date."


def test_tool_with_an_unknown_method_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="no_such_method"):
        ToolService().tool(Calendar("bob"), "no_such_method")


def test_undecorated_functions_can_be_registered_explicitly() -> None:
    def multiply(a: int, b: int) -> int:
        return a * b

    assert names(ToolService().tool(multiply)) == ["multiply"]


@pytest.mark.parametrize(
    "register",
    [
        lambda s: s.tools([WeatherTools(), WeatherTools()]),
        lambda s: s.tools(WeatherTools()).tool(WeatherTools(), "get_weather"),
        lambda s: s.tool(add).tool(ToolSpecification(name="add"), lambda request: "x"),
        lambda s: s.tools([add, add]),
    ],
    ids=["two-objects", "object-then-method", "function-then-spec", "same-function-twice"],
)
def test_duplicate_tool_names_are_rejected(register: object) -> None:
    service = ToolService()
    with pytest.raises(ValueError, match="Duplicate tool name"):
        register(service)  # type: ignore[operator]


def test_an_invalid_tool_name_is_rejected_at_registration() -> None:
    with pytest.raises(ValueError, match="'get weather'"):
        ToolService().tool(ToolSpecification(name="get weather"), lambda request: "")


async def test_tool_methods_registered_from_a_list_run_on_their_object() -> None:
    service = ToolService().tools([Calendar("alice"), add])
    model = scripted(calls(call("today"), call("add", {"a": 2, "b": 3})), final())
    await service.chat(model, [user()])
    assert [m.text for m in model.tool_results(1)] == ["alice: 2026-10-06", "5"]


async def test_a_specification_with_a_lambda_executor_answers_the_model() -> None:
    spec = ToolSpecification(
        name="lookup",
        parameters={"type": "object", "properties": {"key": {"type": "string"}}},
    )
    service = ToolService().tool(spec, lambda request: f"value of {request.arguments}")
    model = scripted(calls(call("lookup", {"key": "k1"})), final())
    await service.chat(model, [user()])
    assert model.tool_results(1) == [
        ToolExecutionResultMessage(id="call_0_0", tool_name="lookup", text='value of {"key": "k1"}')
    ]


async def test_an_async_lambda_executor_is_awaited() -> None:
    async def answer(request: ToolExecutionRequest) -> str:
        return "async answer"

    service = ToolService().tools({ToolSpecification(name="lookup"): answer})
    model = scripted(calls(call("lookup")), final())
    await service.chat(model, [user()])
    assert model.tool_results(1)[0].text == "async answer"


async def test_a_method_registered_by_name_runs_on_its_object() -> None:
    weather = WeatherTools()
    service = ToolService().tool(weather, "get_weather")
    model = scripted(calls(call("get_weather", {"city": "杭州"})), final())
    await service.chat(model, [user()])
    assert weather.cities == ["杭州"]
    assert model.tool_results(1)[0].text == WEATHER


async def test_every_registered_tool_is_offered_to_the_model() -> None:
    seen: list[list[str]] = []

    def model_function(messages: object, request: ChatRequest) -> str:
        seen.append([t.name for t in request.parameters.tools or ()])
        return "ok"

    service = ToolService().tools([WeatherTools(), add, Calendar("alice")])
    await service.chat(FunctionChatModel(model_function), [user()], ChatRequestParameters())
    assert seen == [["get_weather", "add", "today"]]


def test_registered_tools_is_read_only() -> None:
    service = ToolService().tools([add])
    with pytest.raises(TypeError):
        service.registered_tools["x"] = service.registered_tools["add"]  # type: ignore[index]
    assert names(service) == ["add"]
