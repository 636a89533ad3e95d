"""End to end: ToolService + the real wire adapters + the fake server on loopback.

Every provider, streaming and not: several rounds with parallel calls, the no-script
rehearsal mode, retries driven by the server's Retry-After, and the faults that must
stop a run without executing a partial tool call. Also the capability probe through
the adapters.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import pytest

from tests.providers.support import validate_responses_body
from tools_app.engine import (
    ChatModel,
    ProviderError,
    ToolService,
    UserMessage,
    tool,
)
from tools_app.engine.events import PartialToolCall, ProviderAttempt
from tools_app.engine.probe import probe_capabilities
from tools_app.engine.providers import chat_model_class
from tools_app.engine.providers.http.retry import RetryPolicy
from tools_app.fake_llm import BackgroundServer

from .support import recorded, set_script

PROVIDERS = ["openai", "openai_responses", "anthropic", "gemini"]
API_KEY = "sk-e2e-canary-secret-42"
# No real waiting in tests: backoff is tiny; Retry-After values come from the scripts.
FAST_RETRY = RetryPolicy(max_retries=2, initial_delay=0.001, max_delay=0.001)


@pytest.fixture(autouse=True)
def strict_and_nothing_refused(fake: httpx.Client) -> Iterator[None]:
    """Every request the adapters send here is one the real APIs accept: the server is
    strict (the default) and refuses nothing; a Responses API body also passes the openai
    SDK's request types."""
    assert fake.get("/_fake/settings").json() == {"strict": True}
    yield
    log = recorded(fake)
    refused = [r for r in log if r["outcome"] == "rejected"]
    assert refused == [], [r["error"] for r in refused]
    for request in log:
        if request["provider"] == "openai_responses":
            validate_responses_body(request["body"])


class Travel:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    @tool(description="Current weather in one city")
    async def get_weather(self, city: str) -> str:
        self.calls.append(("get_weather", city))
        return f"Sunny in {city}"

    @tool(description="Local time in a zone")
    def get_time(self, zone: Literal["UTC", "CET"]) -> str:
        self.calls.append(("get_time", zone))
        return f"12:00 {zone}"


@dataclass
class Events:
    items: list[Any] = field(default_factory=list)

    def __call__(self, event: Any) -> None:
        self.items.append(event)

    def of(self, kind: type[Any]) -> list[Any]:
        return [e for e in self.items if isinstance(e, kind)]


def make_model(server: BackgroundServer, provider: str, model: str, *, stream: bool,
               retry: RetryPolicy = FAST_RETRY) -> ChatModel:
    cls = chat_model_class(provider)
    built: ChatModel = cls(base_url=server.base_urls()[provider], model=model, api_key=API_KEY,
                           stream=stream, retry=retry)
    return built


THREE_ROUNDS = {"steps": [
    {"text": "Looking these up.",
     "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}},
                    {"name": "get_weather", "arguments": {"city": "Lima"}},
                    {"name": "get_time", "arguments": {"zone": "CET"}}]},
    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
    {"text": "Summary: {last_results}"},
]}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_several_rounds_with_parallel_calls(
    fake: httpx.Client, shared_server: BackgroundServer, provider: str, stream: bool,
) -> None:
    set_script(fake, THREE_ROUNDS)
    travel, events = Travel(), Events()
    service = ToolService().tools(travel)

    result = await service.chat(make_model(shared_server, provider, "e2e", stream=stream),
                                [UserMessage(text="Plan my trip")], observers=[events])

    assert result.final_response.ai_message.text == "Summary: Sunny in Oslo"
    assert travel.calls == [("get_weather", "Paris"), ("get_weather", "Lima"),
                            ("get_time", "CET"), ("get_weather", "Oslo")]
    assert len(result.tool_executions) == 4
    log = recorded(fake)
    assert [r["step"] for r in log] == [0, 1, 2]
    assert all(r["stream"] is stream for r in log)
    assert API_KEY not in json.dumps(log)
    assert _results_sent(provider, log[1]["body"]) == ["Sunny in Paris", "Sunny in Lima",
                                                      "12:00 CET"]
    fragments = events.of(PartialToolCall)
    assert bool(fragments) is stream


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_rehearsal_without_a_script(
    fake: httpx.Client, shared_server: BackgroundServer, provider: str, stream: bool,
) -> None:
    travel = Travel()
    service = ToolService().tools(travel)

    result = await service.chat(make_model(shared_server, provider, "fake-k2-p2", stream=stream),
                                [UserMessage(text="What is the weather?")])

    assert travel.calls == [("get_weather", "city 1"), ("get_weather", "city 2")] * 2
    assert result.final_response.ai_message.text == (
        'The tools returned: "Sunny in city 1"; "Sunny in city 2".')


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_retry_after_from_the_server_drives_the_retries(
    fake: httpx.Client, shared_server: BackgroundServer, provider: str,
) -> None:
    set_script(fake, {"steps": [
        {"faults": [{"kind": "status", "status": 429, "retry_after_ms": 7},
                    {"kind": "reset"}],
         "tool_calls": [{"name": "get_time", "arguments": {"zone": "UTC"}}]},
        {"text": "It is {last_result}"},
    ]})
    events = Events()

    result = await ToolService().tools(Travel()).chat(
        make_model(shared_server, provider, "retry", stream=False),
        [UserMessage(text="time?")], observers=[events])

    assert result.final_response.ai_message.text == "It is 12:00 UTC"
    attempts = events.of(ProviderAttempt)
    assert [(a.status, a.retryable) for a in attempts] == [(429, True), (None, True)]
    assert attempts[0].wait_s == pytest.approx(0.007)
    assert [r["outcome"] for r in recorded(fake)] == [
        "fault:status", "fault:reset", "reply", "reply"]


@pytest.mark.parametrize(
    ("provider", "fault"),
    [
        ("openai", {"kind": "stream_error", "after_events": 3}),
        ("anthropic", {"kind": "stream_error", "after_events": 5,
                       "error_type": "overloaded_error", "message": "Overloaded"}),
        ("gemini", {"kind": "stream_error", "after_events": 0, "status": 503}),
        ("openai_responses", {"kind": "stream_error", "after_events": 6}),
        ("openai_responses", {"kind": "cut", "after_bytes": 1500}),
        ("openai", {"kind": "cut", "after_bytes": 400}),
        ("anthropic", {"kind": "cut", "after_bytes": 700}),
        ("gemini", {"kind": "cut", "after_bytes": 60}),
    ],
    ids=lambda value: value if isinstance(value, str) else value["kind"],
)
async def test_broken_streams_stop_the_run_without_executing_partial_calls(
    fake: httpx.Client, shared_server: BackgroundServer, provider: str, fault: dict[str, Any],
) -> None:
    set_script(fake, {"steps": [{
        "tool_calls": [{"name": "get_weather", "arguments": {"city": "Somewhere far away"}}],
        "faults": [{**fault, "times": None}]}]})
    travel = Travel()

    with pytest.raises(ProviderError):
        await ToolService().tools(travel).chat(
            make_model(shared_server, provider, "broken", stream=True),
            [UserMessage(text="weather?")])

    assert travel.calls == []
    # A stream that broke after its first byte is not retried.
    assert len(recorded(fake)) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_garbage_body_is_a_provider_error(
    fake: httpx.Client, shared_server: BackgroundServer, provider: str,
) -> None:
    set_script(fake, {"steps": [{"faults": [{"kind": "garbage", "times": None}]}]})

    with pytest.raises(ProviderError):
        await ToolService().tools(Travel()).chat(
            make_model(shared_server, provider, "garbage", stream=False),
            [UserMessage(text="weather?")])


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_probe_through_the_adapters(
    fake: httpx.Client, shared_server: BackgroundServer, provider: str,
) -> None:
    parallel = await probe_capabilities(
        make_model(shared_server, provider, "fake-k1-p2", stream=False),
        streaming_model=lambda: make_model(shared_server, provider, "fake-k1-p2", stream=True))
    single = await probe_capabilities(
        make_model(shared_server, provider, "fake-k1-p1", stream=False))

    assert {c.name: c.status for c in parallel.checks} == {
        "tool_calls": "passed", "tool_choice_required": "passed",
        "tool_choice_named": "passed", "parallel_tool_calls": "passed",
        "streaming_tool_calls": "passed"}
    assert parallel.model_name == "fake-k1-p2"
    assert parallel.provider == provider
    assert single.supports("parallel_tool_calls") is False
    assert single.supports("streaming_tool_calls") is False
    assert single.supports("tool_choice_named") is True


def _results_sent(provider: str, body: dict[str, Any]) -> list[str]:
    """The tool results a provider request carries, in order, with ids paired."""
    if provider == "openai":
        return [m["content"] for m in body["messages"] if m["role"] == "tool"]
    if provider == "openai_responses":
        return [i["output"] for i in body["input"] if i.get("type") == "function_call_output"]
    if provider == "anthropic":
        blocks = body["messages"][-1]["content"]
        return [_anthropic_text(b["content"]) for b in blocks if b["type"] == "tool_result"]
    parts = body["contents"][-1]["parts"]
    responses = [p.get("functionResponse") or p.get("function_response") for p in parts]
    return [_gemini_text(r["response"]) for r in responses if r]


def _anthropic_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content)


def _gemini_text(response: dict[str, Any]) -> str:
    (value,) = response.values()
    return str(value)
