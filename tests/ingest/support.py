"""Spans made by the real OpenTelemetry SDK and encoded by its OTLP encoder, as bodies to
post to the receiver: protobuf as the exporter sends it, or the OTLP JSON form (protobuf's
JSON mapping by json_format, with hex ids as OTLP's JSON has them)."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Callable, Sequence
from typing import Any

from django.contrib.auth.models import AbstractUser
from django.test import Client
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from tools_app.models import Run

PROTOBUF, JSON = "application/x-protobuf", "application/json"


def spans_of(build: Callable[[Tracer], None], service: str = "test-agent",
             ) -> list[ReadableSpan]:
    """The spans `build` makes with a tracer of the SDK, in the order they ended."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    build(provider.get_tracer("tests.ingest"))
    provider.shutdown()
    return list(exporter.get_finished_spans())


def protobuf(spans: Sequence[ReadableSpan]) -> bytes:
    return encode_spans(spans).SerializeToString()


def otlp_json(spans: Sequence[ReadableSpan]) -> bytes:
    data = json_format.MessageToDict(encode_spans(spans))
    return json.dumps(_hex_ids(data)).encode()


def _hex_ids(data: Any) -> Any:
    if isinstance(data, list):
        return [_hex_ids(item) for item in data]
    if not isinstance(data, dict):
        return data
    return {k: base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId")
            else _hex_ids(v) for k, v in data.items()}


def post(client: Client, token: str | None, body: bytes, content_type: str = PROTOBUF,
         *, gzipped: bool = False, **headers: str) -> Any:
    if gzipped:
        body, headers = gzip.compress(body), headers | {"Content-Encoding": "gzip"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return client.post("/v1/traces", data=body, content_type=content_type, headers=headers)


def answer(response: Any) -> ExportTraceServiceResponse:
    """The receiver's ExportTraceServiceResponse, read in the encoding it answered in."""
    message = ExportTraceServiceResponse()
    if response["Content-Type"] == JSON:
        json_format.Parse(response.content, message)
    else:
        message.ParseFromString(response.content)
    return message


def chat_span(tracer: Tracer, *, output: list[dict[str, Any]],
              inputs: list[dict[str, Any]] | None = None, **attributes: Any) -> None:
    """A `chat` span in the current GenAI conventions."""
    with tracer.start_as_current_span("chat fake-model") as span:
        span.set_attributes({"gen_ai.operation.name": "chat",
                             "gen_ai.request.model": "fake-model",
                             "gen_ai.input.messages": json.dumps(inputs or []),
                             "gen_ai.output.messages": json.dumps(output), **attributes})


def tool_span(tracer: Tracer, name: str, call_id: str, arguments: Any, result: Any,
              *, error: str | None = None) -> None:
    """An `execute_tool` span in the current GenAI conventions."""
    from opentelemetry.trace import Status, StatusCode

    with tracer.start_as_current_span(f"execute_tool {name}") as span:
        span.set_attributes({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                             "gen_ai.tool.call.id": call_id,
                             "gen_ai.tool.call.arguments": json.dumps(arguments)})
        if error is None:
            span.set_attribute("gen_ai.tool.call.result", json.dumps(result))
        else:
            span.set_attributes({"error.type": "ValueError"})
            span.set_status(Status(StatusCode.ERROR, error))


def call_part(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}


def assistant(*parts: dict[str, Any], finish: str = "tool_calls") -> list[dict[str, Any]]:
    return [{"role": "assistant", "parts": list(parts), "finish_reason": finish}]


def text(content: str) -> dict[str, Any]:
    return {"type": "text", "content": content}


def weather_agent(tracer: Tracer, *, tool_error: str | None = None) -> None:
    with tracer.start_as_current_span("invoke_agent weather") as agent:
        agent.set_attributes({"gen_ai.operation.name": "invoke_agent",
                              "gen_ai.agent.name": "weather"})
        chat_span(tracer, inputs=[{"role": "user", "parts": [text("Weather in Paris?")]}],
                  output=assistant(text("Checking."),
                                   call_part("call_1", "get_weather", {"city": "Paris"})),
                  **{"gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 5})
        tool_span(tracer, "get_weather", "call_1", {"city": "Paris"}, {"temp": 21},
                  error=tool_error)
        chat_span(tracer, inputs=[{"role": "tool", "parts": [
            {"type": "tool_call_response", "id": "call_1", "response": {"temp": 21}}]}],
            output=assistant(text("It is 21 degrees."), finish="stop"))


def run_of(user: AbstractUser) -> Run:
    [run] = Run.objects.filter(created_by=user)
    return run


def rows(run: Run) -> list[Any]:
    return [(r.status, r.finish_reason, r.ai_text, r.input_tokens,
             [(c.call_id, c.tool_name, c.arguments, c.state, c.result_text, c.is_error,
               c.error_message) for c in r.tool_calls.order_by("call_index")])
            for r in run.rounds.order_by("index")]


EXPECTED = [
    ("responded", "tool_execution", "Checking.", 12,
     [("call_1", "get_weather", {"city": "Paris"}, "succeeded", '{"temp": 21}', False, "")]),
    ("responded", "stop", "It is 21 degrees.", None, []),
]
