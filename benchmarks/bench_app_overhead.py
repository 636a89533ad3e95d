"""What the application adds to the engine, in CPU per round, on the product-path scenario.

The same runs are executed twice in one process against the product's fake
OpenAI-compatible server (its own process, model `fake-k5-p2-l200`: 5 rounds of 2
parallel `get_weather` calls, then a text answer, 200 ms per reply):

- engine alone: `ToolService.chat()` with the run's engine (`engine_for_snapshot`: the
  same provider adapter, shared HTTP client and tool), no observer, no database;
- application: `runner.execute_run` as a worker runs it (claim, history, the recorder's
  batches, the heartbeat, notifications, the end), each run in a lane of the in-process
  backend, on SQLite.

CPU is this process's user + system time (`time.process_time`) over the scenario,
divided by the model calls made (6 per run); the fake server's CPU is not in it. The
recorder's own share is the thread CPU time spent in `batch_writer.write_group`.
Efficiency = the ideal 1,200 ms / a run's wall time (the engine alone: its `chat()`;
the application: `Run.wall_ms`), median over the runs: the engine alone's is the
ceiling the product-path benchmark's efficiency can reach on the same machine.

Run: python -m benchmarks.bench_app_overhead [--runs 1,10,50]
Results: docs/benchmarks/app-overhead.md
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import time
from collections.abc import Callable, Coroutine
from typing import Any

from benchmarks.common import LOOP_CHECKS_UNFLAGGED, setup_django, write_result

ROUNDS_PER_RUN = 6
REPEATS = 3
IDEAL_MS = 1200.0  # 6 model replies of 200 ms


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", default="1,10,50")
    args = parser.parse_args()
    counts = [int(x) for x in args.runs.split(",")]
    os.environ["AGENTFORGE_OUTBOUND_ALLOW_LOOPBACK"] = "1"  # the fake server is local
    setup_django(allowed_hosts="127.0.0.1")
    rows = measure_all(counts)
    print(write_result("app-overhead", report(rows)).read_text())


def measure_all(counts: list[int]) -> list[dict[str, Any]]:
    from django.core.management import call_command

    from benchmarks.processes import FakeLLM
    from benchmarks.product_path_workload import MODEL
    from tools_app.models import ErrorPolicy, ModelEndpoint, ToolRegistration
    from tools_app.runs import services, tasks

    # Executed here, not by a worker (run_create enqueues through tasks.enqueue_run).
    tasks.enqueue_run = lambda run_id: None
    fake = FakeLLM()
    try:
        wait_for_port(fake.url)
        call_command("seed_demo", verbosity=0)
        endpoint = ModelEndpoint.objects.create(name="bench-overhead", kind="openai",
                                                base_url=fake.url, model=MODEL)
        tools = [ToolRegistration.objects.get(name="get_weather")]
        policy = ErrorPolicy.objects.order_by("pk").first()
        assert policy is not None  # seed_demo made the demo policies
        ErrorPolicy.objects.filter(pk=policy.pk).update(**LOOP_CHECKS_UNFLAGGED)
        policy.refresh_from_db()

        def new_runs(n: int) -> list[Any]:
            return [services.run_create(user=None, endpoint=endpoint, tools=tools,
                                        policy=policy,
                                        messages=services.conversation(user_message="Weather?"))
                    for _ in range(n)]

        scenario(engine_alone, new_runs(2))  # imports, first connections
        scenario(application, new_runs(2))
        return [measure(count, new_runs) for count in counts]
    finally:
        fake.process.terminate()
        fake.process.wait(timeout=10)


def measure(count: int, new_runs: Callable[[int], list[Any]]) -> dict[str, Any]:
    from tools_app.models import Run
    from tools_app.runs.worker import batch_writer

    engine_cpu, app_cpu, recorder_cpu, batches, groups = [], [], [], [], []
    engine_walls: list[float] = []
    app_walls: list[float] = []
    # The loop groups' handler is `write_group`, bound when the module was imported.
    real = batch_writer._WRITERS.handle
    spent = {"cpu": 0.0, "batches": 0, "groups": 0}

    def timed(group: Any) -> Any:
        started = time.thread_time()
        try:
            return real(group)
        finally:
            spent["cpu"] += time.thread_time() - started
            spent["batches"] += len(group)
            spent["groups"] += 1

    batch_writer._WRITERS.handle = timed
    try:
        for _ in range(REPEATS):
            cpu, walls = scenario(engine_alone, new_runs(count))
            engine_cpu.append(cpu / (count * ROUNDS_PER_RUN))
            engine_walls += walls
            spent.update(cpu=0.0, batches=0, groups=0)
            runs = new_runs(count)
            cpu, _ = scenario(application, runs)
            app_cpu.append(cpu / (count * ROUNDS_PER_RUN))
            app_walls += [run.wall_ms for run in Run.objects.filter(pk__in=[r.pk for r in runs])
                          if run.wall_ms is not None]
            recorder_cpu.append(spent["cpu"] / (count * ROUNDS_PER_RUN))
            batches.append(spent["batches"] / (count * ROUNDS_PER_RUN))
            groups.append(spent["groups"] / (count * ROUNDS_PER_RUN))
    finally:
        batch_writer._WRITERS.handle = real
    row = {"runs": count, "engine_ms": statistics.median(engine_cpu) * 1000,
           "app_ms": statistics.median(app_cpu) * 1000,
           "recorder_ms": statistics.median(recorder_cpu) * 1000,
           "batches": statistics.median(batches), "groups": statistics.median(groups),
           "load": os.getloadavg()[0],
           "engine_efficiency": IDEAL_MS / statistics.median(engine_walls),
           "app_efficiency": IDEAL_MS / statistics.median(app_walls)}
    print(row, flush=True)
    return row


def scenario(body: Callable[[list[Any]], Coroutine[Any, Any, list[float]]],
             runs: list[Any]) -> tuple[float, list[float]]:
    """CPU seconds of this process while `body` drives `runs` at once, and what it
    reports (the engine alone: each run's wall time in ms)."""
    started = time.process_time()
    walls = asyncio.run(body(runs))
    return time.process_time() - started, walls


async def engine_alone(runs: list[Any]) -> list[float]:
    from tools_app.runs.loops.provider_clients import PROVIDER_CLIENTS
    from tools_app.runs.snapshot.engine import engine_for_snapshot
    from tools_app.runs.snapshot.model import snapshot_of

    async def one(run: Any) -> float:
        started = time.perf_counter()
        snapshot = snapshot_of(run)
        engine = engine_for_snapshot(snapshot)
        await engine.service.chat(engine.model, snapshot.chat_messages(),
                                  snapshot.request_parameters())
        return (time.perf_counter() - started) * 1000

    walls = await asyncio.gather(*(one(run) for run in runs))
    await PROVIDER_CLIENTS.aclose_this_loop()  # this loop ends with the scenario
    return list(walls)


async def application(runs: list[Any]) -> list[float]:
    from tools_app.runs.loops import task_backend
    from tools_app.runs.worker.runner import execute_run

    futures = [task_backend.submit(execute_run(str(run.pk))) for run in runs]
    statuses = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
    if set(statuses) != {"succeeded"}:
        raise RuntimeError(f"runs did not all succeed: {statuses}")
    return []  # their wall times are stored (Run.wall_ms)


def wait_for_port(url: str) -> None:
    port = int(url.split(":")[2].split("/")[0])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the fake provider server did not start")


def report(rows: list[dict[str, Any]]) -> str:
    lines = [
        "## What the application adds to the engine (CPU per round)",
        "",
        "`benchmarks/bench_app_overhead.py`: the product-path scenario (5 rounds of 2",
        "parallel `get_weather` calls and a text answer from the fake OpenAI-compatible",
        "server, 200 ms per reply) executed in one process, first by the engine alone",
        "(`ToolService.chat()` with the run's engine, no observer, no database), then as a",
        "worker executes runs (`runner.execute_run` in the in-process backend's lanes,",
        "SQLite). CPU = this process's user + system time / model calls (6 per run),",
        f"median of {REPEATS}; the recorder's share is its writer's thread CPU in",
        "`batch_writer.write_group` (its groups of runs' batches, each in one",
        "transaction: docs/ARCHITECTURE.md).",
        "Efficiency = the ideal 1,200 ms / a run's wall time, median over the runs (the",
        "engine alone: its `chat()`; the application: `Run.wall_ms`): the engine alone's",
        "is the ceiling the product path can reach on this machine. Tables from different",
        "runs may come from different machines: compare the rows of one table (the engine",
        "alone's column says how fast the machine was).",
        "2 CPUs shared with other work (the 1-minute load average is given).",
        "",
        "| concurrent runs | engine alone | application | added by the application "
        "| of which the recorder's writes | batches per round | groups per round "
        "| efficiency: engine alone / application | load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['runs']} | {row['engine_ms']:.2f} ms | {row['app_ms']:.2f} ms | "
            f"**{row['app_ms'] - row['engine_ms']:.2f} ms** | {row['recorder_ms']:.2f} ms | "
            f"{row['batches']:.1f} | {row['groups']:.2f} | {row['engine_efficiency']:.1%} / "
            f"{row['app_efficiency']:.1%} | {row['load']:.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
