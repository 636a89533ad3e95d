"""Capability probe: protocol support is not model support (seed section 1.5.3).

An endpoint that speaks a wire format may still, for the model behind it, ignore tools,
reject tool_choice="required" or a named tool, never return parallel calls, or send tool
calls only in the final chunk of a stream. A few tiny requests find out:

    report = await probe_capabilities(model, streaming_model=lambda: streaming_variant)
    report.supports("parallel_tool_calls")  # True / False
    report.model_dump_json()                 # for storage or the UI

Each check is independent: a failure or a ProviderError in one is recorded and the
next check still runs. Only the ChatModel protocol and engine types are used, so any
provider (and any test double) can be probed.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from .errors import ProviderError
from .events import PartialToolCall, bind_emitter, reset_emitter
from .messages import (
    ChatRequest,
    ChatRequestParameters,
    ChatResponse,
    NamedToolChoice,
    ToolChoice,
    ToolExecutionRequest,
    UserMessage,
)
from .providers.base import ChatModel
from .spec import ToolSpecification

CheckName = Literal[
    "tool_calls",
    "tool_choice_required",
    "tool_choice_named",
    "parallel_tool_calls",
    "streaming_tool_calls",
]
CheckStatus = Literal["passed", "failed", "error"]

# A refusal of the request itself (rather than a broken endpoint) answers the question:
# the feature is not supported. Auth, rate-limit, server and network errors do not.
_REJECTION_STATUSES = frozenset({400, 422})
_MAX_OUTPUT_TOKENS = 256

WEATHER_TOOL = ToolSpecification(
    name="get_weather",
    description="Get the current weather for one city.",
    parameters={"type": "object", "properties": {"city": {"type": "string",
                                                          "description": "City name"}},
                "required": ["city"]},
)
TIME_TOOL = ToolSpecification(
    name="get_time",
    description="Get the current local time in one city.",
    parameters={"type": "object", "properties": {"city": {"type": "string",
                                                          "description": "City name"}},
                "required": ["city"]},
)


class CheckResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: CheckName
    status: CheckStatus
    detail: str
    latency_ms: float | None = None


class CapabilityReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    model_name: str
    provider: str | None = None
    checked_at: datetime
    checks: tuple[CheckResult, ...] = Field(default_factory=tuple)

    def check(self, name: CheckName) -> CheckResult | None:
        return next((c for c in self.checks if c.name == name), None)

    def supports(self, name: CheckName) -> bool | None:
        """True if the check passed, False if it failed, None if it errored or was not run."""
        result = self.check(name)
        if result is None or result.status == "error":
            return None
        return result.status == "passed"


ModelSource = ChatModel | Callable[[], ChatModel]


async def probe_capabilities(
    model: ChatModel,
    *,
    streaming_model: ModelSource | None = None,
    model_name: str | None = None,
    timeout: float = 60.0,
) -> CapabilityReport:
    """Run every check against `model` (the streaming check against `streaming_model`,
    a model or a factory for one, when given; else against `model` itself)."""
    # The factory is called inside the streaming check, so a factory that fails is
    # recorded as that check's error instead of aborting the whole probe.
    streamer: ModelSource = streaming_model if streaming_model is not None else model
    runs: list[tuple[CheckName, Callable[[], Awaitable[tuple[CheckStatus, str]]]]] = [
        ("tool_calls", lambda: _check_tool_calls(model, timeout)),
        ("tool_choice_required", lambda: _check_required(model, timeout)),
        ("tool_choice_named", lambda: _check_named(model, timeout)),
        ("parallel_tool_calls", lambda: _check_parallel(model, timeout)),
        ("streaming_tool_calls", lambda: _check_streaming(_resolve(streamer), timeout)),
    ]
    checks = [await _run_check(name, check) for name, check in runs]
    return CapabilityReport(
        model_name=model_name or _name_of(model),
        provider=_provider_of(model),
        checked_at=datetime.now(UTC),
        checks=tuple(checks),
    )


def unstarted_report(model_name: str, exc: Exception) -> CapabilityReport:
    """The report of a probe that could not start (no model to ask, say a missing
    key): every check an error saying why, so a reader learns the probe ended."""
    _, detail = _classify(exc)
    return CapabilityReport(
        model_name=model_name, checked_at=datetime.now(UTC),
        checks=tuple(CheckResult(name=name, status="error",
                                 detail=f"the probe could not start: {detail}")
                     for name in get_args(CheckName)))


def _resolve(source: ModelSource) -> ChatModel:
    if isinstance(source, ChatModel):
        return source
    return source()


async def _run_check(
    name: CheckName, check: Callable[[], Awaitable[tuple[CheckStatus, str]]]
) -> CheckResult:
    started = time.perf_counter()
    try:
        status, detail = await check()
    except Exception as exc:
        # Any failure (a ProviderError, a timeout, a bug in an adapter) is this check's
        # result; the next check still runs. Cancellation is not an Exception and stops all.
        status, detail = _classify(exc)
    latency_ms = round((time.perf_counter() - started) * 1000, 3)
    return CheckResult(name=name, status=status, detail=detail, latency_ms=latency_ms)


def _classify(exc: Exception) -> tuple[CheckStatus, str]:
    if isinstance(exc, ProviderError):
        if exc.status in _REJECTION_STATUSES:
            return "failed", f"rejected by the provider (HTTP {exc.status}): {exc}"
        where = f"HTTP {exc.status}" if exc.status is not None else "no HTTP status"
        return "error", f"provider error ({where}): {exc}"
    if isinstance(exc, TimeoutError):
        return "error", "no answer before the timeout"
    return "error", f"{type(exc).__name__}: {exc}"


def _request(prompt: str, tools: tuple[ToolSpecification, ...], *,
             tool_choice: ToolChoice | None = None,
             parallel: bool | None = None) -> ChatRequest:
    return ChatRequest(
        messages=(UserMessage(text=prompt),),
        parameters=ChatRequestParameters(
            tools=tools,
            tool_choice=tool_choice,
            parallel_tool_calls=parallel,
            max_output_tokens=_MAX_OUTPUT_TOKENS,
            temperature=0.0,
        ),
    )


async def _ask(model: ChatModel, request: ChatRequest, timeout: float) -> ChatResponse:
    async with asyncio.timeout(timeout):
        return await model.chat(request)


def _calls(response: ChatResponse) -> tuple[ToolExecutionRequest, ...]:
    return response.ai_message.tool_execution_requests


def _has_object_arguments(call: ToolExecutionRequest) -> bool:
    try:
        return isinstance(json.loads(call.arguments or "{}"), dict)
    except ValueError:
        return False


def _no_call_detail(response: ChatResponse) -> str:
    text = (response.ai_message.text or "").strip().replace("\n", " ")
    return f"answered with text instead of a tool call: {text[:120]!r}"


async def _check_tool_calls(model: ChatModel, timeout: float) -> tuple[CheckStatus, str]:
    request = _request("What is the weather in Paris right now? Use the get_weather tool.",
                       (WEATHER_TOOL,))
    response = await _ask(model, request, timeout)
    calls = _calls(response)
    if not calls:
        return "failed", "tools were offered but the model " + _no_call_detail(response)
    call = calls[0]
    if call.name != WEATHER_TOOL.name:
        return "failed", f"called an undeclared tool {call.name!r}"
    if not _has_object_arguments(call):
        return "failed", f"arguments are not a JSON object: {call.arguments[:120]!r}"
    return "passed", f"called {call.name} with {call.arguments[:120]}"


async def _check_required(model: ChatModel, timeout: float) -> tuple[CheckStatus, str]:
    # A prompt that needs no tool: only tool_choice="required" makes the model call one.
    request = _request("Say hello.", (WEATHER_TOOL,), tool_choice="required")
    response = await _ask(model, request, timeout)
    if not _calls(response):
        return "failed", "tool_choice=required was accepted but the model " + _no_call_detail(
            response)
    return "passed", f"called {_calls(response)[0].name} although the prompt needed no tool"


async def _check_named(model: ChatModel, timeout: float) -> tuple[CheckStatus, str]:
    # The prompt asks for the weather; the named choice must win and force get_time.
    request = _request("What is the weather in Paris?", (WEATHER_TOOL, TIME_TOOL),
                       tool_choice=NamedToolChoice(name=TIME_TOOL.name))
    response = await _ask(model, request, timeout)
    names = [call.name for call in _calls(response)]
    if not names:
        return "failed", "a named tool_choice was accepted but the model " + _no_call_detail(
            response)
    if set(names) != {TIME_TOOL.name}:
        return "failed", f"asked for {TIME_TOOL.name} only, got {names}"
    return "passed", f"called {TIME_TOOL.name} as named, not the tool the prompt suggests"


async def _check_parallel(model: ChatModel, timeout: float) -> tuple[CheckStatus, str]:
    request = _request(
        "What is the weather in Paris and in Tokyo? These are two independent lookups: "
        "call get_weather twice in this single reply, once per city, in parallel.",
        (WEATHER_TOOL,), parallel=True)
    calls = _calls(await _ask(model, request, timeout))
    if len(calls) >= 2:
        return "passed", f"{len(calls)} tool calls in one reply"
    if calls:
        return "failed", "asked for two independent lookups, got one call per reply"
    return "failed", "asked for two independent lookups, got no tool call"


@dataclass
class _Fragments:
    tool_call_events: int = 0
    argument_fragments: int = 0

    async def __call__(self, event: Any) -> None:
        if isinstance(event, PartialToolCall):
            self.tool_call_events += 1
            self.argument_fragments += bool(event.arguments_delta)


async def _check_streaming(model: ChatModel, timeout: float) -> tuple[CheckStatus, str]:
    request = _request("What is the weather in Paris right now? Use the get_weather tool.",
                       (WEATHER_TOOL,))
    seen = _Fragments()
    token = bind_emitter(seen)
    try:
        calls = _calls(await _ask(model, request, timeout))
    finally:
        reset_emitter(token)
    if not calls:
        return "failed", "no tool call came back, so no fragments could be observed"
    if seen.tool_call_events == 0:
        return "failed", "the tool call arrived only in the final response, not streamed"
    return "passed", (f"{seen.tool_call_events} tool-call fragments streamed "
                      f"({seen.argument_fragments} with argument text)")


def _name_of(model: ChatModel) -> str:
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    return str(name) if name else type(model).__name__


def _provider_of(model: ChatModel) -> str | None:
    provider = getattr(model, "provider", None)
    return str(provider) if provider else None
