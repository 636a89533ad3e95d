"""OTLP in: spans per second received into the embedded default (SQLite).

Traces of an agent in the GenAI conventions (an invoke_agent span, 3 chat spans with
their input and output messages and tokens, 3 execute_tool spans with arguments and
results: 7 spans), made by the OpenTelemetry SDK and encoded by its OTLP encoder, are
posted as protobuf in batches of 512 spans to POST /v1/traces through Django's test
client (middleware, token, view, decoding, storing, rebuilding the runs, events), on a
fresh SQLite file as the embedded server has it. Two deliveries:

- whole traces: each batch holds whole traces (what a BatchSpanProcessor sends for
  traces that end between two exports);
- split traces: each trace's spans spread over 4 consecutive batches, children before
  their parents, so each run is rebuilt 4 times as its spans come in.

Throughput = spans / the wall time of all batches, and spans / this process's CPU time
(what one core of its own would do); per-batch latency p50 / p95.
Run: python -m benchmarks.bench_otlp_ingest [--batches 20] [--database-url postgres://...]
Results: docs/benchmarks/otlp_ingest.md (PostgreSQL: otlp_ingest_postgres.md)
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import time
from typing import Any

from benchmarks.common import setup_django, summary, write_result

BATCH = 512
SPANS_PER_TRACE = 7
TARGET = 2000.0  # spans/s
TARGET_POSTGRES = 5000.0  # spans/s, on the scale-out configuration


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--database-url", default=None,
                        help="a PostgreSQL database to measure the scale-out store on "
                             "(migrated here; default: a fresh SQLite file)")
    args = parser.parse_args()
    os.environ["DEBUG"] = "0"
    os.environ["SECRET_KEY"] = secrets.token_urlsafe(40)
    os.environ["ALLOWED_HOSTS"] = "testserver"
    os.environ["AGENTFORGE_OTLP_RATE"] = "100000/m"
    setup_django(args.database_url)
    rows = [measure("whole traces", args.batches, split=1),
            measure("split traces (4 batches each)", args.batches, split=4)]
    postgres = bool(args.database_url)
    write_result("otlp_ingest_postgres" if postgres else "otlp_ingest",
                 report(rows, args.batches, postgres=postgres))


def measure(label: str, batches: int, *, split: int) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.test import Client

    from tools_app.web.api.tokens import create_token

    user = get_user_model().objects.create_user(f"bench-{split}")
    token = create_token(user, "bench")[1]
    bodies = _bodies(batches, split)
    client = Client()
    post(client, token, bodies[0])  # warm-up: imports, first queries
    latencies: list[float] = []
    cpu = time.process_time()
    started = time.perf_counter()
    for body in bodies[1:]:
        before = time.perf_counter()
        response = post(client, token, body)
        latencies.append((time.perf_counter() - before) * 1000)
        assert response.status_code == 200, response.content
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    spans = BATCH * (len(bodies) - 1)
    stats = summary(latencies)
    return {"label": label, "spans": spans, "rate": spans / elapsed, "cpu_rate": spans / cpu,
            "p50": stats["p50"], "p95": stats["p95"]}


def post(client: Any, token: str, body: bytes) -> Any:
    return client.post("/v1/traces", data=body, content_type="application/x-protobuf",
                        headers={"Authorization": f"Bearer {token}"})


def _bodies(batches: int, split: int) -> list[bytes]:
    """`batches` + 1 protobuf bodies of BATCH spans each (the first one a warm-up)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    spans = _spans(((batches + 1) * BATCH) // SPANS_PER_TRACE + split)
    ordered = _delivery(spans, split)
    return [encode_spans(ordered[i * BATCH:(i + 1) * BATCH]).SerializeToString()
            for i in range(batches + 1)]


def _delivery(spans: list[Any], split: int) -> list[Any]:
    """The spans in the order they are sent: trace after trace, or each trace's spans
    spread over `split` batches (children first)."""
    traces = [spans[i:i + SPANS_PER_TRACE] for i in range(0, len(spans), SPANS_PER_TRACE)]
    if split == 1:
        return spans
    # A group of traces whose parts fill a batch each: every trace's spans then come in
    # `split` consecutive batches (a smaller group would put all its parts in one).
    out: list[Any] = []
    group = max(1, BATCH // -(-SPANS_PER_TRACE // split))
    for start in range(0, len(traces), group):
        chunk = traces[start:start + group]
        for part in range(split):
            for trace in chunk:
                size = -(-len(trace) // split)
                out += trace[part * size:(part + 1) * size]
    return out


def _spans(traces: int) -> list[Any]:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    for number in range(traces):
        _agent(tracer, number)
    return list(exporter.get_finished_spans())


def _agent(tracer: Any, number: int) -> None:
    history: list[dict[str, Any]] = [
        {"role": "user", "parts": [{"type": "text", "content": f"Question {number}"}]}]
    with tracer.start_as_current_span("invoke_agent bench") as agent:
        agent.set_attributes({"gen_ai.operation.name": "invoke_agent",
                              "gen_ai.agent.name": "bench"})
        for step in range(3):
            call_id = f"call_{number}_{step}"
            answer = {"role": "assistant", "finish_reason": "tool_calls", "parts": [
                {"type": "text", "content": f"Looking up step {step}."},
                {"type": "tool_call", "id": call_id, "name": "lookup",
                 "arguments": {"query": f"item {number}-{step}", "limit": 10}}]}
            with tracer.start_as_current_span("chat fake") as chat:
                chat.set_attributes({
                    "gen_ai.operation.name": "chat", "gen_ai.request.model": "fake",
                    "gen_ai.usage.input_tokens": 120 + step, "gen_ai.usage.output_tokens": 30,
                    "gen_ai.input.messages": json.dumps(history),
                    "gen_ai.output.messages": json.dumps([answer])})
            result = json.dumps({"items": [f"result {i}" for i in range(10)]})
            with tracer.start_as_current_span("execute_tool lookup") as tool:
                tool.set_attributes({"gen_ai.operation.name": "execute_tool",
                                     "gen_ai.tool.name": "lookup",
                                     "gen_ai.tool.call.id": call_id,
                                     "gen_ai.tool.call.arguments": json.dumps(
                                         {"query": f"item {number}-{step}", "limit": 10}),
                                     "gen_ai.tool.call.result": result})
            history += [answer, {"role": "tool", "parts": [
                {"type": "tool_call_response", "id": call_id, "response": result}]}]


def report(rows: list[dict[str, Any]], batches: int, *, postgres: bool = False) -> str:
    load = os.getloadavg()[0]
    target = TARGET_POSTGRES if postgres else TARGET
    store = ("PostgreSQL (the scale-out store; one receiving process)" if postgres
             else "the embedded default (SQLite)")
    database = "a PostgreSQL database migrated for it" if postgres else "a fresh SQLite file"
    lines = [
        f"## OTLP in: spans per second into {store}", "",
        f"{batches} batches of {BATCH} spans after a warm-up batch, posted as protobuf to "
        "POST /v1/traces through Django's test client (one request at a time), on "
        f"{database}. Each trace is an agent of 3 chat and 3 execute_tool spans "
        "with messages, arguments and results (7 spans). 'split': each trace's spans "
        "spread over 4 batches, children first, so each run is made, then rebuilt 3 times. "
        f"2 cores shared with other work (load average {load:.1f} while measuring): the "
        "receiver is single-threaded here, so spans per CPU second (this process's "
        "user + system time) is what it does on a core of its own.", "",
        "| delivery | spans | spans/s (wall) | spans per CPU second | batch p50 | batch p95 "
        f"| target >= {target:,.0f}/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        verdict = "ok" if row["rate"] >= target else "MISSED"
        lines.append(f"| {row['label']} | {row['spans']} | {row['rate']:,.0f} | "
                     f"{row['cpu_rate']:,.0f} | {row['p50']:.0f} ms | {row['p95']:.0f} ms "
                     f"| {verdict} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
