"""Mock tools (#12): canned results, errors, templates, sequences, through ToolService."""

from __future__ import annotations

import pydantic
import pytest

from tools_app.engine import (
    SchemaValidatingExecutor,
    ScriptedCall,
    ScriptedChatModel,
    ScriptStep,
    ToolArgumentsError,
    ToolExecutionError,
    ToolExecutionRequest,
    ToolService,
    ToolSpecification,
    UserMessage,
)
from tools_app.engine.sources import MockConfig, MockToolExecutor


def call(arguments: str = "{}", name: str = "m") -> ToolExecutionRequest:
    return ToolExecutionRequest(id="c1", name=name, arguments=arguments)


async def test_results_follow_the_seed_text_rules() -> None:
    assert (await MockToolExecutor({"result": "sunny"}).execute_with_result(call())).text \
        == "sunny"
    assert (await MockToolExecutor({}).execute_with_result(call())).text == "Success"
    result = await MockToolExecutor({"result": {"t": 21, "ok": True}}).execute_with_result(
        call())
    assert result.text == '{"t": 21, "ok": true}'
    assert result.result == {"t": 21, "ok": True}


async def test_templates_fill_text_and_keep_json_types() -> None:
    executor = MockToolExecutor({"template": True, "result": {
        "summary": "{city} for {days} days", "days": "{days}", "first": "{stops.0}"}})
    result = await executor.execute_with_result(
        call('{"city": "Oslo", "days": 3, "stops": ["Bergen"]}'))
    assert result.result == {"summary": "Oslo for 3 days", "days": 3, "first": "Bergen"}


async def test_a_template_naming_a_missing_argument_is_an_execution_error() -> None:
    executor = MockToolExecutor({"template": True, "result": "{city}"})
    with pytest.raises(ToolExecutionError, match=r"uses \{city\}, which the call"):
        await executor.execute_with_result(call("{}"))


async def test_a_template_cannot_reach_python_attributes() -> None:
    executor = MockToolExecutor({"template": True, "result": "{city.__class__}"})
    with pytest.raises(ToolExecutionError, match="which the call"):
        await executor.execute_with_result(call('{"city": "Oslo"}'))


async def test_a_canned_error_is_an_execution_error() -> None:
    with pytest.raises(ToolExecutionError, match=r"^upstream down$"):
        await MockToolExecutor({"error": "upstream down"}).execute_with_result(call())


async def test_a_sequence_answers_in_turn_then_as_configured() -> None:
    steps = [{"result": "one"}, {"error": "two failed"}, {"result": "three"}]
    repeat = MockToolExecutor({"sequence": steps})
    cycle = MockToolExecutor({"sequence": steps, "after_sequence": "cycle"})
    used_up = MockToolExecutor({"sequence": steps[:1], "after_sequence": "error"})

    async def texts(executor: MockToolExecutor, count: int) -> list[str]:
        out = []
        for _ in range(count):
            try:
                out.append((await executor.execute_with_result(call())).text)
            except ToolExecutionError as exc:
                out.append(f"error: {exc}")
        return out

    assert await texts(repeat, 4) == ["one", "error: two failed", "three", "three"]
    assert await texts(cycle, 4) == ["one", "error: two failed", "three", "one"]
    assert (await texts(used_up, 2))[1].startswith("error: Mock tool 'm' has no answer left")


@pytest.mark.parametrize(("config", "problem"), [
    ({"result": "a", "error": "b"}, "either a result or an error"),
    ({"sequence": [{"result": "a"}], "result": "b"}, "put result, error"),
    ({"latency_seconds": -1}, "greater than or equal to 0"),
    ({"sequence": []}, "at least 1 item"),
    ({"reslt": "typo"}, "Extra inputs are not permitted"),
])
def test_bad_configurations_are_refused(config: dict[str, object], problem: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=problem):
        MockConfig.model_validate(config)


async def test_a_mock_runs_in_the_tool_loop_with_schema_validation() -> None:
    spec = ToolSpecification(name="weather", parameters={
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    service = ToolService()
    service.tool(spec, SchemaValidatingExecutor(spec, MockToolExecutor(
        {"template": True, "result": "Sunny in {city}"})))
    model = ScriptedChatModel([
        ScriptStep(tool_calls=[ScriptedCall(name="weather", arguments={"city": "Oslo"})]),
        ScriptStep(text="done"),
    ])
    result = await service.chat(model, [UserMessage(text="weather?")])
    assert [e.result_text for e in result.tool_executions] == ["Sunny in Oslo"]


async def test_schema_violations_reach_the_arguments_error_policy() -> None:
    spec = ToolSpecification(name="weather", parameters={
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    service = ToolService()  # the default arguments policy: rethrow
    service.tool(spec, SchemaValidatingExecutor(spec, MockToolExecutor({})))
    model = ScriptedChatModel([
        ScriptStep(tool_calls=[ScriptedCall(name="weather", arguments={"town": "Oslo"})])])
    with pytest.raises(ToolArgumentsError, match="/city: 'city' is a required property"):
        await service.chat(model, [UserMessage(text="weather?")])


async def test_a_latency_longer_than_the_tools_timeout_times_out() -> None:
    spec = ToolSpecification(name="slow", parameters={"type": "object", "properties": {}})
    service = ToolService()
    service.tool(spec, MockToolExecutor({"latency_seconds": 3600, "result": "late"}),
                 timeout=0.05)
    model = ScriptedChatModel([ScriptStep(tool_calls=[ScriptedCall(name="slow")]),
                               ScriptStep(text="{last_result}")])
    result = await service.chat(model, [UserMessage(text="go")])
    assert [e.result_text for e in result.tool_executions] == [
        "Tool 'slow' timed out after 0.05 s"]
