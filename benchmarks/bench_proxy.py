"""The recording proxy's added latency: the same request sent to the fake provider
directly and through `/proxy/<endpoint>/v1/chat/completions`, as pairs (their order
alternating), by 1 and by 50 concurrent conversations.

A real server on loopback (daphne, the embedded default: SQLite, the recorder process
the server starts) on a fresh database, and the fake provider (`python -m
tools_app.fake_llm`, a process of its own, no added latency) as the endpoint. Measured
per request with aiohttp: non-streaming, until the whole body is read; streaming, until
the first byte of the body (time to first byte). Added latency = a proxied percentile
minus the direct one. Each conversation names its run (`X-AgentForge-Run`, a new one
every ROUNDS_PER_RUN requests), so its requests are recorded as the rounds of runs while
the measurement goes on. For scale, Django's request path alone is measured too, and
a bare pass-through on the same server stack (benchmarks/passthrough_app.py on daphne):
what any proxy served this way adds at least.

And what recording a long agent costs: tool loops through the proxy (the fake provider
calling a tool each round, the client sending every result so far back, as an agent
does), one of LONG_ROUNDS rounds against LONG_ROUNDS / 25 of 25, with the recorder
process's CPU time and how long after the last answer the recording caught up.

Run: python -m benchmarks.bench_proxy [--pairs 300] [--concurrent 1,50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import aiohttp

from benchmarks.common import ROOT, percentile, write_result
from benchmarks.processes import (
    DAPHNE,
    PYTHON,
    base_env,
    cpu_seconds,
    free_port,
    manage,
    stop,
)

START_TIMEOUT = 60.0
ENDPOINT = "bench-proxy"
WARM_UP_PAIRS = 20
ROUNDS_PER_RUN = 10
# The fake provider's text reply after LATENCY_MS (its model-name convention; no tools
# are offered): a provider takes time to answer, and the record of an exchange is
# made while the conversation's next request waits for its answer.
LATENCY_MS = 50
MODEL = f"fake-k1-p1-l{LATENCY_MS}"
FLOOR_SAMPLES = 300
MIN_PAIRS_PER_CONVERSATION = 20
LONG_ROUNDS = 100  # tool rounds of the long agent
SHORT_ROUNDS = 25
RESULT_BYTES = 2_000  # each tool result's size
IDLE_SECONDS = 0.5  # the recorder is caught up once its CPU time stops moving this long
LOOKUP_TOOL = {"type": "function", "function": {
    "name": "lookup", "description": "Look something up",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                   "required": ["query"]}}}
SETUP_CODE = """
import json, os
from django.contrib.auth.models import User
from tools_app.models import ModelEndpoint
from tools_app.web.api.tokens import create_token
user = User.objects.create_user("proxy-bench", password=None)
ModelEndpoint.objects.create(name=os.environ["BENCH_ENDPOINT"], kind="openai",
                             base_url=os.environ["BENCH_PROVIDER"], model="fake-model",
                             api_key_env="BENCH_PROVIDER_API_KEY")
print("BENCH " + json.dumps({"token": create_token(user, "bench")[1]}))
"""


@dataclass
class Samples:
    direct: list[float]
    proxied: list[float]

    def row(self, label: str) -> str:
        d50, d95 = percentile(self.direct, 50), percentile(self.direct, 95)
        p50, p95 = percentile(self.proxied, 50), percentile(self.proxied, 95)
        return (f"| {label} | {len(self.proxied)} | {d50:.2f} | {d95:.2f} | {p50:.2f} | "
                f"{p95:.2f} | **{p50 - d50:.2f}** | **{p95 - d95:.2f}** |")


@contextmanager
def servers(workdir: Path) -> Iterator[tuple[str, str, str, str, int]]:
    """(the provider's base URL, the product's root URL, an API token, the bare
    pass-through's base URL, the product server's pid)."""
    provider_port, product_port, bare_port = free_port(), free_port(), free_port()
    provider = f"http://127.0.0.1:{provider_port}/v1"
    env = base_env(f"sqlite:///{workdir / 'bench.sqlite3'}", workdir,
                   BENCH_PROVIDER_API_KEY="sk-bench-provider-key")
    manage(env, "migrate", "--noinput", "-v0")
    out = manage(env, "shell", "-c", SETUP_CODE,
                 extra={"BENCH_ENDPOINT": ENDPOINT, "BENCH_PROVIDER": provider})
    token = json.loads(next(x for x in out.splitlines()
                            if x.startswith("BENCH ")).removeprefix("BENCH "))["token"]
    processes = []
    try:
        for name, argv in (
                ("fake", [PYTHON, "-m", "tools_app.fake_llm", "--port", str(provider_port),
                          "--record-limit", "0"]),
                ("daphne", [DAPHNE, "-b", "127.0.0.1", "-p", str(product_port),
                            "agentforge_web.asgi:application"]),
                ("bare", [DAPHNE, "-b", "127.0.0.1", "-p", str(bare_port),
                          "benchmarks.passthrough_app:app"])):
            log = (workdir / f"{name}.log").open("wb")
            processes.append(subprocess.Popen(
                argv, cwd=ROOT, env={**env, "PASSTHROUGH_UPSTREAM": provider.removesuffix("/v1")},
                stdout=log, stderr=subprocess.STDOUT))
        product, bare = f"http://127.0.0.1:{product_port}", f"http://127.0.0.1:{bare_port}"
        _wait_until_up(f"{provider}/models", f"{product}/api/runs", f"{bare}/v1/models", token)
        yield provider, product, token, bare, processes[1].pid
    finally:
        for process in processes:
            stop(process)


def _wait_until_up(*urls_and_token: str) -> None:
    *urls, token = urls_and_token
    deadline = time.monotonic() + START_TIMEOUT
    for url in urls:
        while True:
            request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
            try:
                with urllib.request.urlopen(request, timeout=2):
                    break
            except urllib.error.HTTPError:
                break  # it answers
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{url} did not answer within {START_TIMEOUT} s") from exc
                time.sleep(0.1)


async def _timed(session: aiohttp.ClientSession, url: str, headers: dict[str, str],
                 body: dict[str, object], *, stream: bool) -> float:
    """Milliseconds until the whole body (or, streaming, its first byte) arrived."""
    started = time.perf_counter()
    async with session.post(url, json=body, headers=headers) as response:
        if response.status != 200:
            raise RuntimeError(f"{url}: HTTP {response.status} {await response.text()}")
        if stream:
            await response.content.readany()
            elapsed = time.perf_counter() - started
            await response.read()
            return elapsed * 1000
        await response.read()
        return (time.perf_counter() - started) * 1000


async def _conversation(session: aiohttp.ClientSession, provider: str, product: str,
                        token: str, index: int, pairs: int, *, stream: bool,
                        samples: Samples | None, bare: str | None = None) -> None:
    """Pairs of the same request, direct and through the product's proxy (or, given
    `bare`, through the bare pass-through at that base URL)."""
    key = {"Authorization": "Bearer sk-bench-provider-key"}
    direct = (f"{provider}/chat/completions", key)
    proxy_url = f"{product}/proxy/{ENDPOINT}/v1/chat/completions"
    for pair in range(pairs):
        # A conversation of ROUNDS_PER_RUN rounds, then the next one.
        run = f"bench-{index}-{pair // ROUNDS_PER_RUN}"
        proxied = ((f"{bare}/v1/chat/completions", key) if bare is not None else
                   (proxy_url, {"Authorization": f"Bearer {token}", "X-AgentForge-Run": run}))
        body = {"model": MODEL, "stream": stream,
                "messages": [{"role": "user", "content": f"question {pair} of {index}"}]}
        order = (direct, proxied) if (pair + index) % 2 == 0 else (proxied, direct)
        for sent in order:
            elapsed = await _timed(session, *sent, body, stream=stream)
            if samples is not None:
                (samples.direct if sent is direct else samples.proxied).append(elapsed)


async def floor(product: str) -> list[float]:
    """Django's request path alone: a GET the proxy's view refuses at once (405, before
    any token lookup), through the same server."""
    url = f"{product}/proxy/{ENDPOINT}/v1/chat/completions"
    out = []
    async with aiohttp.ClientSession() as session:
        for _ in range(WARM_UP_PAIRS + FLOOR_SAMPLES):
            started = time.perf_counter()
            async with session.get(url) as response:
                await response.read()
            out.append((time.perf_counter() - started) * 1000)
    return out[WARM_UP_PAIRS:]


async def measure(provider: str, product: str, token: str, concurrent: int, pairs: int,
                  *, stream: bool, bare: str | None = None) -> Samples:
    samples = Samples([], [])
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(_conversation(session, provider, product, token, i,
                                             WARM_UP_PAIRS, stream=stream, samples=None,
                                             bare=bare)
                               for i in range(concurrent)))
        per_conversation = max(MIN_PAIRS_PER_CONVERSATION, pairs // concurrent)
        await asyncio.gather(*(_conversation(session, provider, product, token, i,
                                             per_conversation, stream=stream,
                                             samples=samples, bare=bare)
                               for i in range(concurrent)))
    return samples


def long_agents(product: str, token: str, server_pid: int) -> list[str]:
    """Rows of the long-agent table: the recorder's CPU for one agent of LONG_ROUNDS
    rounds, and for LONG_ROUNDS / SHORT_ROUNDS agents of SHORT_ROUNDS."""
    asyncio.run(_tool_loop(product, token, "long-warm-up", 2))
    recorder = _recorder_pid(server_pid)
    rows = []
    for agents, rounds in ((LONG_ROUNDS // SHORT_ROUNDS, SHORT_ROUNDS), (1, LONG_ROUNDS)):
        _caught_up(recorder)
        cpu = cpu_seconds(recorder)
        exchanges = sum(asyncio.run(_tool_loop(product, token, f"long-{rounds}-{n}", rounds))
                        for n in range(agents))
        answered = time.perf_counter()
        _caught_up(recorder)
        lag = time.perf_counter() - answered - IDLE_SECONDS
        used = cpu_seconds(recorder) - cpu
        rows.append(f"| {agents} x {rounds} rounds | {exchanges} | {used:.2f} s | "
                    f"{used / exchanges * 1000:.1f} ms | {max(lag, 0):.1f} s |")
        print(rows[-1], flush=True)
    return rows


async def _tool_loop(product: str, token: str, run: str, rounds: int) -> int:
    """An agent's tool loop of `rounds` tool rounds and an answer; its requests."""
    url = f"{product}/proxy/{ENDPOINT}/v1/chat/completions"
    headers = {"Authorization": f"Bearer {token}", "X-AgentForge-Run": run}
    messages: list[dict[str, object]] = [{"role": "user", "content": f"Research {run}."}]
    async with aiohttp.ClientSession() as session:
        for sent in range(1, rounds + 2):
            body = {"model": f"fake-k{rounds}-p1", "messages": messages,
                    "tools": [LOOKUP_TOOL]}
            async with session.post(url, json=body, headers=headers) as response:
                if response.status != 200:
                    raise RuntimeError(f"HTTP {response.status} {await response.text()}")
                message = (await response.json())["choices"][0]["message"]
            messages.append({k: v for k, v in message.items() if v is not None})
            calls = message.get("tool_calls") or []
            if not calls:
                return sent
            messages += [{"role": "tool", "tool_call_id": call["id"],
                          "content": json.dumps({"found": "x" * RESULT_BYTES})}
                         for call in calls]
    raise RuntimeError(f"the fake model kept calling tools past {rounds} rounds")


def _recorder_pid(server_pid: int) -> int:
    """The recorder process the server started (a child of one of its threads running
    multiprocessing's spawn entry; another may be multiprocessing's resource tracker)."""
    children = {int(pid) for task in Path(f"/proc/{server_pid}/task").iterdir()
                for pid in (task / "children").read_text().split()}  # any thread's
    for pid in sorted(children):
        if "spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
            return pid
    raise RuntimeError("the server started no recorder process")


def _caught_up(pid: int) -> None:
    """Wait until the process's CPU time stops moving for IDLE_SECONDS."""
    last = cpu_seconds(pid)
    while True:
        time.sleep(IDLE_SECONDS)
        now = cpu_seconds(pid)
        if now - last < 0.01:
            return
        last = now


def report(rows: list[str], pairs: int, floor_ms: list[float], long_rows: list[str]) -> str:
    return "\n".join([
        "# Recording proxy: added latency",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node()} "
        f"({platform.processor() or platform.machine()}, Python {platform.python_version()})."
        " The machine is shared with other work (2 cores, several concurrent jobs): "
        "percentiles, p95 above all, carry that noise.",
        "",
        "The same Chat Completions request sent to the fake provider directly and through "
        f"`/proxy/{ENDPOINT}/v1/chat/completions` (daphne, the embedded default, SQLite; "
        "the server's recorder process records every exchange meanwhile), "
        f"in pairs whose order alternates ({pairs} pairs per row, at least "
        f"{MIN_PAIRS_PER_CONVERSATION} per conversation, after {WARM_UP_PAIRS} warm-up "
        f"pairs per conversation); the provider answers after {LATENCY_MS} ms, and each "
        f"conversation names a new run every {ROUNDS_PER_RUN} requests. "
        "Non-streaming: until the whole "
        "body is read; streaming: time to first byte. Added = proxied minus direct, per "
        "percentile. Targets: p50 < 2 ms and p95 < 5 ms added. Milliseconds.",
        "",
        "| scenario | samples | direct p50 | direct p95 | proxied p50 | proxied p95 | "
        "added p50 | added p95 |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"For scale, Django's request path alone on the same server (a GET the proxy's view "
        f"refuses at once, 405, before any lookup; {len(floor_ms)} requests): p50 "
        f"{percentile(floor_ms, 50):.2f} ms, p95 {percentile(floor_ms, 95):.2f} ms. "
        "The rows 'bare pass-through' are what any proxy on this server stack adds at "
        "least: the same pairs through an ASGI app on daphne that forwards the body with "
        "one kept aiohttp session (benchmarks/passthrough_app.py: no Django, no lookup, "
        "no recording).",
        "",
        "## Recording a long agent",
        "",
        f"Tool loops through the proxy: the fake provider calls a tool each round, the "
        f"client sends every result so far back ({RESULT_BYTES:,}-byte results), as an "
        f"agent does; one agent of {LONG_ROUNDS} rounds against "
        f"{LONG_ROUNDS // SHORT_ROUNDS} of {SHORT_ROUNDS} (the same exchanges, had "
        "recording one cost the same whatever its run's length). The recorder process's "
        "CPU time, and how long after the last answer it was done recording.",
        "",
        "| agents | exchanges | recorder CPU | per exchange | recorded after the last "
        "answer |",
        "|---|---|---|---|---|",
        *long_rows,
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=300)
    parser.add_argument("--concurrent", default="1,50")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="agentforge-proxy-bench-") as tmp, \
            servers(Path(tmp)) as (provider, product, token, bare_url, server_pid):
        floor_ms = asyncio.run(floor(product))
        for concurrent in (int(c) for c in args.concurrent.split(",")):
            plural = "s" if concurrent > 1 else ""
            bare = asyncio.run(measure(provider, product, token, concurrent, args.pairs,
                                       stream=False, bare=bare_url))
            rows.append(bare.row(f"{concurrent} conversation{plural}, non-streaming, "
                                 "bare pass-through (the stack's floor)"))
            print(rows[-1], flush=True)
            for stream in (False, True):
                samples = asyncio.run(measure(provider, product, token, concurrent,
                                              args.pairs, stream=stream))
                label = (f"{concurrent} conversation{plural}, "
                         f"{'streaming (first byte)' if stream else 'non-streaming'}")
                rows.append(samples.row(label))
                print(rows[-1], flush=True)
        long_rows = long_agents(product, token, server_pid)
    print(write_result("proxy", report(rows, args.pairs, floor_ms, long_rows)))


if __name__ == "__main__":
    main()
