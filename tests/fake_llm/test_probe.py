"""The capability probe against models that do and don't support each feature."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import datetime

import pytest

from tools_app.engine import (
    AiMessage,
    ChatMessage,
    ChatRequest,
    FunctionChatModel,
    NamedToolChoice,
    ProviderError,
    ScriptedChatModel,
    ToolExecutionRequest,
)
from tools_app.engine.probe import CapabilityReport, probe_capabilities

ALL_CHECKS = ["tool_calls", "tool_choice_required", "tool_choice_named",
              "parallel_tool_calls", "streaming_tool_calls"]


def _call(name: str, city: str = "Paris", index: int = 0) -> ToolExecutionRequest:
    return ToolExecutionRequest(id=f"call_{index}", name=name,
                                arguments=json.dumps({"city": city}))


def capable(messages: Sequence[ChatMessage], request: ChatRequest) -> AiMessage:
    """A model that honours tool_choice and answers two lookups with two calls."""
    parameters = request.parameters
    if isinstance(parameters.tool_choice, NamedToolChoice):
        return AiMessage(tool_execution_requests=(_call(parameters.tool_choice.name),))
    if parameters.parallel_tool_calls:
        return AiMessage(tool_execution_requests=(_call("get_weather", "Paris", 0),
                                                  _call("get_weather", "Tokyo", 1)))
    return AiMessage(tool_execution_requests=(_call("get_weather"),))


def streaming_scripted() -> ScriptedChatModel:
    return ScriptedChatModel(
        [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}],
        stream=True)


def statuses(report: CapabilityReport) -> dict[str, str]:
    return {check.name: check.status for check in report.checks}


async def test_a_capable_model_passes_every_check() -> None:
    report = await probe_capabilities(FunctionChatModel(capable),
                                      streaming_model=streaming_scripted)

    assert statuses(report) == dict.fromkeys(ALL_CHECKS, "passed")
    assert all(report.supports(name) for name in ALL_CHECKS)  # type: ignore[arg-type]
    assert (report.model_name, report.provider) == ("function", "function")
    assert all(check.latency_ms is not None and check.latency_ms >= 0 for check in report.checks)


async def test_the_requests_ask_for_each_feature() -> None:
    seen: list[ChatRequest] = []

    def recording(messages: Sequence[ChatMessage], request: ChatRequest) -> AiMessage:
        seen.append(request)
        return capable(messages, request)

    await probe_capabilities(FunctionChatModel(recording))

    choices = [r.parameters.tool_choice for r in seen]
    assert choices == [None, "required", NamedToolChoice(name="get_time"), None, None]
    assert [r.parameters.parallel_tool_calls for r in seen] == [None, None, None, True, None]
    assert [len(r.parameters.tools or ()) for r in seen] == [1, 1, 2, 1, 1]


async def test_a_text_only_model_fails_every_check() -> None:
    model = FunctionChatModel(lambda messages, request: "I cannot use tools.")

    report = await probe_capabilities(model)

    assert statuses(report) == dict.fromkeys(ALL_CHECKS, "failed")
    assert "answered with text" in report.checks[0].detail
    assert "I cannot use tools." in report.checks[0].detail
    assert report.supports("tool_calls") is False


async def test_a_rejected_tool_choice_fails_that_check_only() -> None:
    def refuses_required(messages: Sequence[ChatMessage], request: ChatRequest) -> AiMessage:
        if request.parameters.tool_choice == "required":
            raise ProviderError("tool_choice 'required' is not supported", provider="x",
                                status=400)
        return capable(messages, request)

    report = await probe_capabilities(FunctionChatModel(refuses_required),
                                      streaming_model=streaming_scripted())

    required = report.check("tool_choice_required")
    assert required is not None
    assert required.status == "failed"
    assert "rejected by the provider (HTTP 400)" in required.detail
    assert statuses(report) == {**dict.fromkeys(ALL_CHECKS, "passed"),
                                "tool_choice_required": "failed"}


async def test_a_server_error_is_an_error_not_a_verdict() -> None:
    def flaky_named(messages: Sequence[ChatMessage], request: ChatRequest) -> AiMessage:
        if isinstance(request.parameters.tool_choice, NamedToolChoice):
            raise ProviderError("overloaded", provider="x", status=529, retryable=True)
        return capable(messages, request)

    report = await probe_capabilities(FunctionChatModel(flaky_named),
                                      streaming_model=streaming_scripted())

    named = report.check("tool_choice_named")
    assert named is not None
    assert (named.status, report.supports("tool_choice_named")) == ("error", None)
    assert "HTTP 529" in named.detail
    assert report.supports("parallel_tool_calls") is True


async def test_an_ignored_named_choice_fails() -> None:
    def ignores_named(messages: Sequence[ChatMessage], request: ChatRequest) -> AiMessage:
        return AiMessage(tool_execution_requests=(_call("get_weather"),))

    report = await probe_capabilities(FunctionChatModel(ignores_named))

    named = report.check("tool_choice_named")
    assert named is not None
    assert named.status == "failed"
    assert "['get_weather']" in named.detail
    assert report.supports("parallel_tool_calls") is False
    assert report.supports("tool_calls") is True


async def test_invalid_arguments_fail_the_tool_call_check() -> None:
    def broken_json(messages: Sequence[ChatMessage], request: ChatRequest) -> AiMessage:
        return AiMessage(tool_execution_requests=(
            ToolExecutionRequest(id="c", name="get_weather", arguments="{city: Paris"),))

    report = await probe_capabilities(FunctionChatModel(broken_json))

    check = report.check("tool_calls")
    assert check is not None
    assert (check.status, "not a JSON object" in check.detail) == ("failed", True)


async def test_tool_calls_that_are_not_streamed_fail_the_streaming_check() -> None:
    report = await probe_capabilities(FunctionChatModel(capable))

    streaming = report.check("streaming_tool_calls")
    assert streaming is not None
    assert streaming.status == "failed"
    assert "only in the final response" in streaming.detail


async def test_the_streaming_factory_is_used_for_the_streaming_check() -> None:
    built: list[ScriptedChatModel] = []

    def factory() -> ScriptedChatModel:
        built.append(streaming_scripted())
        return built[-1]

    report = await probe_capabilities(FunctionChatModel(lambda m, r: "text"),
                                      streaming_model=factory)

    assert len(built) == 1
    assert report.supports("tool_calls") is False
    streaming = report.check("streaming_tool_calls")
    assert streaming is not None
    assert streaming.status == "passed"
    assert "with argument text" in streaming.detail


async def test_bugs_and_timeouts_become_errors() -> None:
    def broken(messages: Sequence[ChatMessage], request: ChatRequest) -> AiMessage:
        raise RuntimeError("adapter bug")

    async def silent(messages: Sequence[ChatMessage], request: ChatRequest) -> AiMessage:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    broken_report = await probe_capabilities(FunctionChatModel(broken))
    silent_report = await probe_capabilities(FunctionChatModel(silent), timeout=0.01)

    assert statuses(broken_report) == dict.fromkeys(ALL_CHECKS, "error")
    assert broken_report.checks[0].detail == "RuntimeError: adapter bug"
    assert statuses(silent_report) == dict.fromkeys(ALL_CHECKS, "error")
    assert silent_report.checks[0].detail == "no answer before the timeout"


async def test_the_report_is_json_with_a_timestamp_and_model_name() -> None:
    report = await probe_capabilities(FunctionChatModel(capable), model_name="my-model")

    data = json.loads(report.model_dump_json())

    assert data["model_name"] == "my-model"
    assert datetime.fromisoformat(data["checked_at"]).tzinfo is not None
    assert [c["name"] for c in data["checks"]] == ALL_CHECKS
    assert CapabilityReport.model_validate_json(report.model_dump_json()) == report


@pytest.mark.parametrize("stream", [False, True])
async def test_scripted_model_name_is_reported(stream: bool) -> None:
    model = ScriptedChatModel(
        [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "x"}}]}],
        stream=stream, model_name="scripted-demo")

    report = await probe_capabilities(model)

    assert report.model_name == "scripted-demo"
    assert report.supports("streaming_tool_calls") is stream
