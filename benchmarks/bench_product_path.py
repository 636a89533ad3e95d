"""The product's own path: runs started with POST /api/runs, as a user starts them.

A real server on loopback (daphne on a fresh database, migrated and seeded through
`manage.py`) and the product's fake OpenAI-compatible server (`python -m
tools_app.fake_llm`, a process of its own) as the endpoint. The endpoint's model name
picks the fake server's built-in reply: `fake-k5-p2-l200` is 5 rounds of 2 parallel
`get_weather` calls, then a text answer, each reply after 200 ms. So a run makes 6 model
calls and its ideal wall time is 6 x 200 = 1,200 ms; the tool itself takes microseconds.

Per scenario (1 / 20 / 50 / 100 runs started at once; 1 run is repeated for samples):
- efficiency = ideal / the run's wall time (`Run.wall_ms`: started -> finished, as the
  run page shows it), the median over the runs (and the worst run);
- from emit = a RunEvent's `created_at` minus the engine event's own time (`at`): how
  long the application takes to store what the engine reported (p50 / p95 / max over
  every event of every run that has an `at`);
- server CPU per round: the CPU time (user + system, from /proc) of the processes that
  execute the runs and serve the API, divided by the rounds executed (6 per run);
- peak memory: each process's peak resident set (VmHWM) after the scenario.

Configurations: embedded (SQLite, the in-memory channel layer, the worker inside
daphne) and scale-out (PostgreSQL, Redis, one daphne, two `manage.py db_worker
--concurrency 50`); the scale-out one is skipped when PostgreSQL or Redis is not
reachable on loopback. "database is locked" lines in the server logs are counted.

Run: python -m benchmarks.bench_product_path [--only embedded|scaleout] [--runs 1,20,50]
     [--busy-cores N] [--name FILE]
`--busy-cores 1` is the headroom check: the same with one CPU kept busy by another
process throughout. `--name` writes docs/benchmarks/FILE.md instead of product-path.md.

The variant measured (issue 39): the hand-built parts by default; in this process's
environment (the servers it starts inherit it, benchmarks/processes.base_env),
AGENTFORGE_WRITE_PATH=orm (the ORM's write path), AGENTFORGE_GROUP_COMMIT=off (each
run's batch and claim alone) or AGENTFORGE_ASGI_HANDLER=django (Django's own handler)
selects a plain alternative. The report says which; give each its own `--name`.

The workload and a scenario's `Outcome` are product_path_workload.py; the report
product_path_report.py.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.common import ROOT, UNFLAG_LOOPS_CODE, percentile, write_result
from benchmarks.processes import (
    DAPHNE,
    PYTHON,
    FakeLLM,
    base_env,
    cpu_seconds,
    free_port,
    machine_jiffies,
    manage,
    peak_rss_mb,
    services_cpu,
    stop,
)
from benchmarks.product_path_report import (
    chosen_variants,
    describe,
    report,
    unknown_variants,
)
from benchmarks.product_path_workload import (
    DEFAULT_RUNS,
    ENDPOINT,
    LARGE_REPEATS,
    LARGE_RUNS,
    MODEL,
    MODEL_CALLS,
    POLL_S,
    SCENARIO_TIMEOUT,
    SINGLE_REPEATS,
    START_TIMEOUT,
    TERMINAL,
    TOOLS,
    WARM_UP_WAVES,
    WORKER_CONCURRENCY,
    WORKERS,
    Outcome,
    Result,
)

POSTGRES_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
BENCH_DATABASE = "agentforge_perfbench"
REDIS_URL = "redis://127.0.0.1:6379/9"

# The headroom check's other work (--busy-cores): a CPU kept busy, for at most this long
# should the benchmark die without stopping it.
BUSY_LOOP = "import time\nend = time.monotonic() + 1800\nwhile time.monotonic() < end: pass"

SETUP_CODE = UNFLAG_LOOPS_CODE + """
import os
from tools_app.web.api.tokens import create_token
from django.contrib.auth import get_user_model
from tools_app.models import ModelEndpoint
user = get_user_model().objects.create_user("bench", is_staff=True)
_, token = create_token(user, "bench")
ModelEndpoint.objects.create(name=os.environ["BENCH_ENDPOINT"], kind="openai",
                             base_url=os.environ["BENCH_BASE_URL"],
                             model=os.environ["BENCH_MODEL"])
print("BENCH " + token)
"""


# -- processes -------------------------------------------------------------------------


@dataclass
class Server:
    base_url: str
    token: str
    processes: dict[str, subprocess.Popen[bytes]]
    logs: list[Path]
    fake_pid: int
    # How many processes have executed a run (scale-out: the db_workers that claimed a
    # task); None where one process executes them all.
    workers_that_ran: Callable[[], int] | None = None
    workers: int = 1

    def cpu(self) -> dict[str, float]:
        return {name: cpu_seconds(p.pid) for name, p in self.processes.items()}

    def others_cpu(self) -> dict[str, float]:
        """The machine's other work for the scenario: the fake provider, the database
        and the cache servers (not counted in the server's CPU)."""
        return {"fake provider": cpu_seconds(self.fake_pid), **services_cpu()}

    def peak_mb(self) -> dict[str, float]:
        return {name: peak_rss_mb(p.pid) for name, p in self.processes.items()}

    def exits(self) -> list[str]:
        """Processes that exited while measured, with the end of their logs (the logs
        are deleted with the throwaway directory)."""
        notes = []
        for (name, process), log in zip(self.processes.items(), self.logs, strict=True):
            if process.poll() is not None:
                tail = " / ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
                notes.append(f"{name} exited ({process.returncode}): {tail[-600:]}")
        return notes

    def locked_lines(self) -> int:
        return sum(log.read_text(errors="replace").count("database is locked")
                   for log in self.logs if log.exists())


@contextmanager
def serve(env: dict[str, str], workdir: Path, *, workers: int) -> Iterator[Server]:
    fake = FakeLLM()
    processes: dict[str, subprocess.Popen[bytes]] = {"fake_llm": fake.process}
    logs: list[Path] = []
    try:
        manage(env, "migrate", "--noinput", "-v0")
        manage(env, "seed_demo")
        out = manage(env, "shell", "-c", SETUP_CODE, extra={
            "BENCH_ENDPOINT": ENDPOINT, "BENCH_BASE_URL": fake.url, "BENCH_MODEL": MODEL})
        token = next(x for x in out.splitlines() if x.startswith("BENCH ")).split()[1]
        port = free_port()

        def start(name: str, argv: list[str]) -> None:
            log = workdir / f"{name}.log"
            logs.append(log)
            with log.open("wb") as out:
                processes[name] = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out,
                                                   stderr=subprocess.STDOUT)

        start("daphne", [DAPHNE, "-e", f"tcp:port={port}:interface=127.0.0.1:backlog=1024",
                         "agentforge_web.asgi:application"])
        for index in range(workers):
            start(f"db_worker{index + 1}", [
                PYTHON, "manage.py", "db_worker", "--no-reload", "--no-startup-delay",
                "--concurrency", str(WORKER_CONCURRENCY)])
        server = Server(f"http://127.0.0.1:{port}", token,
                        {k: v for k, v in processes.items() if k != "fake_llm"}, logs,
                        fake.process.pid, workers=max(workers, 1))
        wait_until_up(server)
        yield server
    finally:
        for process in processes.values():
            stop(process)


def wait_until_up(server: Server) -> None:
    async def probe() -> bool:
        async with aiohttp.ClientSession() as http:
            try:
                async with http.get(f"{server.base_url}/api/runs",
                                    headers=auth(server)) as response:
                    return response.status == 200
            except aiohttp.ClientError:
                return False

    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        for name, process in server.processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited ({process.returncode})")
        if asyncio.run(probe()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"the server did not answer within {START_TIMEOUT} s")


def auth(server: Server) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.token}"}


# -- one scenario ----------------------------------------------------------------------


async def start_run(http: aiohttp.ClientSession, server: Server) -> str:
    """The new run's id, or "!" and why it could not be started (counted, reported)."""
    body = {"endpoint": ENDPOINT, "tools": TOOLS,
            "messages": [{"role": "user", "content": "What is the weather?"}]}
    async with http.post(f"{server.base_url}/api/runs", json=body,
                         headers=auth(server)) as response:
        data = await response.json()
        if response.status != 201:
            return f"!{response.status} {data.get('error', {}).get('code', data)}"
        return str(data["id"])


async def wait_finished(http: aiohttp.ClientSession, server: Server, run_ids: list[str],
                        ) -> dict[str, dict[str, Any]]:
    """Wait for the runs one after another, each by id: they finish at about the same
    time, so this costs the server a few requests, not a page of every run per poll
    (which would weigh in its CPU per round)."""
    deadline = time.monotonic() + SCENARIO_TIMEOUT
    done: dict[str, dict[str, Any]] = {}
    for run_id in run_ids:
        while time.monotonic() < deadline:
            async with http.get(f"{server.base_url}/api/runs/{run_id}",
                                headers=auth(server)) as response:
                run = await response.json() if response.status == 200 else {}
            if run.get("status") in TERMINAL:
                done[run_id] = run
                break
            await asyncio.sleep(POLL_S)
    return done


async def emit_delays(http: aiohttp.ClientSession, server: Server, run_id: str) -> list[float]:
    delays: list[float] = []
    after = 0
    for _ in range(100):
        async with http.get(f"{server.base_url}/api/runs/{run_id}/events?after={after}",
                            headers=auth(server)) as response:
            data = await response.json()
        if not data["events"]:
            break
        for event in data["events"]:
            at = event["payload"].get("at")
            if isinstance(at, int | float):
                created = datetime.fromisoformat(event["created_at"]).timestamp()
                delays.append((created - float(at)) * 1000)
        after = data["last_seq"]
    return delays


async def scenario(server: Server, runs: int) -> Outcome:
    outcome = Outcome(runs=runs)
    load_before = os.getloadavg()[0]
    cpu_before, others_before, machine_before = (server.cpu(), server.others_cpu(),
                                                 machine_jiffies())
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=60)) as http:
        started = list(await asyncio.gather(*(start_run(http, server) for _ in range(runs))))
        run_ids = [x for x in started if not x.startswith("!")]
        outcome.start_errors = [x[1:] for x in started if x.startswith("!")]
        done = await wait_finished(http, server, run_ids)
        cpu_after, others_after, machine_after = (server.cpu(), server.others_cpu(),
                                                  machine_jiffies())
        outcome.peak_mb = server.peak_mb()
        outcome.load = (load_before, os.getloadavg()[0])
        for run_id in run_ids:
            run = done.get(run_id)
            if run is None:
                continue
            outcome.finished += 1
            outcome.failed += run["status"] != "succeeded"
            if run.get("wall_ms") is not None:
                outcome.walls_ms.append(float(run["wall_ms"]))
            if run.get("started_at"):
                outcome.queued_ms.append(seconds_between(run["created_at"],
                                                         run["started_at"]) * 1000)
            outcome.from_emit_ms += await emit_delays(http, server, run_id)
    outcome.cpu_s = {k: cpu_after[k] - cpu_before[k] for k in cpu_after}
    outcome.others_s = {k: others_after[k] - others_before[k] for k in others_after}
    outcome.machine = (machine_after[0] - machine_before[0],
                       machine_after[1] - machine_before[1])
    outcome.rounds = outcome.finished * MODEL_CALLS
    return outcome


def seconds_between(earlier: str, later: str) -> float:
    return (datetime.fromisoformat(later) - datetime.fromisoformat(earlier)).total_seconds()


def merged(outcomes: list[Outcome]) -> Outcome:
    first = outcomes[0]
    total = Outcome(runs=first.runs, load=(first.load[0], outcomes[-1].load[1]))
    for o in outcomes:
        total.walls_ms += o.walls_ms
        total.queued_ms += o.queued_ms
        total.from_emit_ms += o.from_emit_ms
        total.finished += o.finished
        total.failed += o.failed
        total.rounds += o.rounds
        for k, v in o.cpu_s.items():
            total.cpu_s[k] = total.cpu_s.get(k, 0.0) + v
        for k, v in o.others_s.items():
            total.others_s[k] = total.others_s.get(k, 0.0) + v
        total.machine = (total.machine[0] + o.machine[0], total.machine[1] + o.machine[1])
        total.peak_mb = o.peak_mb
        total.start_errors += o.start_errors
    return total


def warm_up(server: Server) -> None:
    """Runs not counted, until every process that executes runs has run one (its first
    run imports and connects): two at a time, and a woken db_worker claims every task
    ready, so one wave can leave the other worker cold."""
    for _ in range(WARM_UP_WAVES):
        print(f"  warm-up: {describe(asyncio.run(scenario(server, 2)))}", flush=True)
        if server.workers_that_ran is None or server.workers_that_ran() >= server.workers:
            return
    raise RuntimeError(f"a db_worker ran none of {WARM_UP_WAVES} warm-up waves")


def run_config(server: Server, counts: list[int]) -> list[Outcome]:
    warm_up(server)
    outcomes = []
    for runs in counts:
        repeats = (SINGLE_REPEATS if runs == 1 else LARGE_REPEATS if runs >= LARGE_RUNS
                   else 1)
        each = []
        for _ in range(repeats):
            each.append(asyncio.run(scenario(server, runs)))
            if repeats > 1:
                time.sleep(1.0)  # as between scenarios of different sizes
        outcome = merged(each)
        outcome.each_p95_ms = [percentile(o.from_emit_ms, 95) for o in each]
        print(f"  {runs} runs: {describe(outcome)}", flush=True)
        outcomes.append(outcome)
        time.sleep(1.0)  # let the previous scenario's stragglers (notifications) settle
    return outcomes


# -- configurations --------------------------------------------------------------------


def embedded(counts: list[int]) -> Result:
    workdir = Path(tempfile.mkdtemp(prefix="agentforge-bench-product-"))
    try:
        env = base_env(f"sqlite:///{workdir / 'bench.sqlite3'}", workdir,
                       AGENTFORGE_EMBEDDED_WORKER="1")
        with serve(env, workdir, workers=0) as server:
            outcomes = run_config(server, counts)
            return outcomes, server.locked_lines(), server.exits()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def scale_out(counts: list[int]) -> Result | str:
    try:
        import psycopg
        import redis
    except ImportError as exc:
        return f"skipped: {exc}"
    try:
        client = redis.Redis.from_url(REDIS_URL, socket_timeout=2)
        client.flushdb()
        admin = psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=3)
    except Exception as exc:  # any failure to reach them means "skip"
        return f"skipped: PostgreSQL or Redis is not reachable on loopback ({exc})"
    workdir = Path(tempfile.mkdtemp(prefix="agentforge-bench-product-"))
    try:
        admin.execute(f'DROP DATABASE IF EXISTS "{BENCH_DATABASE}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{BENCH_DATABASE}"')
        database_url = f"postgresql://postgres@127.0.0.1:5432/{BENCH_DATABASE}"
        env = base_env(database_url, workdir,
                       REDIS_URL=REDIS_URL, TASK_BACKEND="database",
                       AGENTFORGE_EMBEDDED_WORKER="0")
        with serve(env, workdir, workers=WORKERS) as server:
            server.workers_that_ran = lambda: workers_that_ran(database_url)
            outcomes = run_config(server, counts)
            return outcomes, server.locked_lines(), server.exits()
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{BENCH_DATABASE}" WITH (FORCE)')
        admin.close()
        client.flushdb()
        shutil.rmtree(workdir, ignore_errors=True)


def workers_that_ran(database_url: str) -> int:
    """The db_workers that have claimed a task (django-tasks-db keeps their ids)."""
    import psycopg

    with psycopg.connect(database_url, connect_timeout=3) as connection:
        row = connection.execute(
            "SELECT count(DISTINCT worker) FROM django_tasks_database_dbtaskresult,"
            " jsonb_array_elements_text(worker_ids) AS worker").fetchone()
    return int(row[0]) if row else 0


@contextmanager
def busy_cores(count: int) -> Iterator[None]:
    """`count` processes of other work, each keeping a CPU busy while the benchmark runs:
    the product measured on a machine with that many CPUs fewer for it."""
    spinners = [subprocess.Popen([PYTHON, "-c", BUSY_LOOP]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            stop(spinner)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=["embedded", "scaleout"])
    parser.add_argument("--runs", default=",".join(map(str, DEFAULT_RUNS)))
    parser.add_argument("--name", default="product-path",
                        help="the result file in docs/benchmarks (without .md)")
    parser.add_argument("--busy-cores", type=int, default=0, choices=range(os.cpu_count() or 1),
                        help="keep this many CPUs busy with other work throughout (headroom)")
    args = parser.parse_args()
    for problem in unknown_variants():
        parser.error(problem)
    print(", ".join(f"{name}={value}" for name, value in chosen_variants().items()),
          flush=True)
    counts = [int(x) for x in args.runs.split(",")]
    started = time.monotonic()
    results: dict[str, Result | str] = {}
    with busy_cores(args.busy_cores):
        if args.only != "scaleout":
            print("embedded", flush=True)
            results["embedded"] = embedded(counts)
        if args.only != "embedded":
            print("scale-out", flush=True)
            results["scale-out"] = scale_out(counts)
    text = report(results, time.monotonic() - started, args.busy_cores)
    print(write_result(args.name, text).read_text())


if __name__ == "__main__":
    main()
