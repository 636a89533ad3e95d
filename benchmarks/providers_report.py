"""bench_providers' report: the two phases' tables (medians and spreads, ratios
against the bare loop on the same client, efficiency against the ideal), a fit of
efficiency against client CPU, and the markdown written to docs/benchmarks/providers.md.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

from benchmarks.providers_variants import (
    CONC_LATENCY_MS,
    CONC_PARALLEL,
    CONC_ROUNDS,
    CONC_RUNS,
    CONC_TARGET,
    IDEAL_S,
    SAME_STACK,
    SEQ_PARALLEL,
    SEQ_ROUNDS,
    SEQ_TARGET,
    SHIPPED,
    STACK_LABELS,
    Sample,
    Variant,
)


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
