"""The OpenInference conventions, end to end: an openai SDK loop instrumented by
openinference-instrumentation-openai (LLM spans), its AGENT and TOOL spans written with
OpenInference's attribute names (openinference-semantic-conventions), exported by the
real SDK over OTLP/HTTP (protobuf) to the receiver. TOOL spans carry no call id here:
each goes to the round that ran before it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from openinference.instrumentation.openai import OpenAIInstrumentor
from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode, Tracer

from tests.ingest.conftest import Receiver
from tools_app.models import Run, RunStatus
from tools_app.tools.example_tools import convert_units, get_weather

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = [
    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Lima"}}]},
    {"tool_calls": [{"name": "convert_units",
                     "arguments": {"value": 18, "from_unit": "celsius", "to_unit": "kelvin"}}]},
    {"text": "Lima in kelvin: {last_result}"},
]
TOOLS: dict[str, Callable[..., Any]] = {"get_weather": get_weather,
                                        "convert_units": convert_units}
KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND


@pytest.fixture
def tracing(receiver: Receiver) -> Iterator[TracerProvider]:
    provider = TracerProvider(resource=Resource.create({"service.name": "travel-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
        endpoint=receiver.url, headers=receiver.headers)))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    yield provider
    instrumentor.uninstrument()
    provider.shutdown()


def agent_loop(base_url: str, tracer: Tracer) -> str:
    client = openai.OpenAI(base_url=base_url, api_key="sk-test")
    tools = [{"type": "function", "function": {"name": name, "description": name,
                                               "parameters": {"type": "object"}}}
             for name in TOOLS]
    messages: list[Any] = [{"role": "user", "content": "Weather in Lima, in kelvin?"}]
    with tracer.start_as_current_span("travel agent") as agent:
        agent.set_attributes({KIND: OpenInferenceSpanKindValues.AGENT.value,
                              SpanAttributes.AGENT_NAME: "travel-agent",
                              SpanAttributes.INPUT_VALUE: messages[0]["content"]})
        while True:
            message = client.chat.completions.create(
                model="gpt-4o-mini", messages=messages, tools=tools).choices[0].message
            if not message.tool_calls:
                return message.content or ""
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": run_tool(tracer, call)})


def run_tool(tracer: Tracer, call: Any) -> str:
    with tracer.start_as_current_span(call.function.name) as span:
        span.set_attributes({KIND: OpenInferenceSpanKindValues.TOOL.value,
                             SpanAttributes.TOOL_NAME: call.function.name,
                             SpanAttributes.INPUT_VALUE: call.function.arguments})
        result = json.dumps(TOOLS[call.function.name](**json.loads(call.function.arguments)))
        span.set_attribute(SpanAttributes.OUTPUT_VALUE, result)
        span.set_status(Status(StatusCode.OK))
    return result


def test_an_openinference_traced_loop_becomes_a_run(
        receiver: Receiver, tracing: TracerProvider,
        fake_provider: Callable[[list[dict[str, Any]]], str]) -> None:
    answer = agent_loop(fake_provider(SCRIPT), tracing.get_tracer("travel"))

    [run] = Run.objects.filter(created_by=receiver.user)
    kelvin = json.dumps(convert_units(value=18, from_unit="celsius", to_unit="kelvin"))
    assert answer == f"Lima in kelvin: {kelvin}"
    assert (run.status, run.title, run.final_text) == (RunStatus.SUCCEEDED, "travel-agent",
                                                       answer)
    rounds = [(r.finish_reason, r.input_tokens is not None,
               [(c.tool_name, c.call_id != "", c.arguments, c.state, c.result_text)
                for c in r.tool_calls.order_by("call_index")])
              for r in run.rounds.order_by("index")]
    assert rounds == [
        ("tool_execution", True, [("get_weather", True, {"city": "Lima"}, "succeeded",
                                   json.dumps(get_weather(city="Lima")))]),
        ("tool_execution", True, [("convert_units", True,
                                   {"value": 18, "from_unit": "celsius", "to_unit": "kelvin"},
                                   "succeeded", kelvin)]),
        ("stop", True, []),
    ]
    assert run.snapshot["imported"]["otlp"]["conventions"] == ["OpenInference"]
    assert {t["name"] for t in run.snapshot["tools"]} == set(TOOLS)
