"""An openai SDK tool loop, instrumented as opentelemetry-instrumentation-openai-v2's
docs say, its tools traced with opentelemetry-util-genai's handler (`execute_tool`
spans) inside an `invoke_agent` span, exported by the real SDK over OTLP/HTTP (gzip) to
the product's receiver: the run has the loop's rounds, calls, arguments and results,
and the debugger works on it (compare, export as a fixture, re-execute a call against
the registered tool)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from asgiref.sync import async_to_sync
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.util.genai.handler import TelemetryHandler

from tests.ingest.conftest import Receiver
from tools_app.engine import SystemMessage, UserMessage
from tools_app.models import Run, RunStatus
from tools_app.runs import tasks
from tools_app.runs.debugger.compare import compare_runs
from tools_app.runs.debugger.fork import ForkConfig, run_fork
from tools_app.runs.debugger.reexecution import ReexecutionRequest, request_reexecution
from tools_app.runs.debugger.run_files import export_run, import_fixture, load_fixture
from tools_app.runs.snapshot.model import snapshot_of
from tools_app.tools.example_tools import calculator, get_weather
from tools_app.tools.registry import sync_tools

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = [
    {"text": "Working it out.",
     "tool_calls": [{"name": "calculator", "arguments": {"expression": "(2+3)*4"}},
                    {"name": "get_weather", "arguments": {"city": "London"}}]},
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "20/8"}}]},
    {"text": "Twenty divided by eight is {last_result}."},
]
TOOLS = {"calculator": calculator, "get_weather": get_weather}
TOOL_DEFINITIONS = [
    {"type": "function", "function": {
        "name": "calculator", "description": "Evaluate arithmetic",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"]}}},
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}},
]


@pytest.fixture
def tracing(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> Iterator[TracerProvider]:
    """The SDK exporting each span as it ends (gzip), openai-v2 instrumenting the
    openai SDK with message content on the spans (the mode its docs name for the
    current conventions)."""
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    # The exporter configured as the README says, by its environment variables.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                       f"Authorization=Bearer%20{receiver.token}")
    provider = TracerProvider(resource=Resource.create({"service.name": "calculator-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
        compression=Compression.Gzip)))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    yield provider
    instrumentor.uninstrument()
    provider.shutdown()


def agent_loop(base_url: str, provider: TracerProvider) -> str:
    """The loop a user writes: ask, run the tools the model calls, send the results."""
    client = openai.OpenAI(base_url=base_url, api_key="sk-test")
    handler = TelemetryHandler(tracer_provider=provider)
    messages: list[Any] = [{"role": "system", "content": "You are a careful calculator."},
                           {"role": "user", "content": "What is (2+3)*4, then 20/8?"}]
    with handler.invoke_local_agent(agent_name="calculator-agent", request_model="gpt-4o"):
        while True:
            reply = client.chat.completions.create(model="gpt-4o", messages=messages,
                                                   tools=TOOL_DEFINITIONS)
            message = reply.choices[0].message
            if not message.tool_calls:
                return message.content or ""
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": run_tool(handler, call)})


def run_tool(handler: TelemetryHandler, call: Any) -> str:
    arguments = json.loads(call.function.arguments)
    with handler.tool(call.function.name, tool_call_id=call.id) as invocation:
        invocation.arguments = arguments
        result = json.dumps(TOOLS[call.function.name](**arguments))
        invocation.tool_result = result
    return result


def the_run(receiver: Receiver) -> Run:
    [run] = Run.objects.filter(created_by=receiver.user)
    return run


def rounds_of(run: Run) -> list[tuple[str, str | None, list[tuple[str, Any, str | None]]]]:
    return [(r.finish_reason, r.ai_text,
             [(c.tool_name, c.arguments, c.result_text)
              for c in r.tool_calls.order_by("call_index")])
            for r in run.rounds.order_by("index")]


def test_an_instrumented_openai_loop_becomes_a_run_with_its_rounds_and_calls(
        receiver: Receiver, tracing: TracerProvider,
        fake_provider: Callable[[list[dict[str, Any]]], str]) -> None:
    answer = agent_loop(fake_provider(SCRIPT), tracing)

    run = the_run(receiver)
    assert answer == "Twenty divided by eight is 2.5."
    assert (run.status, run.title, run.final_text) == (RunStatus.SUCCEEDED, "calculator-agent",
                                                       answer)
    assert rounds_of(run) == [
        ("tool_execution", "Working it out.",
         [("calculator", {"expression": "(2+3)*4"}, "20"),
          ("get_weather", {"city": "London"}, json.dumps(get_weather(city="London")))]),
        ("tool_execution", None, [("calculator", {"expression": "20/8"}, "2.5")]),
        ("stop", answer, []),
    ]
    first = run.rounds.get(index=0)
    assert first.request_json["messages"][:2] == [
        {"role": "system", "content": "You are a careful calculator."},
        {"role": "user", "content": "What is (2+3)*4, then 20/8?"}]
    assert first.input_tokens is not None
    assert first.latency_ms is not None
    assert run.tool_calls.filter(state="succeeded", duration_ms__isnull=False).count() == 3
    source = run.snapshot["imported"]
    assert (source["via"], source["otlp"]["service"]) == ("OTLP", "calculator-agent")
    assert source["otlp"]["sdk"].startswith("opentelemetry python")
    assert "OpenTelemetry GenAI" in source["otlp"]["conventions"]


def test_the_debugger_compares_exports_re_executes_and_forks_a_received_run(
        receiver: Receiver, tracing: TracerProvider, make_endpoint: Any,
        fake_provider: Callable[[list[dict[str, Any]]], str]) -> None:
    sync_tools(["tools_app.tools.example_tools"])
    agent_loop(fake_provider(SCRIPT), tracing)
    run = the_run(receiver)

    fixture = load_fixture(json.dumps(export_run(run)))
    copy = import_fixture(fixture, user=receiver.user)
    assert compare_runs(run, copy)["same_calls"] is True

    call = run.tool_calls.get(round__index=1)
    made = request_reexecution(run=run, call=call, user=receiver.user,
                               request=ReexecutionRequest({"expression": "21/8"}))
    async_to_sync(tasks.execute_reexecution.acall)(made.pk)
    made.refresh_from_db()
    assert (made.state, made.result_text) == ("succeeded", "2.625")

    forked = run_fork(run=run, user=receiver.user, round_number=3,
                      config=ForkConfig(endpoint=make_endpoint([{"text": "Forked."}],
                                                               name="registered")))
    assert (forked.status, forked.parent_id) == (RunStatus.QUEUED, run.pk)
    assert snapshot_of(forked).chat_messages()[:2] == [
        SystemMessage(text="You are a careful calculator."),
        UserMessage(text="What is (2+3)*4, then 20/8?")]
