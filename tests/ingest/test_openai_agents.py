"""The OpenAI Agents SDK, instrumented as its OpenInference instrumentation's docs say
(openinference-instrumentation-openai-agents), its agent on the Chat Completions model
against the fake provider with tools that really run, exported by the real SDK over
OTLP/HTTP to the receiver: the run has the agent's rounds, calls, arguments and results,
and one call is executed again with edited arguments against the registered tool."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
from asgiref.sync import async_to_sync
from openai import AsyncOpenAI
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.ingest.conftest import Receiver
from tools_app.models import Run, RunStatus
from tools_app.runs import tasks
from tools_app.runs.debugger.reexecution import ReexecutionRequest, request_reexecution
from tools_app.tools import example_tools
from tools_app.tools.registry import sync_tools

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = [
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}},
                    {"name": "get_weather", "arguments": {"city": "Tokyo"}}]},
    {"text": "6*7 is {last_results}"},
]


@function_tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression."""
    return json.dumps(example_tools.calculator(expression))


@function_tool
def get_weather(city: str) -> str:
    """The weather of a city."""
    return json.dumps(example_tools.get_weather(city))


@pytest.fixture
def tracing(receiver: Receiver) -> Iterator[TracerProvider]:
    provider = TracerProvider(resource=Resource.create({"service.name": "agents-sdk-app"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
        endpoint=receiver.url, headers=receiver.headers)))
    instrumentor = OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    yield provider
    instrumentor.uninstrument()
    provider.shutdown()


def test_an_openai_agents_sdk_agent_becomes_a_run(
        receiver: Receiver, tracing: TracerProvider,
        fake_provider: Callable[[list[dict[str, Any]]], str]) -> None:
    sync_tools(["tools_app.tools.example_tools"])
    client = AsyncOpenAI(base_url=fake_provider(SCRIPT), api_key="sk-test")
    agent = Agent(name="helper", instructions="Use the tools.",
                  tools=[calculator, get_weather],
                  model=OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client))

    result = asyncio.run(Runner.run(agent, "What is 6*7, and the weather in Tokyo?"))

    [run] = Run.objects.filter(created_by=receiver.user)
    assert run.status == RunStatus.SUCCEEDED
    assert run.final_text == result.final_output
    weather = json.dumps(example_tools.get_weather("Tokyo"))
    assert [[(c.tool_name, c.arguments, c.state, c.result_text)
             for c in r.tool_calls.order_by("call_index")]
            for r in run.rounds.order_by("index")] == [
        [("calculator", {"expression": "6*7"}, "succeeded", "42"),
         ("get_weather", {"city": "Tokyo"}, "succeeded", weather)],
        [],
    ]
    assert run.snapshot["imported"]["otlp"]["service"] == "agents-sdk-app"

    call = run.tool_calls.get(tool_name="calculator")
    made = request_reexecution(run=run, call=call, user=receiver.user,
                               request=ReexecutionRequest({"expression": "6*8"}))
    async_to_sync(tasks.execute_reexecution.acall)(made.pk)
    made.refresh_from_db()
    assert (made.state, made.result_text) == ("succeeded", "48")
