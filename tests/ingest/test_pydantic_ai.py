"""A Pydantic AI agent with its built-in instrumentation (`Agent.instrument_all`, the
OpenTelemetry GenAI conventions) on the OpenAI Chat model against the fake provider,
tools that really run, exported by the real SDK over OTLP/HTTP to the receiver: one run
(its conversation id) with the agent's rounds, calls, arguments and results."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from pydantic_ai import Agent, InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.ingest.conftest import Receiver
from tools_app.models import Run, RunStatus
from tools_app.tools import example_tools

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = [
    {"text": "Let me check.",
     "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "21+4"}}]},
    {"text": "Done: {last_result}"},
]


@pytest.fixture
def tracing(receiver: Receiver) -> Iterator[TracerProvider]:
    provider = TracerProvider(resource=Resource.create({"service.name": "pydantic-ai-app"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
        endpoint=receiver.url, headers=receiver.headers)))
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
    yield provider
    Agent.instrument_all(False)
    provider.shutdown()


def test_a_pydantic_ai_agent_becomes_a_run(
        receiver: Receiver, tracing: TracerProvider,
        fake_provider: Callable[[list[dict[str, Any]]], str]) -> None:
    model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(
        base_url=fake_provider(SCRIPT), api_key="sk-test"))
    agent = Agent(model, name="trip-planner", instructions="Plan trips with the tools.")

    @agent.tool_plain
    def get_weather(city: str) -> Any:
        """The weather of a city."""
        return example_tools.get_weather(city)

    @agent.tool_plain
    def calculator(expression: str) -> Any:
        """Evaluate arithmetic."""
        return example_tools.calculator(expression)

    result = agent.run_sync("Weather in Paris, and 21+4?")

    [run] = Run.objects.filter(created_by=receiver.user)
    assert (run.status, run.title, run.final_text) == (
        RunStatus.SUCCEEDED, "trip-planner", result.output)
    assert result.output == "Done: 25"
    assert [(r.finish_reason, r.ai_text,
             [(c.tool_name, c.arguments, c.state, c.result_text)
              for c in r.tool_calls.order_by("call_index")])
            for r in run.rounds.order_by("index")] == [
        ("tool_execution", "Let me check.",
         [("get_weather", {"city": "Paris"}, "succeeded",
           json.dumps(example_tools.get_weather("Paris"), separators=(",", ":")))]),
        ("tool_execution", None, [("calculator", {"expression": "21+4"}, "succeeded", "25")]),
        ("stop", "Done: 25", []),
    ]
    first = run.rounds.get(index=0)
    assert first.request_json["messages"][0] == {"role": "system",
                                                 "content": "Plan trips with the tools."}
    assert {t["name"] for t in run.snapshot["tools"]} == {"get_weather", "calculator"}
