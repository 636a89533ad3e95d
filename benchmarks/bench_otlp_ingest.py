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

And one long trace (in process only): an agent of LONG_ROUNDS rounds whose spans are
posted a round at a time, as an exporter sends a long agent's spans while it runs; each
chat span carries the conversation so far, as the GenAI conventions have it. What one
request costs as the run grows, with this process's span cache and without it (as when
each request lands on another process).

Throughput = spans / the wall time of all batches, and spans / this process's CPU time
(what one core of its own would do); per-batch latency p50 / p95.

Scale-out (`--servers N`, with a PostgreSQL `--database-url` and `--redis-url`): the
configuration as it is meant to run, N daphne processes serving the product on the same
database and Redis, the batches posted to them round-robin over loopback HTTP
(`--in-flight` at a time), so a split trace's batches land on different processes.
Throughput = spans / the wall time of all batches, and spans / the servers' CPU time
(all N processes'); the database's and Redis's CPU time is reported beside it.

Run: python -m benchmarks.bench_otlp_ingest [--batches 20] [--database-url postgres://...]
     [--servers N --redis-url redis://... [--in-flight M]]
Results: docs/benchmarks/otlp_ingest.md (PostgreSQL: otlp_ingest_postgres.md; with
--servers: otlp_ingest_scaleout.md)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.common import ROOT, setup_django, summary, write_result
from benchmarks.processes import DAPHNE, base_env, cpu_seconds, free_port, services_cpu, stop

BATCH = 512
SPANS_PER_TRACE = 7
LONG_ROUNDS = 200
LONG_STRETCHES = (0, 90, 190)  # the first round of each stretch of 10 reported
TARGET = 2000.0  # spans/s
TARGET_POSTGRES = 5000.0  # spans/s, on the scale-out configuration
RATE = "100000/m"  # the receiver's per-user request rate: never the limit here
START_TIMEOUT = 60.0  # s, for the servers to answer
POST_TIMEOUT = 120.0  # s, for one batch's answer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--database-url", default=None,
                        help="a PostgreSQL database to measure the scale-out store on "
                             "(migrated here; default: a fresh SQLite file)")
    parser.add_argument("--servers", type=int, default=0,
                        help="post to this many daphne processes on --database-url "
                             "(round-robin), not through the test client in this process")
    parser.add_argument("--redis-url", default=None,
                        help="with --servers: the Redis the servers share (channel layer, "
                             "cache), as the scale-out configuration has it")
    parser.add_argument("--in-flight", type=int, default=0,
                        help="with --servers: batches posted at once (default: 2 a server)")
    args = parser.parse_args()
    if args.servers and not (args.database_url or "").startswith("postgres"):
        parser.error("--servers needs a PostgreSQL --database-url (the scale-out store)")
    os.environ["AGENTFORGE_OTLP_RATE"] = RATE
    setup_django(args.database_url)
    if args.servers:
        scale_out(args)
        return
    from tools_app.runs.loops.process import freeze_startup_objects

    freeze_startup_objects()  # as the server that receives does once started (asgi.py)
    rows = [measure("whole traces", args.batches, split=1),
            measure("split traces (4 batches each)", args.batches, split=4)]
    long_rows = [measure_long(cached=True), measure_long(cached=False)]
    postgres = bool(args.database_url)
    write_result("otlp_ingest_postgres" if postgres else "otlp_ingest",
                 report(rows, args.batches, postgres=postgres) + "\n\n"
                 + report_long(long_rows))


def measure(label: str, batches: int, *, split: int) -> dict[str, Any]:
    from django.test import Client

    token = _token(f"bench-{split}")
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


def measure_long(*, cached: bool) -> dict[str, Any]:
    """The long trace posted a round a request (its root last); per-request ms by
    stretch of rounds. `cached=False`: the span cache emptied before each request."""
    from django.test import Client
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from tools_app.ingest import span_cache

    token = _token(f"bench-long-{int(cached)}")
    spans = _long_trace(LONG_ROUNDS)
    rounds, root = [spans[i:i + 2] for i in range(0, len(spans) - 1, 2)], spans[-1:]
    bodies = [encode_spans(part).SerializeToString() for part in [*rounds, root]]
    client = Client()
    latencies: list[float] = []
    for body in bodies:
        if not cached:
            span_cache.spans.clear()
        before = time.perf_counter()
        response = post(client, token, body)
        latencies.append((time.perf_counter() - before) * 1000)
        assert response.status_code == 200, response.content
    stretches = {f"rounds {first + 1}-{first + 10}": summary(latencies[first:first + 10])
                 for first in LONG_STRETCHES}
    return {"label": "with this process's span cache" if cached
            else "no span cache (each request on another process)",
            "stretches": stretches, "total_s": sum(latencies) / 1000}


def _long_trace(rounds: int) -> list[Any]:
    """The long agent's spans in the order they end: chat, tool, ..., the agent."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench-long"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _agent(provider.get_tracer("bench"), 0, steps=rounds)
    return list(exporter.get_finished_spans())


def _token(name: str) -> str:
    """An API token of a new user (named apart from earlier runs on the same database)."""
    from django.contrib.auth import get_user_model

    from tools_app.web.api.tokens import create_token

    user = get_user_model().objects.create_user(f"{name}-{secrets.token_hex(4)}")
    return create_token(user, "bench")[1]


def post(client: Any, token: str, body: bytes) -> Any:
    return client.post("/v1/traces", data=body, content_type="application/x-protobuf",
                        headers={"Authorization": f"Bearer {token}"})


def _bodies(batches: int, split: int, warm_ups: int = 1) -> list[bytes]:
    """`warm_ups` + `batches` protobuf bodies of BATCH spans each (warm-ups first)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    count = batches + warm_ups
    spans = _spans((count * BATCH) // SPANS_PER_TRACE + split)
    ordered = _delivery(spans, split)
    return [encode_spans(ordered[i * BATCH:(i + 1) * BATCH]).SerializeToString()
            for i in range(count)]


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


def _agent(tracer: Any, number: int, steps: int = 3) -> None:
    history: list[dict[str, Any]] = [
        {"role": "user", "parts": [{"type": "text", "content": f"Question {number}"}]}]
    with tracer.start_as_current_span("invoke_agent bench") as agent:
        agent.set_attributes({"gen_ai.operation.name": "invoke_agent",
                              "gen_ai.agent.name": "bench"})
        for step in range(steps):
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
        f"{database}, in a process started as the server is (start-up frozen, the "
        "collector's thresholds of runs/loops/process.py). Each trace is an agent of 3 "
        "chat and 3 execute_tool spans with messages, arguments and results (7 spans). "
        "'split': each trace's spans spread over 4 batches, children first, so each run "
        "is made, then rebuilt 3 times. "
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


def report_long(rows: list[dict[str, Any]]) -> str:
    stretches = list(rows[0]["stretches"]) if rows else []
    lines = [
        f"### One long trace: {LONG_ROUNDS} rounds, a round (chat and execute_tool span) "
        "per request", "",
        "Each chat span carries the conversation so far (its input messages), as an "
        "agent's do; the agent span comes last. Per request, p50 / p95 by stretch of "
        "rounds (what a request costs as the run grows), and all the requests' time.", "",
        "| | " + " | ".join(stretches) + " | all requests |",
        "|---|" + "---|" * len(stretches) + "---|",
    ]
    for row in rows:
        cells = " | ".join(f"{row['stretches'][name]['p50']:.1f} / "
                           f"{row['stretches'][name]['p95']:.1f} ms" for name in stretches)
        lines.append(f"| {row['label']} | {cells} | {row['total_s']:.1f} s |")
    return "\n".join(lines)


# -- scale-out: several receiving processes ----------------------------------------------


def scale_out(args: argparse.Namespace) -> None:
    """Both deliveries posted round-robin to `args.servers` daphne processes."""
    from tools_app.models import Run

    in_flight = args.in_flight or 2 * args.servers
    held = Run.objects.count()  # earlier runs' rows make every lookup and index larger
    tokens = {split: _token(f"bench-{split}") for split in (1, 4)}
    workdir = Path(tempfile.mkdtemp(prefix="agentforge-bench-otlp-"))
    extra = {"AGENTFORGE_OTLP_RATE": RATE, "AGENTFORGE_EMBEDDED_WORKER": "0",
             "SECRET_KEY": os.environ["SECRET_KEY"]}  # one key for all, as deployed
    if args.redis_url:
        extra["REDIS_URL"] = args.redis_url
    env = base_env(args.database_url, workdir, **extra)
    try:
        with servers(env, workdir, args.servers) as urls:
            rows = [measure_servers("whole traces", urls, tokens[1], args.batches, 1,
                                    in_flight),
                    measure_servers("split traces (4 batches each)", urls, tokens[4],
                                    args.batches, 4, in_flight)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    write_result("otlp_ingest_scaleout",
                 report_scale_out(rows, args.batches, args.servers, in_flight,
                                  redis=bool(args.redis_url), held=held))


@contextmanager
def servers(env: dict[str, str], workdir: Path, count: int) -> Iterator[list[tuple[str, int]]]:
    """`count` daphne processes serving the product: their (base URL, pid)."""
    processes: list[subprocess.Popen[bytes]] = []
    try:
        urls = []
        for index in range(count):
            port = free_port()
            with (workdir / f"daphne{index + 1}.log").open("wb") as log:
                processes.append(subprocess.Popen(
                    [DAPHNE, "-e", f"tcp:port={port}:interface=127.0.0.1:backlog=1024",
                     "agentforge_web.asgi:application"],
                    cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
            urls.append((f"http://127.0.0.1:{port}", processes[-1].pid))
        asyncio.run(_wait_until_up([url for url, _ in urls], processes))
        yield urls
    finally:
        for process in processes:
            stop(process)


async def _wait_until_up(urls: list[str], processes: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    async with aiohttp.ClientSession() as http:
        for url in urls:
            while True:
                if any(p.poll() is not None for p in processes):
                    raise RuntimeError("a server exited while starting")
                try:
                    async with http.get(f"{url}/v1/traces") as response:
                        if response.status < 500:  # a GET: 405, from the app
                            break
                except aiohttp.ClientError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{url} did not answer within {START_TIMEOUT} s")
                await asyncio.sleep(0.2)


def measure_servers(label: str, urls: list[tuple[str, int]], token: str, batches: int,
                    split: int, in_flight: int) -> dict[str, Any]:
    """One warm-up batch per server, then `batches` batches posted round-robin, at most
    `in_flight` at a time."""
    bodies = _bodies(batches, split, warm_ups=len(urls))
    warm_ups, measured = bodies[:len(urls)], bodies[len(urls):]
    asyncio.run(_post_all([(url, body) for (url, _), body in zip(urls, warm_ups,
                                                                  strict=True)],
                          token, len(urls)))
    pids = [pid for _, pid in urls]
    server_cpu = sum(map(cpu_seconds, pids))
    others = services_cpu()
    started = time.perf_counter()
    latencies = asyncio.run(_post_all(
        [(urls[i % len(urls)][0], body) for i, body in enumerate(measured)], token,
        in_flight))
    elapsed = time.perf_counter() - started
    server_cpu = sum(map(cpu_seconds, pids)) - server_cpu
    others = {name: cpu - others[name] for name, cpu in services_cpu().items()}
    spans = BATCH * len(measured)
    stats = summary(latencies)
    return {"label": label, "spans": spans, "rate": spans / elapsed,
            "cpu_rate": spans / server_cpu if server_cpu else float("nan"),
            "others": others, "p50": stats["p50"], "p95": stats["p95"]}


async def _post_all(posts: list[tuple[str, bytes]], token: str, in_flight: int,
                    ) -> list[float]:
    """Post each body to its server, `in_flight` at a time, in order of the list; the
    latency of each (ms). A refused batch stops the benchmark."""
    latencies: list[float] = []
    pending = iter(posts)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-protobuf"}
    timeout = aiohttp.ClientTimeout(total=POST_TIMEOUT)

    async def sender(http: aiohttp.ClientSession) -> None:
        for url, body in pending:
            before = time.perf_counter()
            async with http.post(f"{url}/v1/traces", data=body, headers=headers) as response:
                content = await response.read()
                if response.status != 200:
                    raise RuntimeError(f"{url}: {response.status} {content[:300]!r}")
            latencies.append((time.perf_counter() - before) * 1000)

    async with aiohttp.ClientSession(timeout=timeout) as http:
        await asyncio.gather(*(sender(http) for _ in range(in_flight)))
    return latencies


def report_scale_out(rows: list[dict[str, Any]], batches: int, count: int, in_flight: int,
                     *, redis: bool, held: int) -> str:
    load = os.getloadavg()[0]
    services = ", ".join(rows[0]["others"]) if rows else ""
    lines = [
        f"## OTLP in: spans per second into PostgreSQL, {count} receiving processes "
        "(the scale-out configuration)", "",
        f"{batches} batches of {BATCH} spans after a warm-up batch per server, posted as "
        f"protobuf over loopback HTTP to POST /v1/traces of {count} daphne processes on "
        f"one PostgreSQL database (holding {held:,} runs before: "
        f"{'created empty for it' if not held else 'earlier runs kept'})"
        f"{' and Redis' if redis else ''}, round-robin, {in_flight} "
        "at a time (a split trace's batches land on different processes). Each trace is "
        "an agent of 3 chat and 3 execute_tool spans with messages, arguments and results "
        "(7 spans). 'split': each trace's spans spread over 4 consecutive batches, "
        "children first. Spans per server CPU second: over all the servers' user + "
        f"system time; {services} CPU seconds beside it. {os.cpu_count()} cores, load "
        f"average {load:.1f} after measuring.", "",
        "| delivery | spans | spans/s (wall) | spans per server CPU second | "
        f"{' | '.join(f'{name} CPU s' for name in rows[0]['others']) if rows else ''} | "
        f"batch p50 | batch p95 | target >= {TARGET_POSTGRES:,.0f}/s |",
        "|---|---|---|---|" + "---|" * len(rows[0]["others"] if rows else []) + "---|---|---|",
    ]
    for row in rows:
        verdict = "ok" if row["rate"] >= TARGET_POSTGRES else "MISSED"
        others = " | ".join(f"{cpu:.1f}" for cpu in row["others"].values())
        lines.append(f"| {row['label']} | {row['spans']} | {row['rate']:,.0f} | "
                     f"{row['cpu_rate']:,.0f} | {others} | {row['p50']:.0f} ms | "
                     f"{row['p95']:.0f} ms | {verdict} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
