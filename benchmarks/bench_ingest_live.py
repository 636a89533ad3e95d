"""OTLP in, live: how far behind its ingest the live timeline of a run being received is
(target p95 < 200 ms).

A real server on loopback: `daphne` on the embedded default (a fresh SQLite file, the
in-memory channel layer, the worker in the process), set up as bench_live's is. An
exporter posts traces in the OpenTelemetry GenAI conventions, made by the SDK and
encoded by its OTLP encoder, as protobuf to POST /v1/traces, one request at a time, the
way a BatchSpanProcessor sends them: each watched trace (an agent of ROUNDS rounds, a
chat and an execute_tool span each, then its final chat and its root span) arrives a
round per batch, so its run is made by the first batch, grows with each one and ends
with the last. Each watched run is followed by a WebSocket viewer logged in with a
session cookie, exactly as the run page's socket is (bench_live's `watch`).

Lag of a batch, for each watched run: the arrival at the viewer of the first message
that covers the last event the batch made for that run, minus the moment the batch was
accepted (its 200 answer read by the exporter), and minus the moment it was sent (so the
receiver's own work on the batch included). Each event is given to the batch sent last
before its `created_at` (read back through the API); every span of the run in the batch
counts once. The first batch is not measured (it makes the runs the viewers then open).

Scenarios: (a) a few traces alone: WATCHED traces, a batch of their next round every
INTERVAL_S; (b) under load: the same watched traces, each batch filled up to 512 spans
with whole traces of other agents (bench_otlp_ingest's), posted back to back.

Run: .venv/bin/python -m benchmarks.bench_ingest_live [--rounds 30] [--watched 3]
     (about a minute; every wait is bounded)
Results: docs/benchmarks/ingest_live.md
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.bench_otlp_ingest import BATCH, SPANS_PER_TRACE, _spans
from benchmarks.common import summary, write_result
from benchmarks.live_clients import Server, Stamp, Watch, serve, stamps_of, watch
from benchmarks.processes import base_env

TARGET_MS = 200.0
WATCHED, ROUNDS, INTERVAL_S = 3, 30, 0.2
SETTLE_S = 1.0  # after the first batch: the viewers connect and resume
RUN_TIMEOUT = 120.0  # a scenario's bound, whatever its size
POST_TIMEOUT = 30.0


@dataclass
class Sent:
    """One posted batch: when it left, when its answer came, how many spans of each
    watched trace (by its position) it carried."""

    sent: float
    accepted: float
    spans: int
    watched_spans: int  # of each watched trace


@dataclass
class Outcome:
    label: str
    watched: int
    batches: list[Sent]
    since_accepted_ms: list[float] = field(default_factory=list)  # one per span
    since_sent_ms: list[float] = field(default_factory=list)
    undelivered: int = 0  # (batch, run) pairs no viewer message covered
    errors: list[str] = field(default_factory=list)
    load: tuple[float, float] = (0.0, 0.0)

    @property
    def spans_per_s(self) -> float:
        measured = self.batches[1:]
        wall = measured[-1].accepted - measured[0].sent if len(measured) > 1 else float("nan")
        return sum(b.spans for b in measured) / wall


# -- the traces ---------------------------------------------------------------------------


def watched_traces(count: int, rounds: int) -> list[list[list[Any]]]:
    """`count` traces, each as its batches' parts: a round's chat and tool spans per
    batch, then the final answer's chat span with the root."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    traces = []
    for number in range(count):
        exporter = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": "watched-agent"}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        _agent(provider.get_tracer("bench"), number, rounds)
        provider.shutdown()
        spans = list(exporter.get_finished_spans())  # in the order they ended
        traces.append([spans[i:i + 2] for i in range(0, 2 * rounds, 2)] + [spans[2 * rounds:]])
    return traces


def _agent(tracer: Any, number: int, rounds: int) -> None:
    import json

    history: list[dict[str, Any]] = [
        {"role": "user", "parts": [{"type": "text", "content": f"Watched question {number}"}]}]
    with tracer.start_as_current_span("invoke_agent watched") as agent:
        agent.set_attributes({"gen_ai.operation.name": "invoke_agent",
                              "gen_ai.agent.name": f"watched {number}"})
        for step in range(rounds + 1):
            call_id = f"call_{number}_{step}"
            final = step == rounds
            answer = {"role": "assistant", "finish_reason": "stop" if final else "tool_calls",
                      "parts": [{"type": "text", "content": f"Step {step}."}] + ([] if final
                      else [{"type": "tool_call", "id": call_id, "name": "lookup",
                             "arguments": {"query": f"item {number}-{step}"}}])}
            with tracer.start_as_current_span("chat fake") as chat:
                chat.set_attributes({
                    "gen_ai.operation.name": "chat", "gen_ai.request.model": "fake",
                    "gen_ai.usage.input_tokens": 100 + step, "gen_ai.usage.output_tokens": 20,
                    "gen_ai.input.messages": json.dumps(history),
                    "gen_ai.output.messages": json.dumps([answer])})
            if final:
                break
            result = json.dumps({"items": [f"result {i}" for i in range(5)]})
            with tracer.start_as_current_span("execute_tool lookup") as tool:
                tool.set_attributes({"gen_ai.operation.name": "execute_tool",
                                     "gen_ai.tool.name": "lookup",
                                     "gen_ai.tool.call.id": call_id,
                                     "gen_ai.tool.call.arguments": json.dumps(
                                         {"query": f"item {number}-{step}"}),
                                     "gen_ai.tool.call.result": result})
            history += [answer, {"role": "tool", "parts": [
                {"type": "tool_call_response", "id": call_id, "response": result}]}]


def batches_of(watched: list[list[list[Any]]], *, fill: bool) -> list[tuple[bytes, int, int]]:
    """Each batch's protobuf body, its span count and the spans of each watched trace it
    carries; with `fill`, topped up to BATCH spans with whole other traces (not the
    first batch: the runs it makes are the watched ones)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    parts = len(watched[0])
    others = _spans(parts * BATCH // SPANS_PER_TRACE) if fill else []
    out = []
    for index in range(parts):
        spans = [span for trace in watched for span in trace[index]]
        own = len(watched[0][index])
        if fill and index:
            room = (BATCH - len(spans)) // SPANS_PER_TRACE * SPANS_PER_TRACE
            spans += others[:room]
            others = others[room:]
        out.append((encode_spans(spans).SerializeToString(), len(spans), own))
    return out


# -- one scenario ---------------------------------------------------------------------------


async def scenario(server: Server, label: str, watched: int, rounds: int, *,
                   fill: bool, interval: float) -> Outcome:
    bodies = batches_of(watched_traces(watched, rounds), fill=fill)
    load_before = os.getloadavg()[0]
    deadline = time.monotonic() + RUN_TIMEOUT
    timeout = aiohttp.ClientTimeout(total=POST_TIMEOUT)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        known = set(await run_ids(http, server))
        sent = [await post(http, server, *bodies[0])]
        runs = [r for r in await run_ids(http, server) if r not in known]
        if len(runs) != watched:
            raise RuntimeError(f"the first batch made {len(runs)} runs, not {watched}")
        viewers = [asyncio.create_task(watch(http, server, run, deadline)) for run in runs]
        await asyncio.sleep(SETTLE_S)
        for body in bodies[1:]:
            if time.monotonic() > deadline:
                break
            started = time.monotonic()
            sent.append(await post(http, server, *body))
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
        watches = await asyncio.gather(*viewers)
        stamps = {run: await stamps_of(http, server, run) for run in runs}
    outcome = Outcome(label, watched, sent, load=(load_before, os.getloadavg()[0]),
                      errors=sorted({w.error for w in watches if w.error}))
    for view in watches:
        lags(outcome, view, stamps[view.run_id])
    return outcome


def lags(outcome: Outcome, view: Watch, stamps: dict[int, Stamp]) -> None:
    """Each measured batch's lag for the run `view` follows, once per span of the run."""
    last_seq: dict[int, int] = {}  # batch -> the last seq it made for the run
    starts = [b.sent for b in outcome.batches]
    for seq, stamp in stamps.items():
        made_by = max((i for i, at in enumerate(starts) if at <= stamp.created), default=0)
        last_seq[made_by] = max(last_seq.get(made_by, 0), seq)
    for index, batch in enumerate(outcome.batches):
        if index == 0 or batch.sent <= view.resumed_at or index not in last_seq:
            continue
        arrival = next((at for at, seq in view.messages if seq >= last_seq[index]), None)
        if arrival is None:
            outcome.undelivered += 1
            continue
        outcome.since_accepted_ms += [(arrival - batch.accepted) * 1000] * batch.watched_spans
        outcome.since_sent_ms += [(arrival - batch.sent) * 1000] * batch.watched_spans


async def post(http: aiohttp.ClientSession, server: Server, body: bytes, spans: int,
               own: int) -> Sent:
    sent = time.time()
    async with http.post(f"{server.base_url}/v1/traces", data=body, headers={
            "Content-Type": "application/x-protobuf",
            "Authorization": f"Bearer {server.token}"}) as response:
        await response.read()
        if response.status != 200:
            raise RuntimeError(f"POST /v1/traces: {response.status}")
    return Sent(sent, time.time(), spans, own)


async def run_ids(http: aiohttp.ClientSession, server: Server) -> list[str]:
    async with http.get(f"{server.base_url}/api/runs?limit=100",
                        headers={"Authorization": f"Bearer {server.token}"}) as response:
        data = await response.json()
    return [str(run["id"]) for run in data["runs"]]


@contextmanager
def embedded_server() -> Iterator[Server]:
    workdir = Path(tempfile.mkdtemp(prefix="agentforge-bench-ingest-live-"))
    try:
        env = base_env(f"sqlite:///{workdir / 'bench.sqlite3'}", workdir,
                       AGENTFORGE_EMBEDDED_WORKER="1", AGENTFORGE_OTLP_RATE="100000/m")
        with serve(env, workdir, db_worker=False) as server:
            yield server
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# -- the report ---------------------------------------------------------------------------


def report(outcomes: list[Outcome], rounds: int) -> str:
    lines = [
        "## OTLP in, live: the timeline of a run being received, behind its ingest", "",
        f"A real daphne on the embedded default (SQLite, in-process worker), loopback. "
        f"Each watched trace: {rounds} rounds (a chat and an execute_tool span each) then "
        "its final chat and root span, a round per batch, posted as OTLP/HTTP protobuf "
        "(the SDK's encoder) one request at a time; each watched run followed by a "
        "WebSocket viewer as the run page's. Lag = the viewer's first message covering the "
        "batch's last event for that run, minus the batch's answer read by the exporter "
        "('since accepted', the target's figure), or minus its sending ('since sent': the "
        "receiver's work on the batch included); once per span of the run in the batch. "
        "2 cores shared with other work: load average before and after each scenario.", "",
        f"| scenario | runs watched | batches measured | spans a batch | spans/s | since "
        f"accepted p50 / p95 / max | since sent p50 / p95 / max | undelivered | load | "
        f"p95 < {TARGET_MS:.0f} ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        accepted, sent = summary(o.since_accepted_ms), summary(o.since_sent_ms)
        verdict = "ok" if o.since_accepted_ms and accepted["p95"] < TARGET_MS \
            and not o.undelivered else "MISSED"
        per_batch = max(b.spans for b in o.batches[1:]) if len(o.batches) > 1 else 0
        lines.append(
            f"| {o.label} | {o.watched} | {len(o.batches) - 1} | {per_batch} | "
            f"{o.spans_per_s:,.0f} | {accepted['p50']:.0f} / {accepted['p95']:.0f} / "
            f"{accepted['max']:.0f} ms | {sent['p50']:.0f} / {sent['p95']:.0f} / "
            f"{sent['max']:.0f} ms | {o.undelivered} | {o.load[0]:.1f} -> {o.load[1]:.1f} "
            f"| {verdict} |")
    errors = sorted({e for o in outcomes for e in o.errors})
    if errors:
        lines += ["", "Viewer errors: " + "; ".join(errors)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--watched", type=int, default=WATCHED)
    parser.add_argument("--interval", type=float, default=INTERVAL_S,
                        help="seconds between the batches of scenario (a)")
    args = parser.parse_args()
    with embedded_server() as server:
        outcomes = [
            asyncio.run(scenario(server, "(a) a few traces alone", args.watched, args.rounds,
                                 fill=False, interval=args.interval)),
            asyncio.run(scenario(server, f"(b) under load: batches of {BATCH}", args.watched,
                                 args.rounds, fill=True, interval=0.0)),
        ]
    path = write_result("ingest_live", report(outcomes, args.rounds))
    print(path.read_text())


if __name__ == "__main__":
    main()
