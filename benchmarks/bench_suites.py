"""A suite run at scale (issue 41): 100 cases x 3 endpoints x 3 repetitions (900 runs)
against the fake provider answering each model call after 200 ms, on the embedded
default (SQLite, the in-process task backend, its worker started in this process as
daphne starts it), the suite run's driver the task a page or the API enqueues.

Each run is two model calls (a `get_weather` call, then a text answer), so the suite
run's ideal time is the concurrency bound's lower limit: 900 runs x 2 rounds x 200 ms
/ the suite run's concurrency (no run can start before one of the concurrency in flight
has ended). Reported: the wall time from the driver's enqueue to the suite run finished
(every run evaluated), its ratio to the ideal (target: within 1.5x), and each run's own
wall time (`Run.wall_ms`, median / p95) against its ideal 400 ms.

Run: python -m benchmarks.bench_suites [--concurrency 4,16] [--cases 100]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from benchmarks.common import setup_django, summary, write_result

ENDPOINTS, REPEAT, LATENCY_MS, ROUNDS_PER_RUN = 3, 3, 200, 2
TARGET_RATIO = 1.5
WEATHER_CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}


def world(cases: int) -> tuple[Any, list[str], Any]:
    """The fake provider (200 ms a reply), three endpoints on it, the demo tools, a
    default policy and a suite of `cases` cases."""
    from tools_app.fake_llm import BackgroundServer
    from tools_app.fake_llm.app import FakeLLMApp
    from tools_app.fake_llm.script import ScriptSet
    from tools_app.models import ErrorPolicy, ModelEndpoint
    from tools_app.suites.files import SuiteFile, save_suite_file
    from tools_app.tools.registry import sync_tools

    script = {"latency_ms": LATENCY_MS, "steps": [
        {"tool_calls": [WEATHER_CALL]}, {"text": "Done: {last_result}"}]}
    server = BackgroundServer(FakeLLMApp(ScriptSet.model_validate(
        {"scripts": {"weather": script}}))).start()
    names = [f"endpoint-{n}" for n in range(1, ENDPOINTS + 1)]
    for name in names:
        ModelEndpoint.objects.create(name=name, kind="openai_compatible",
                                     base_url=server.base_urls()["openai"], model="weather")
    sync_tools(["tools_app.tools.example_tools"])
    ErrorPolicy.objects.create(name="Bench policy", is_default=True)
    assertions = [{"kind": "call_sequence", "tools": ["get_weather"], "match": "exact"},
                  {"kind": "no_error"}]
    suite = save_suite_file(SuiteFile.model_validate({"name": "bench", "cases": [
        {"name": f"case-{n}", "messages": [{"role": "user", "content": f"Weather {n}?"}],
         "tools": ["get_weather"], "assertions": assertions}
        for n in range(1, cases + 1)]}))
    return server, names, suite


def measure(suite: Any, endpoints: list[str], concurrency: int) -> dict[str, Any]:
    from tools_app.models import Run, SuiteCellRun, SuiteRun, SuiteRunStatus
    from tools_app.suites.runner import suite_run_start
    from tools_app.suites.tasks import drive_suite_run

    suite_run = suite_run_start(suite=suite, config={
        "endpoints": endpoints, "repeat": REPEAT, "concurrency": concurrency})
    started = time.monotonic()
    drive_suite_run.enqueue(str(suite_run.pk))
    while SuiteRun.objects.filter(pk=suite_run.pk, status=SuiteRunStatus.RUNNING).exists():
        time.sleep(0.05)
    elapsed = time.monotonic() - started
    suite_run.refresh_from_db()
    cell_runs = SuiteCellRun.objects.filter(cell__suite_run=suite_run)
    runs = cell_runs.count()
    walls = [float(ms) for ms in Run.objects.filter(
        suite_cell_run__cell__suite_run=suite_run).values_list("wall_ms", flat=True)
        if ms is not None]
    ideal = runs * ROUNDS_PER_RUN * LATENCY_MS / 1000 / concurrency
    return {"concurrency": concurrency, "status": suite_run.status, "runs": runs,
            "passed": cell_runs.filter(passed=True).count(), "elapsed": elapsed,
            "ideal": ideal, "ratio": elapsed / ideal, "walls": summary(walls)}


def report(results: list[dict[str, Any]], cases: int) -> str:
    load = os.getloadavg()[0]
    lines = [
        "## Suite runs at scale (issue 41)", "",
        f"`benchmarks/bench_suites.py`: a {cases}-case suite x {ENDPOINTS} endpoints x "
        f"{REPEAT} repetitions ({cases * ENDPOINTS * REPEAT} runs of {ROUNDS_PER_RUN} model "
        f"calls) against the fake provider at {LATENCY_MS} ms a reply, on the embedded "
        "default (SQLite, the in-process task backend and its worker, the suite run's "
        "driver the task the suite page enqueues). Ideal = runs x rounds x latency / the "
        "suite run's concurrency (the concurrency bound's lower limit); the target is "
        f"within {TARGET_RATIO}x. Run wall = `Run.wall_ms` of each run (ideal "
        f"{ROUNDS_PER_RUN * LATENCY_MS} ms).",
        f"{os.cpu_count()} CPUs shared with other work (1-minute load average "
        f"{load:.1f} at the end).", "",
        "| Concurrency | Runs (passed) | Wall time | Ideal | Ratio | Target met | "
        "Run wall p50 / p95 |",
        "|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(
            f"| {r['concurrency']} | {r['runs']} ({r['passed']}) | {r['elapsed']:.1f} s | "
            f"{r['ideal']:.1f} s | {r['ratio']:.2f}x | "
            f"{'yes' if r['ratio'] <= TARGET_RATIO else 'no'} | "
            f"{r['walls']['p50']:.0f} / {r['walls']['p95']:.0f} ms |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="4,16",
                        help="the suite runs' concurrencies, comma-separated")
    parser.add_argument("--cases", type=int, default=100)
    args = parser.parse_args(argv)
    os.environ["TASK_BACKEND"] = "inprocess"
    os.environ["AGENTFORGE_OUTBOUND_ALLOW_LOOPBACK"] = "1"  # the fake server is local
    setup_django(allowed_hosts="127.0.0.1")
    from django.conf import settings

    from tools_app.runs.sweeps import start_embedded_worker

    assert settings.TASK_BACKEND == "inprocess", "the embedded default's task backend"
    server, endpoints, suite = world(args.cases)
    start_embedded_worker()
    try:
        results = [measure(suite, endpoints, int(c)) for c in args.concurrency.split(",")]
    finally:
        server.stop()
    for r in results:
        print(f"concurrency {r['concurrency']}: {r['elapsed']:.1f} s, ideal "
              f"{r['ideal']:.1f} s, {r['ratio']:.2f}x, {r['passed']}/{r['runs']} passed")
    print(write_result("suites", report(results, args.cases)))
    return 0 if all(r["ratio"] <= TARGET_RATIO for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
