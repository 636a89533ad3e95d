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
made. Results go to docs/benchmarks/providers.md. The workload and the variants are
providers_variants.py, the report providers_report.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks.common import ROOT, write_result
from benchmarks.providers_report import render
from benchmarks.providers_variants import (
    API_KEY,
    CONC_LATENCY_MS,
    CONC_PARALLEL,
    CONC_ROUNDS,
    CONC_RUNS,
    PROMPT,
    SEQ_PARALLEL,
    SEQ_ROUNDS,
    TOOLS,
    WORKER_TIMEOUT_S,
    Sample,
    Variant,
    conc_variants,
    get_weather,
    seq_variants,
)

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
            message: dict[str, Any] = (await response.json())["choices"][0]["message"]
            return message

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
        message: dict[str, Any] = response.json()["choices"][0]["message"]
        return message

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
