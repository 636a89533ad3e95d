"""The provider HTTP layer against the fake server: loop overhead and concurrency.

    python -m benchmarks.bench_providers          (about 2 minutes on 2 quiet cores)
    python -m benchmarks.bench_providers --quick  (a smoke run, under a minute)

(1) Per-round overhead at zero model latency: ToolService + OpenAIChatModel against a
    bare hand-written httpx loop doing the same task (one prompt, one `get_weather`
    tool, K=20 rounds of P=1 or 4 parallel calls, JSON and SSE). Target: at most 1.2x
    the bare loop on the same client (the product's: httpx's API over aiohttp's pool).
    Also shown: a bare loop on httpx's own pool, and OpenAIChatModel in the bare loop
    without ToolService, to attribute the cost.
(2) 100 concurrent runs x 5 rounds x 2 parallel calls at 50 ms model latency, all runs
    sharing one client: efficiency = ideal wall time / measured, ideal = (5 + 1) x 50 ms
    because a run makes 6 sequential model calls. Target: at least 75 %. Reported beside
    a bare loop on aiohttp's own ClientSession (no product code, no httpx) and bare
    loops on the product's client and on httpx's own pool.

Protocol: the fake server (`python -m tools_app.fake_llm`) runs in its own process,
pinned to the second CPU when there are two; every sample is a fresh client process
pinned to the first, so its CPU time (`time.process_time`) and peak RSS
(`ru_maxrss`) are the client's alone. Variants are interleaved (A B C, B C A, ...) so
that noise on a shared machine hits them alike. Every run is checked: the right
number of tool executions, and the server counted exactly the requests the client
made. Results go to docs/benchmarks/providers.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.common import ROOT, write_result

PROMPT = "What is the weather in a few cities?"
API_KEY = "sk-bench-0123456789abcdef"
SEQ_ROUNDS = 20
SEQ_PARALLEL = (1, 4)
CONC_RUNS, CONC_ROUNDS, CONC_PARALLEL, CONC_LATENCY_MS = 100, 5, 2, 50
IDEAL_S = (CONC_ROUNDS + 1) * CONC_LATENCY_MS / 1000
SEQ_TARGET, CONC_TARGET = 1.2, 0.75
WORKER_TIMEOUT_S = 150

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


async def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"Sunny, 21C in {city}"


@dataclass(frozen=True)
class Variant:
    name: str
    label: str
    kind: str  # "bare", "adapter" (OpenAIChatModel in a hand loop), "service", "observed"
    stack: str  # "httpx", "shipped", "raw_aiohttp"


SHIPPED = "httpx AsyncClient on aiohttp's pool (httpx-aiohttp transport)"
# The bare loops' HTTP clients; none but "shipped" involves product code.
STACK_LABELS = {"httpx": "httpx AsyncClient on httpx's own pool (httpcore)",
                "shipped": f"the product's client: {SHIPPED} (clients.new_client)",
                "raw_aiohttp": "aiohttp's own ClientSession, no httpx, no product code"}
SAME_STACK = "bare_shipped"


def seq_variants() -> list[Variant]:
    return [
        Variant("bare_httpx", f"bare loop, {STACK_LABELS['httpx']}", "bare", "httpx"),
        Variant(SAME_STACK, f"bare loop, {STACK_LABELS['shipped']}", "bare", "shipped"),
        Variant("adapter", "OpenAIChatModel in the bare loop, no ToolService "
                           "(attribution only)", "adapter", "shipped"),
        Variant("service", "ToolService + OpenAIChatModel, shipped", "service", "shipped"),
    ]


def conc_variants() -> list[Variant]:
    variants = [Variant(f"bare_{stack}", f"bare loop, {STACK_LABELS[stack]}", "bare", stack)
                for stack in ("raw_aiohttp", "shipped", "httpx")]
    variants.append(Variant("adapter", "OpenAIChatModel in the bare loop, no ToolService "
                                       "(attribution only)", "adapter", "shipped"))
    variants.append(Variant("service", "ToolService + OpenAIChatModel, shipped", "service",
                            "shipped"))
    variants.append(Variant("service_observed",
                            "ToolService + OpenAIChatModel with an observer "
                            "(every event built; attribution only)", "observed", "shipped"))
    return variants


# -- the client side (runs in a worker process) -------------------------------------------


def make_bare_client(stack: str, base_url: str) -> Any:
    """The hand-written loop's client, pool limits raised for 100 concurrent runs."""
    import httpx

    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
    headers = {"authorization": f"Bearer {API_KEY}"}
    if stack == "httpx":
        return httpx.AsyncClient(limits=limits, timeout=60, headers=headers)
    if stack == "shipped":
        from tools_app.engine.providers.http.clients import EndpointConfig, new_client

        client = new_client(EndpointConfig.of(base_url, read_timeout=60, limits=limits))
        client.headers.update(headers)
        return client
    if stack == "raw_aiohttp":
        import aiohttp

        return aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=60),
                                     connector=aiohttp.TCPConnector(limit=1000))
    raise ValueError(stack)


Ask = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


async def hand_loop(ask: Ask, model: str, stream: bool) -> int:
    """The hand-written loops: one conversation to the final answer, `ask` sending one
    request body and returning the assistant message; returns the tool calls executed."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    executed = 0
    while True:
        body: dict[str, Any] = {"model": model, "messages": messages, "tools": TOOLS}
        if stream:
            body["stream"] = True
        ran = await _run_tool_calls(await ask(body), messages)
        if ran is None:
            return executed
        executed += ran


async def raw_aiohttp_run(session: Any, url: str, model: str) -> int:
    """The same loop on aiohttp's own API (JSON only): what this server and machine allow."""
    async def ask(body: dict[str, Any]) -> dict[str, Any]:
        async with session.post(url, json=body) as response:
            response.raise_for_status()
            return (await response.json())["choices"][0]["message"]

    return await hand_loop(ask, model, stream=False)


async def _run_tool_calls(message: dict[str, Any], messages: list[dict[str, Any]],
                          ) -> int | None:
    """The hand-written loops' step after a reply: None if it was the answer, else the
    number of calls run (the assistant message and their results appended)."""
    calls = message.get("tool_calls") or []
    if not calls:
        assert message.get("content"), message
        return None
    messages.append({"role": "assistant", "content": message.get("content"),
                     "tool_calls": calls})
    results = await asyncio.gather(*(
        get_weather(**json.loads(call["function"]["arguments"])) for call in calls))
    messages.extend({"role": "tool", "tool_call_id": call["id"], "content": result}
                    for call, result in zip(calls, results, strict=True))
    return len(calls)


async def bare_run(client: Any, url: str, model: str, stream: bool) -> int:
    """The hand-written loop on an httpx AsyncClient."""
    async def ask(body: dict[str, Any]) -> dict[str, Any]:
        if stream:
            async with client.stream("POST", url, json=body) as response:
                response.raise_for_status()
                return await _fold_sse(response.aiter_lines())
        response = await client.post(url, json=body)
        response.raise_for_status()
        return response.json()["choices"][0]["message"]

    return await hand_loop(ask, model, stream)


async def _fold_sse(lines: Any) -> dict[str, Any]:
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    async for line in lines:  # read to the end of the body, so the connection is reused
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            continue
        chunk = json.loads(data)
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("content"):
                content.append(delta["content"])
            for fragment in delta.get("tool_calls") or ():
                call = calls.setdefault(fragment["index"], {
                    "id": "", "type": "function", "function": {"name": "", "arguments": ""}})
                call["id"] = fragment.get("id") or call["id"]
                function = fragment.get("function") or {}
                call["function"]["name"] += function.get("name") or ""
                call["function"]["arguments"] += function.get("arguments") or ""
    return {"role": "assistant", "content": "".join(content) or None,
            "tool_calls": [calls[i] for i in sorted(calls)]}


async def adapter_run(model: Any, parameters: Any) -> int:
    """The bare loop with OpenAIChatModel.chat() for the HTTP part: separates the
    adapter's cost from ToolService's."""
    from tools_app.engine.messages import ChatRequest, ToolExecutionResultMessage, UserMessage

    messages: list[Any] = [UserMessage(text=PROMPT)]
    executed = 0
    while True:
        response = await model.chat(ChatRequest(messages=tuple(messages),
                                                parameters=parameters))
        calls = response.ai_message.tool_execution_requests
        if not calls:
            assert response.ai_message.text
            return executed
        messages.append(response.ai_message)
        results = await asyncio.gather(*(get_weather(**json.loads(call.arguments))
                                         for call in calls))
        messages.extend(ToolExecutionResultMessage(id=call.id, tool_name=call.name, text=text)
                        for call, text in zip(calls, results, strict=True))
        executed += len(calls)


def _ignore(event: Any) -> None:
    """An observer that does nothing: the run builds and delivers every event."""


class Client:
    """One variant's way of doing a run, sharing one client / model across runs."""

    def __init__(self, variant: dict[str, str], base_url: str) -> None:
        self.kind, self.stack, self.base_url = variant["kind"], variant["stack"], base_url
        self.bare = make_bare_client(self.stack, base_url) if self.kind == "bare" else None
        self.models: dict[tuple[str, bool], Any] = {}
        self.service: Any = None
        from tools_app.engine.providers.http.clients import SharedHttpClients

        self.clients = SharedHttpClients()  # as the app shares them: one per endpoint
        if self.kind in ("service", "adapter", "observed"):
            from tools_app.engine.loop.service import ToolService

            observers = [_ignore] if self.kind == "observed" else []
            self.service = ToolService(observers=observers).tool(get_weather)

    def _model(self, name: str, stream: bool) -> Any:
        from tools_app.engine.providers.openai import OpenAIChatModel

        key = (name, stream)
        if key not in self.models:
            self.models[key] = OpenAIChatModel(base_url=self.base_url, model=name,
                                               api_key=API_KEY, stream=stream,
                                               clients=self.clients)
        return self.models[key]

    async def run(self, name: str, stream: bool) -> int:
        if self.bare is not None:
            url = f"{self.base_url}/chat/completions"
            if self.stack == "raw_aiohttp":
                assert not stream
                return await raw_aiohttp_run(self.bare, url, name)
            return await bare_run(self.bare, url, name, stream)
        from tools_app.engine.messages import UserMessage

        if self.kind == "adapter":
            return await adapter_run(self._model(name, stream),
                                     self.service.request_parameters(None))
        result = await self.service.chat(self._model(name, stream), [UserMessage(text=PROMPT)])
        return len(result.tool_executions)

    async def aclose(self) -> None:
        if self.bare is not None:
            await (self.bare.close() if self.stack == "raw_aiohttp" else self.bare.aclose())
        await self.clients.aclose_all()


def model_name(rounds: int, parallel: int, latency_ms: int = 0) -> str:
    return f"fake-k{rounds}-p{parallel}" + (f"-l{latency_ms}" if latency_ms else "")


async def seq_phase(client: Client, runs: int, warmup: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    requests = 0
    for parallel in SEQ_PARALLEL:
        for stream in (False, True):
            name = model_name(SEQ_ROUNDS, parallel)
            walls, cpus = [], []
            for index in range(warmup + runs):
                wall, cpu = time.perf_counter(), time.process_time()
                executed = await client.run(name, stream)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                assert executed == SEQ_ROUNDS * parallel, (name, executed)
                requests += SEQ_ROUNDS + 1
                if index >= warmup:
                    walls.append(wall / SEQ_ROUNDS * 1e6)
                    cpus.append(cpu / SEQ_ROUNDS * 1e6)
            results[f"p{parallel}-{'sse' if stream else 'json'}"] = {"wall_us": walls,
                                                                     "cpu_us": cpus}
    return {"configs": results, "requests": requests}


async def conc_phase(client: Client, batches: int) -> dict[str, Any]:
    async def batch(name: str, rounds: int) -> tuple[float, float, list[float]]:
        async def timed() -> float:
            started = time.perf_counter()
            executed = await client.run(name, False)
            assert executed == rounds * CONC_PARALLEL, (name, executed)
            return time.perf_counter() - started

        wall, cpu = time.perf_counter(), time.process_time()
        per_run = await asyncio.gather(*(timed() for _ in range(CONC_RUNS)))
        return time.perf_counter() - wall, time.process_time() - cpu, list(per_run)

    # Warm-up: one batch of the same shape. It opens the connections and brings the
    # process to the state a long-running worker is in (its heap grown, its caches
    # filled): the first full batch of a fresh process runs a few points below the next
    # ones in every variant. Its result is reported apart, not averaged in.
    name = model_name(CONC_ROUNDS, CONC_PARALLEL, CONC_LATENCY_MS)
    cold_wall, _, _ = await batch(name, CONC_ROUNDS)
    requests = CONC_RUNS * (CONC_ROUNDS + 1)
    walls, cpus, p50s, p99s = [], [], [], []
    for _ in range(batches):
        wall, cpu, per_run = await batch(name, CONC_ROUNDS)
        requests += CONC_RUNS * (CONC_ROUNDS + 1)
        walls.append(wall)
        cpus.append(cpu)
        per_run.sort()
        p50s.append(per_run[len(per_run) // 2])
        p99s.append(per_run[min(len(per_run) - 1, round(0.99 * (len(per_run) - 1)))])
    return {"walls": walls, "cpus": cpus, "p50s": p50s, "p99s": p99s,
            "cold_wall": cold_wall, "requests": requests}


async def worker_main(spec: dict[str, Any]) -> dict[str, Any]:
    client = Client(spec["variant"], spec["base_url"])
    try:
        if spec["phase"] == "seq":
            result = await seq_phase(client, spec["runs"], spec["warmup"])
        else:
            result = await conc_phase(client, spec["batches"])
    finally:
        await client.aclose()
    result["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def worker(spec_json: str) -> None:
    spec = json.loads(spec_json)
    if spec.get("cpu") is not None:
        os.sched_setaffinity(0, {spec["cpu"]})
    # As the product's serving processes do once started (daphne, db_worker).
    from tools_app.runs.loops.process import freeze_startup_objects

    freeze_startup_objects()
    result = asyncio.run(worker_main(spec))
    print("RESULT " + json.dumps(result), flush=True)


# -- the orchestrator ---------------------------------------------------------------------


class FakeServer:
    """`python -m tools_app.fake_llm` on a free loopback port, in its own process."""

    def __init__(self, cpu: int | None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tools_app.fake_llm", "--host", "127.0.0.1", "--port", "0",
             "--record-limit", "0", "--log-level", "warning"],
            cwd=ROOT, stdout=subprocess.PIPE, text=True)
        if cpu is not None:
            os.sched_setaffinity(self.process.pid, {cpu})
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if match is None:
            self.stop()
            raise RuntimeError(f"the fake server did not start: {line!r}")
        self.url = f"http://127.0.0.1:{match.group(1)}"

    def requests_seen(self) -> int:
        import httpx

        return int(httpx.get(f"{self.url}/_fake/health", timeout=10).json()["requests"])

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


@dataclass
class Sample:
    variant: Variant
    phase: str
    result: dict[str, Any]
    server_cpu_us_per_request: float
    error: str | None = None
    """Why the worker failed (its last line of stderr); a failed sample is reported, not
    averaged in."""


def run_worker(server: FakeServer, variant: Variant, phase: str, settings: dict[str, Any],
               cpu: int | None) -> Sample:
    spec = {"variant": {"kind": variant.kind, "stack": variant.stack},
            "base_url": f"{server.url}/v1", "phase": phase, "cpu": cpu, **settings}
    if variant.stack == "httpx":  # about 7 s a batch, at 5 % efficiency: one is enough
        spec["batches"] = min(spec["batches"], 1)
    seen, server_cpu = server.requests_seen(), server.cpu_seconds()
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_providers", "--worker", json.dumps(spec)],
        cwd=ROOT, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S, check=False)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
    if completed.returncode != 0 or not lines:
        reason = (completed.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"  {phase} {variant.name}: FAILED: {reason}", file=sys.stderr, flush=True)
        return Sample(variant, phase, {}, float("nan"), error=reason[:200])
    result = json.loads(lines[-1].removeprefix("RESULT "))
    server_cpu = server.cpu_seconds() - server_cpu
    counted = server.requests_seen() - seen  # provider requests only
    if counted != result["requests"]:
        raise RuntimeError(f"{variant.name} {phase}: the server counted {counted} requests, "
                           f"the client made {result['requests']}")
    return Sample(variant, phase, result, server_cpu / counted * 1e6)


def rotated[T](items: list[T], by: int) -> list[T]:
    by %= len(items)
    return items[by:] + items[:by]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def fmt(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def spread(values: list[float], digits: int = 0) -> str:
    return f"{fmt(median(values), digits)} ({fmt(min(values), digits)}-{fmt(max(values), digits)})"


def _verdict(ratio: float) -> str:
    return "meets" if ratio <= SEQ_TARGET else "MISSES"


def seq_table(samples: list[Sample], variants: list[Variant]) -> tuple[str, list[str]]:
    rows, verdicts = [], []
    configs = [(p, s) for p in SEQ_PARALLEL for s in ("json", "sse")]
    bare_same = next(v for v in variants if v.name == SAME_STACK)
    for parallel, mode in configs:
        key = f"p{parallel}-{mode}"
        pooled: dict[str, dict[str, list[float]]] = {
            v.name: {"wall": [], "cpu": [], "rss": []} for v in variants}
        for sample in samples:
            if sample.error is not None:
                continue
            config = sample.result["configs"][key]
            entry = pooled.setdefault(sample.variant.name, {"wall": [], "cpu": [], "rss": []})
            entry["wall"] += config["wall_us"]
            entry["cpu"] += config["cpu_us"]
            entry["rss"].append(sample.result["maxrss_mb"])
        floor = {m: median(pooled["bare_httpx"][m]) for m in ("wall", "cpu")}
        same = {m: median(pooled[bare_same.name][m]) for m in ("wall", "cpu")}
        for variant in variants:
            entry = pooled[variant.name]
            if not entry["wall"]:
                rows.append(f"| P={parallel} {mode} | {variant.label} | every sample failed "
                            "| | | | | |")
                continue
            wall, cpu = median(entry["wall"]), median(entry["cpu"])
            ratio, cpu_ratio = wall / floor["wall"], cpu / floor["cpu"]
            same_ratio, same_cpu = wall / same["wall"], cpu / same["cpu"]
            target = ""
            if variant.kind == "service":
                target = (f"wall {_verdict(same_ratio)}, CPU {_verdict(same_cpu)}")
                verdicts.append(
                    f"(1) K={SEQ_ROUNDS}, P={parallel}, {mode}: {same_ratio:.2f}x the wall "
                    f"time of the bare loop on the same client and {same_cpu:.2f}x its CPU: "
                    f"wall {_verdict(same_ratio)}, CPU {_verdict(same_cpu)} the "
                    f"{SEQ_TARGET}x target. Against a bare loop on httpx's own pool: "
                    f"{ratio:.2f}x wall, {cpu_ratio:.2f}x CPU.")
            rows.append(f"| P={parallel} {mode} | {variant.label} | {spread(entry['wall'])} | "
                        f"{spread(entry['cpu'])} | {ratio:.2f}x / {cpu_ratio:.2f}x | "
                        f"{same_ratio:.2f}x / {same_cpu:.2f}x | {target} | "
                        f"{median(entry['rss']):.0f} |")
    header = ("| config | variant | wall µs/round med (min-max) | CPU µs/round med (min-max) "
              "| vs bare httpx loop (wall / CPU) | vs bare loop on the same client (wall / CPU) "
              f"| target ≤ {SEQ_TARGET}x | peak RSS MB |\n|---|---|---|---|---|---|---|---|")
    return header + "\n" + "\n".join(rows), verdicts


def conc_table(samples: list[Sample], variants: list[Variant]) -> tuple[str, list[str]]:
    rows, verdicts = [], []
    per_request: dict[str, float] = {}
    efficiency: dict[str, float] = {}
    for variant in variants:
        mine = [s for s in samples if s.variant.name == variant.name and s.error is None]
        if not mine:
            rows.append(f"| {variant.label} | every sample failed | | | | | | | | | |")
            continue
        walls = [w * 1000 for s in mine for w in s.result["walls"]]
        cpus = [c * 1000 for s in mine for c in s.result["cpus"]]
        effs = [IDEAL_S * 1000 / w * 100 for w in walls]
        warmups = [IDEAL_S / s.result["cold_wall"] * 100 for s in mine]
        p50 = median([p * 1000 for s in mine for p in s.result["p50s"]])
        p99 = median([p * 1000 for s in mine for p in s.result["p99s"]])
        cpu_per_request = median(cpus) * 1000 / (CONC_RUNS * (CONC_ROUNDS + 1))
        rss = median([s.result["maxrss_mb"] for s in mine])
        server = median([s.server_cpu_us_per_request for s in mine])
        eff = median(effs)
        per_request[variant.name], efficiency[variant.name] = cpu_per_request, eff
        verdict = "meets" if eff >= CONC_TARGET * 100 else "MISSES"
        target = f"{verdict} ({eff:.0f} % vs {CONC_TARGET * 100:.0f} %)"
        if variant.kind == "service":
            verdicts.append(f"(2) ToolService + adapter on the shipped stack: {eff:.0f} % "
                            f"efficiency: {verdict} the {CONC_TARGET * 100:.0f} % target")
        elif variant.stack == "raw_aiohttp":
            verdicts.append(f"(2) Reference: aiohttp's own client, no httpx: {eff:.0f} %")
        elif variant.name == SAME_STACK:
            verdicts.append(f"(2) The bare loop on the product's client: {eff:.0f} %")
        rows.append(f"| {variant.label} | {spread(walls)} | {IDEAL_S * 1000:.0f} | "
                    f"{spread(effs)} % | {target} | {spread(warmups)} % | {fmt(median(cpus))} | "
                    f"{fmt(cpu_per_request)} | {fmt(p50)} / {fmt(p99)} | {fmt(server)} | "
                    f"{rss:.0f} |")
    shipped = next((v for v in variants if v.kind == "service"), None)
    if shipped is not None and shipped.name in per_request:
        requests = CONC_RUNS * (CONC_ROUNDS + 1)
        parts = [f"ToolService + adapter: {fmt(per_request[shipped.name])} µs"]
        for name, what in (("adapter", "the adapter in a bare loop"),
                           (SAME_STACK, "the bare loop on the same client"),
                           ("service_observed", "ToolService with an observer"),
                           ("bare_raw_aiohttp", "aiohttp alone")):
            if name in per_request:
                parts.append(f"{what}: {fmt(per_request[name])} µs")
        verdicts.append(
            f"(2) Why: a batch is {requests} model requests handled by one event loop, and "
            f"each round's 100 responses arrive within a few milliseconds of each other, so "
            f"a round lasts as long as the client takes to turn them into the next requests: "
            f"the batch is bound by the client's time per request ({'; '.join(parts)}). "
            + _cpu_fit(per_request, efficiency))
    header = ("| variant | batch wall ms med (min-max) | ideal ms | efficiency med (min-max) "
              f"| target ≥ {CONC_TARGET * 100:.0f} % | warm-up batch efficiency (not counted) "
              "| client CPU ms/batch | client CPU µs per model request "
              "| run p50 / p99 ms | server CPU µs/request | peak RSS MB |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|")
    return header + "\n" + "\n".join(rows), verdicts


def _cpu_fit(per_request: dict[str, float], efficiency: dict[str, float]) -> str:
    """What this run's variants say about CPU per request and efficiency: a least-squares
    line over those not bound by something else (above 50 %)."""
    points = [(per_request[name], efficiency[name]) for name in per_request
              if efficiency[name] >= 50]
    if len(points) < 3:
        return ""
    mean_x = statistics.fmean(x for x, _ in points)
    mean_y = statistics.fmean(y for _, y in points)
    spread_x = sum((x - mean_x) ** 2 for x, _ in points)
    if spread_x == 0:
        return ""
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread_x
    if slope >= 0:
        return ""
    needed = (CONC_TARGET * 100 - mean_y) / slope + mean_x
    return (f"Over the {len(points)} variants above 50 %, efficiency falls by "
            f"{-slope * 100:.1f} points per 100 µs of client CPU per request, which puts "
            f"{CONC_TARGET * 100:.0f} % at about {fmt(needed)} µs per request.")


CHOICE = """
**The stack.** Provider calls use httpx's API (`httpx.AsyncClient`: requests,
responses, exceptions, `httpx.MockTransport` in tests) over aiohttp's connection pool,
through httpx-aiohttp's transport (the openai SDK's aiohttp option), with aiohttp's
errors re-mapped by a thin subclass. No HTTP parsing, framing or pooling of our own.
Why aiohttp's pool rather than httpx's own: httpcore 1.0.x's pool is quadratic in the
number of waiting requests and drops keep-alive connections under load
(encode/httpcore#1035, encode/httpx#3215), which the "httpx's own pool" row shows under
100 concurrent runs. aiohttp's pool is maintained, honours the proxy environment
(`trust_env`), and the bare-loop rows put its client within a few points of aiohttp's
own API. One client per endpoint and event loop is shared by every run
(`SharedHttpClients`), so concurrent runs reuse keep-alive connections.
"""


def render(seq: list[Sample], conc: list[Sample], seq_vs: list[Variant],
           conc_vs: list[Variant], settings: dict[str, Any], elapsed: float,
           load: tuple[tuple[float, ...], tuple[float, ...]]) -> str:
    import platform

    seq_md, seq_verdicts = seq_table(seq, seq_vs)
    conc_md, conc_verdicts = conc_table(conc, conc_vs)
    failures = "".join(
        f"\n- {s.phase} {s.variant.name}: a sample failed: `{s.error}`"
        for s in [*seq, *conc] if s.error is not None)
    if failures:
        failures = ("\nFailed samples (left out of the tables; a bare loop has no retries):"
                    + failures + "\n")
    versions = ", ".join(f"{name} {_dist_version(name)}" for name in (
        "httpx", "httpcore", "aiohttp", "httpx-aiohttp", "uvicorn", "httptools"))
    pinned = ("server pinned to CPU 1, clients to CPU 0" if settings["pinned"]
              else "no CPU pinning")
    verdicts = "\n".join(f"- {line}" for line in seq_verdicts + conc_verdicts)
    return f"""
## Provider HTTP stack: loop overhead and 100 concurrent runs

`python -m benchmarks.bench_providers` against the fake server
(`python -m tools_app.fake_llm`, uvicorn with httptools) on loopback,
{settings['seq_reps']} x {settings['runs']} timed runs per sequential configuration and
{settings['conc_reps']} x {settings['batches']} measured batches per concurrency variant
every sample a fresh client process after a
warm-up, variants interleaved; {pinned}. Every client process takes its start-up objects out of the
garbage collector's scans once it has imported its stack, as the product's processes do
(`tools_app/runs/loops/process.py`). Python {platform.python_version()}, stock asyncio,
{os.cpu_count()} CPUs;
{versions}. Shipped HTTP stack: **{SHIPPED}**. Load average
{_load(load[0])} at the start, {_load(load[1])} at the end; the run took {elapsed:.0f} s.

{verdicts}
{CHOICE}
### (1) Per-round overhead at zero model latency (K={SEQ_ROUNDS} rounds)

Per round = run wall time / K (the final request included in the total); CPU is the
client process's. Ratios compare medians of the same invocation. The wall time of a
round includes the fake server's own time for the request (a sequential loop waits for
it; the last column of (2) gives its CPU per request), the same
for every variant: it compresses the wall ratios, while the CPU ratios are the client's
alone. "Same client" is the bare loop on the client ToolService + OpenAIChatModel ship
on: {STACK_LABELS['shipped']}.

{seq_md}

### (2) {CONC_RUNS} concurrent runs x {CONC_ROUNDS} rounds x {CONC_PARALLEL} parallel calls, \
{CONC_LATENCY_MS} ms model latency

Efficiency = ideal / batch wall, ideal = ({CONC_ROUNDS} + 1) x {CONC_LATENCY_MS} ms. One
client (or model) is shared by the 100 runs; pool limits raised to 1,000 connections.
Each client process first runs one batch of the same shape as a warm-up (a long-running
worker's state: connections open, heap grown, caches filled); its efficiency is shown
apart and not counted.

{conc_md}
{failures}"""


def _dist_version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def _load(values: tuple[float, ...]) -> str:
    return " / ".join(f"{v:.1f}" for v in values)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--no-pin", action="store_true",
                        help="do not pin the server and the clients to separate CPUs")
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker)
        return ""
    settings: dict[str, Any] = (
        {"seq_reps": 1, "runs": 2, "warmup": 1, "conc_reps": 1, "batches": 1} if args.quick
        else {"seq_reps": 3, "runs": 6, "warmup": 2, "conc_reps": 2, "batches": 2})
    pinned = len(os.sched_getaffinity(0)) >= 2 and not args.no_pin
    settings["pinned"] = pinned
    client_cpu, server_cpu = (0, 1) if pinned else (None, None)
    started, load_start = time.perf_counter(), os.getloadavg()
    seq_vs, conc_vs = seq_variants(), conc_variants()
    server = FakeServer(server_cpu)
    seq: list[Sample] = []
    conc: list[Sample] = []
    try:
        reps = max(settings["seq_reps"], settings["conc_reps"])
        for rep in range(reps):
            jobs: list[tuple[Variant, str]] = []
            if rep < settings["seq_reps"]:
                jobs += [(v, "seq") for v in rotated(seq_vs, rep)]
            if rep < settings["conc_reps"]:
                jobs += [(v, "conc") for v in rotated(conc_vs, rep)]
            for variant, phase in jobs:
                sample = run_worker(server, variant, phase, settings, client_cpu)
                (seq if phase == "seq" else conc).append(sample)
                print(f"  {phase} {variant.name}: done", file=sys.stderr, flush=True)
    finally:
        server.stop()
    markdown = render(seq, conc, seq_vs, conc_vs, settings, time.perf_counter() - started,
                      (load_start, os.getloadavg()))
    return write_result("providers", markdown).read_text()


if __name__ == "__main__":
    output = main()
    if output:
        print(output)
