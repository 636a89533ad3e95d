"""A LangChain tool loop (ChatOpenAI with bound tools, the tools invoked with the
model's tool calls, the loop itself a runnable), instrumented by
openinference-instrumentation-langchain, against the fake provider with tools that really
run, exported by the real SDK over OTLP/HTTP to the receiver: one run with the loop's
rounds, calls, arguments and results (a tool's result read out of the ToolMessage the
instrumentation writes as its output)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from pydantic import SecretStr

from tests.ingest.conftest import Receiver
from tools_app.models import Run, RunStatus
from tools_app.tools import example_tools

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = [
    {"tool_calls": [{"name": "convert_units",
                     "arguments": {"value": 10, "from_unit": "km", "to_unit": "mi"}}]},
    {"text": "10 km is {last_result}"},
]


@tool
def convert_units(value: float, from_unit: str, to_unit: str) -> str:
    """Convert a value between units."""
    return json.dumps(example_tools.convert_units(value, from_unit, to_unit))


@pytest.fixture
def tracing(receiver: Receiver) -> Iterator[TracerProvider]:
    provider = TracerProvider(resource=Resource.create({"service.name": "langchain-app"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
        endpoint=receiver.url, headers=receiver.headers)))
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    yield provider
    instrumentor.uninstrument()
    provider.shutdown()


def test_a_langchain_tool_loop_becomes_a_run(
        receiver: Receiver, tracing: TracerProvider,
        fake_provider: Callable[[list[dict[str, Any]]], str]) -> None:
    model = ChatOpenAI(model="gpt-4o", base_url=fake_provider(SCRIPT),
                       api_key=SecretStr("sk-test")).bind_tools([convert_units])

    def agent_loop(question: str) -> Any:
        messages: list[BaseMessage] = [HumanMessage(question)]
        while True:
            reply = model.invoke(messages)
            messages.append(reply)
            if not reply.tool_calls:  # type: ignore[attr-defined]
                return reply.content
            for call in reply.tool_calls:  # type: ignore[attr-defined]
                messages.append(convert_units.invoke(call))

    answer = RunnableLambda(agent_loop).invoke("How many miles is 10 km?")

    [run] = Run.objects.filter(created_by=receiver.user)
    miles = json.dumps(example_tools.convert_units(10, "km", "mi"))
    assert answer == f"10 km is {miles}"
    assert (run.status, run.title, run.final_text) == (RunStatus.SUCCEEDED, "agent_loop",
                                                       answer)
    assert [(r.finish_reason,
             [(c.tool_name, c.call_id != "", c.arguments, c.state, c.result_text)
              for c in r.tool_calls.order_by("call_index")])
            for r in run.rounds.order_by("index")] == [
        ("tool_execution", [("convert_units", True,
                             {"value": 10, "from_unit": "km", "to_unit": "mi"},
                             "succeeded", miles)]),
        ("stop", []),
    ]
