"""The older GenAI forms (`gen_ai.prompt.N.*` / `gen_ai.completion.N.*` attributes,
`gen_ai.*.message` / `gen_ai.choice` span events) read like the current one, the system
prompt is read from `gen_ai.system_instructions` in either of its forms, and what a span
lacks stays missing (ingest/conventions.py, messages.py, assemble.py)."""

from __future__ import annotations

import json

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.trace import Tracer

from tests.ingest.support import spans_of
from tools_app.ingest import assemble
from tools_app.ingest.spans import Refusal, records


def plan_of(build: object) -> assemble.RunPlan:
    return assemble.plan(records(encode_spans(spans_of(build)), Refusal()))  # type: ignore[arg-type]


def summary(plan: assemble.RunPlan) -> list[object]:
    return [(r.status, r.finish_reason, r.facts.output.text if r.facts and r.facts.output
             else None, [(c.call_id, c.tool_name, c.arguments, c.state, c.result_text)
                         for c in r.calls]) for r in plan.rounds]


def legacy_attributes(tracer: Tracer) -> None:
    with tracer.start_as_current_span("openai.chat") as span:
        span.set_attributes({
            "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o",
            "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "Add 2 and 3",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.finish_reason": "tool_calls",
            "gen_ai.completion.0.tool_calls.0.id": "call_a",
            "gen_ai.completion.0.tool_calls.0.name": "add",
            "gen_ai.completion.0.tool_calls.0.arguments": '{"a": 2, "b": 3}'})
    with tracer.start_as_current_span("openai.chat") as span:
        span.set_attributes({
            "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "Add 2 and 3",
            "gen_ai.prompt.1.role": "assistant",
            "gen_ai.prompt.2.role": "tool", "gen_ai.prompt.2.tool_call_id": "call_a",
            "gen_ai.prompt.2.content": "5",
            "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "It is 5",
            "gen_ai.completion.0.finish_reason": "stop"})


def test_the_older_prompt_and_completion_attributes() -> None:
    plan = plan_of(legacy_attributes)

    assert summary(plan) == [
        ("responded", "tool_execution", None,
         [("call_a", "add", '{"a": 2, "b": 3}', "succeeded", "5")]),
        ("responded", "stop", "It is 5", []),
    ]
    assert plan.first_messages[0].text == "Add 2 and 3"
    assert plan.source["conventions"] == ["OpenTelemetry GenAI (prompt/completion attributes)"]


def span_events(tracer: Tracer) -> None:
    with tracer.start_as_current_span("chat gpt-4o") as span:
        span.set_attribute("gen_ai.operation.name", "chat")
        span.add_event("gen_ai.system.message", {"content": "Be brief."})
        span.add_event("gen_ai.user.message", {"content": "Weather in Oslo?"})
        span.add_event("gen_ai.choice", {"index": 0, "finish_reason": "tool_calls",
                                         "message": json.dumps({
                                             "role": "assistant", "tool_calls": [{
                                                 "id": "call_w", "type": "function",
                                                 "function": {"name": "weather",
                                                              "arguments": '{"city":"Oslo"}'}}]})})


def test_span_events_carry_the_messages() -> None:
    plan = plan_of(span_events)

    assert summary(plan) == [("responded", "tool_execution", None,
                              [("call_w", "weather", '{"city":"Oslo"}', "unknown_outcome", None)])]
    assert [(m.role, m.text) for m in plan.first_messages] == [
        ("system", "Be brief."), ("user", "Weather in Oslo?")]


def test_what_a_span_lacks_stays_missing() -> None:
    def bare(tracer: Tracer) -> None:
        with tracer.start_as_current_span("chat") as span:
            span.set_attribute("gen_ai.operation.name", "chat")
        with tracer.start_as_current_span("execute_tool") as span:
            span.set_attributes({"gen_ai.operation.name": "execute_tool",
                                 "gen_ai.tool.name": "lookup"})

    [round_] = plan_of(bare).rounds
    assert round_.facts is not None
    assert (round_.facts.inputs, round_.facts.output, round_.facts.model,
            round_.facts.input_tokens, round_.finish_reason) == (None, None, None, None, "")
    [call] = round_.calls
    assert (call.call_id, call.arguments, call.result_text, call.state) == (
        "", None, None, "succeeded")


INSTRUCTIONS = [{"type": "text", "content": "You translate English to French."},
                {"type": "text", "content": "Keep the names as they are."}]


def chat_with_instructions(tracer: Tracer, instructions: str | None = None) -> None:
    with tracer.start_as_current_span("chat gpt-4o") as span:
        span.set_attributes({
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps([
                {"role": "user", "parts": [{"type": "text", "content": "Hello, Anna"}]}]),
            "gen_ai.output.messages": json.dumps([
                {"role": "assistant", "finish_reason": "stop",
                 "parts": [{"type": "text", "content": "Bonjour, Anna"}]}])})
        if instructions is not None:
            span.set_attribute("gen_ai.system_instructions", instructions)


def structured(request: ExportTraceServiceRequest) -> ExportTraceServiceRequest:
    """The request with INSTRUCTIONS added as an attribute in structured form (an array
    of key-value lists), as exporters that can write one send it."""
    span = request.resource_spans[0].scope_spans[0].spans[0]
    attribute = span.attributes.add(key="gen_ai.system_instructions")
    for part in INSTRUCTIONS:
        fields = attribute.value.array_value.values.add().kvlist_value
        for key, value in part.items():
            fields.values.add(key=key).value.string_value = value
    return request


def test_the_system_instructions_are_the_first_message() -> None:
    expected = [("system", "You translate English to French.\nKeep the names as they are."),
                ("user", "Hello, Anna")]
    as_json = plan_of(lambda tracer: chat_with_instructions(tracer, json.dumps(INSTRUCTIONS)))
    as_values = assemble.plan(records(structured(encode_spans(spans_of(
        chat_with_instructions))), Refusal()))
    without = plan_of(chat_with_instructions)

    for plan in (as_json, as_values):
        assert [(m.role, m.text) for m in plan.first_messages] == expected
        assert summary(plan) == [("responded", "stop", "Bonjour, Anna", [])]
    assert [(m.role, m.text) for m in without.first_messages] == [("user", "Hello, Anna")]
