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
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.bench_live import base_env, free_port, manage, stop
from benchmarks.common import ROOT, percentile, write_result

PYTHON = sys.executable
DAPHNE = str(Path(PYTHON).with_name("daphne"))
POSTGRES_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
BENCH_DATABASE = "agentforge_perfbench"
REDIS_URL = "redis://127.0.0.1:6379/9"

ROUNDS, PARALLEL, LATENCY_MS = 5, 2, 200
MODEL = f"fake-k{ROUNDS}-p{PARALLEL}-l{LATENCY_MS}"
MODEL_CALLS = ROUNDS + 1
IDEAL_MS = MODEL_CALLS * LATENCY_MS
ENDPOINT = "bench-product"
TOOLS = ["get_weather"]
SINGLE_REPEATS = 3
WARM_UP_WAVES = 10
# The largest scenario is repeated too, its runs pooled: one 100-run scenario's from
# emit p95 moved between 91 and 198 ms for the same code on session 21's machine (the
# runs move in step, so its events' delays come in correlated bursts).
LARGE_RUNS, LARGE_REPEATS = 100, 3
WORKERS, WORKER_CONCURRENCY = 2, 50
DEFAULT_RUNS = (1, 20, 50, 100)

# Upper bounds of waits, never measured durations.
SETUP_TIMEOUT = 60.0
START_TIMEOUT = 40.0
SCENARIO_TIMEOUT = 120.0
POLL_S = 0.5

TERMINAL = {"succeeded", "failed", "cancelled"}

# The headroom check's other work (--busy-cores): a CPU kept busy, for at most this long
# should the benchmark die without stopping it.
BUSY_LOOP = "import time\nend = time.monotonic() + 1800\nwhile time.monotonic() < end: pass"

SETUP_CODE = """
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


class FakeLLM:
    """The product's fake provider in a process of its own, on a free loopback port."""

    def __init__(self) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/v1"
        self.process = subprocess.Popen(
            [PYTHON, "-m", "tools_app.fake_llm", "--host", "127.0.0.1", "--port", str(port),
             "--record-limit", "0"], cwd=ROOT, stdout=subprocess.DEVNULL)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of the whole machine so far, in clock ticks."""
    with open("/proc/stat") as stat:
        ticks = [int(x) for x in stat.readline().split()[1:9]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return sum(ticks) - idle, sum(ticks)


SERVICES = {"postgres": "PostgreSQL", "redis-server": "Redis"}


def services_cpu() -> dict[str, float]:
    """CPU seconds so far of the database and cache servers' processes (all of them:
    PostgreSQL's backends come and go with connections)."""
    totals = dict.fromkeys(SERVICES.values(), 0.0)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/comm") as comm:
                name = SERVICES.get(comm.read().strip())
            if name is not None:
                totals[name] += cpu_seconds(int(entry.name))
        except OSError:  # the process ended meanwhile
            continue
    return totals


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


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


@dataclass
class Outcome:
    runs: int
    walls_ms: list[float] = field(default_factory=list)
    queued_ms: list[float] = field(default_factory=list)  # created -> started (claimed)
    from_emit_ms: list[float] = field(default_factory=list)
    cpu_s: dict[str, float] = field(default_factory=dict)
    others_s: dict[str, float] = field(default_factory=dict)
    machine: tuple[int, int] = (0, 0)  # busy and total clock ticks of the machine
    peak_mb: dict[str, float] = field(default_factory=dict)
    finished: int = 0
    failed: int = 0
    rounds: int = 0
    load: tuple[float, float] = (0.0, 0.0)
    start_errors: list[str] = field(default_factory=list)
    # From emit p95 of each scenario pooled here (a repeated scenario's).
    each_p95_ms: list[float] = field(default_factory=list)


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


Result = tuple[list[Outcome], int, list[str]]


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


# -- report ----------------------------------------------------------------------------


def describe(o: Outcome) -> str:
    wall = statistics.median(o.walls_ms) if o.walls_ms else float("nan")
    return (f"wall {wall:.0f} ms, efficiency {IDEAL_MS / wall:.0%}, from emit p95 "
            f"{percentile(o.from_emit_ms, 95):.0f} ms, finished {o.finished}")


def row(label: str, o: Outcome) -> str:
    wall = statistics.median(o.walls_ms) if o.walls_ms else float("nan")
    worst = max(o.walls_ms) if o.walls_ms else float("nan")
    emit = o.from_emit_ms
    cpu_ms = sum(o.cpu_s.values()) * 1000 / max(1, o.rounds)
    by_process = ", ".join(f"{k} {v * 1000 / max(1, o.rounds):.1f}" for k, v in o.cpu_s.items())
    memory = ", ".join(f"{k} {v:.0f}" for k, v in o.peak_mb.items())
    others = ", ".join(f"{k} {v * 1000 / max(1, o.rounds):.1f}" for k, v in o.others_s.items()
                       if v > 0)
    busy = o.machine[0] / o.machine[1] if o.machine[1] else float("nan")
    return (f"| {label} | {o.runs} | {o.finished - o.failed} / {o.finished} "
            f"| {wall:,.0f} ms | **{IDEAL_MS / wall:.0%}** ({IDEAL_MS / worst:.0%}) "
            f"| {percentile(emit, 50):.0f} ms | **{percentile(emit, 95):.0f} ms** "
            f"| {max(emit) if emit else float('nan'):,.0f} ms "
            f"| {percentile(o.queued_ms, 50):.0f} / {percentile(o.queued_ms, 95):.0f} ms "
            f"| {cpu_ms:.1f} ms ({by_process}) | {others or '-'} | {busy:.0%} | {memory} "
            f"| {o.load[0]:.1f} / {o.load[1]:.1f} |")


HEADER = ("| configuration | concurrent runs | succeeded / finished | median run wall "
          "| efficiency (worst run) | from emit p50 | from emit p95 | from emit max "
          "| queued p50 / p95 | server CPU per round (by process) "
          "| other CPU per round, ms | machine busy | peak RSS MB | load |\n"
          + "|---" * 14 + "|")


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


def headroom_note(busy: int) -> str:
    if not busy:
        return ""
    return (f"\n**Headroom run** (`--busy-cores {busy}`): {busy} other process(es) kept "
            f"{busy} of the {os.cpu_count()} CPUs busy for the whole benchmark, so the "
            "product, its services and the client had that much less of the machine.\n")


def report(results: dict[str, Result | str], elapsed: float, busy: int = 0) -> str:
    rows: list[str] = []
    notes: list[str] = []
    for name, result in results.items():
        if isinstance(result, str):
            notes.append(f"{name}: {result}")
            continue
        outcomes, locked, exits = result
        rows += [row(name, o) for o in outcomes]
        notes.append(f"{name}: {locked} \"database is locked\" lines in the server logs")
        notes += [f"{name}: {e}" for e in exits]
        for o in outcomes:
            if o.start_errors:
                notes.append(f"{name}, {o.runs} runs: {len(o.start_errors)} POST /api/runs "
                             f"failed: {', '.join(sorted(set(o.start_errors)))}")
            if o.runs >= LARGE_RUNS and len(o.each_p95_ms) > 1:
                notes.append(f"{name}, {o.runs} runs: from emit p95 of each scenario "
                             + ", ".join(f"{p:.0f}" for p in o.each_p95_ms) + " ms")
            if o.finished < o.runs:
                notes.append(f"{name}, {o.runs} runs: only {o.finished} finished within "
                             f"{SCENARIO_TIMEOUT:g} s")
    return f"""
## The product path: runs started with POST /api/runs

Runs started with `POST /api/runs` against the product's fake OpenAI-compatible server
(`python -m tools_app.fake_llm`, its own process), model `{MODEL}`: {ROUNDS} rounds of
{PARALLEL} parallel `get_weather` calls and a text answer, each model reply after
{LATENCY_MS} ms, so a run's ideal wall time is {MODEL_CALLS} x {LATENCY_MS} =
{IDEAL_MS:,} ms. All the runs of a scenario are started at once. **Efficiency** = ideal /
the run's wall time (`Run.wall_ms`), median over the runs (the worst run in brackets);
1 run is repeated {SINGLE_REPEATS} times, {LARGE_RUNS} runs {LARGE_REPEATS} times (their runs
pooled: one such scenario's p95 varies by tens of ms for the same code; each one's is
in the notes). **From emit** = `RunEvent.created_at` - the engine event's own time
(`at`), over every event that has one. **Queued** = the run's
`started_at` - its `created_at`: how long it waited for a worker to claim it (not in its
wall time). **Server CPU per round**
= the user + system CPU of daphne (and the db_workers) during the scenario / the model
calls made ({MODEL_CALLS} per run); **other CPU per round** the same for the machine's
other work on the scenario (the fake provider, PostgreSQL's and Redis's processes), and
**machine busy** the share of the {os.cpu_count()} CPUs busy during the scenario (all
processes, from its first POST to its last run's end, whatever else the host ran).
Each configuration starts with runs not counted, 2 at a time until every process
that executes runs has run one (its first run imports and connects). **Peak RSS** =
each process's high-water mark after the scenario. Embedded: SQLite (WAL), the
in-memory channel layer, the worker inside daphne. Scale-out: PostgreSQL, Redis, one
daphne and {WORKERS} `db_worker --concurrency {WORKER_CONCURRENCY}` (their default poll
interval, 1 s: an enqueue wakes them). Everything (the fake server, PostgreSQL, Redis,
the client) shares one machine ({os.cpu_count()} CPUs, shared with other work: the
1-minute load average before / after each scenario is given).
{headroom_note(busy)}
{HEADER}
{chr(10).join(rows)}

{chr(10).join(f"- {n}" for n in notes)}
- Total benchmark time {elapsed:.0f} s.
{NOTES}"""


# Written by hand from the measurements and the attempt described; this script does not
# re-measure it.
NOTES = """
### Targets and where they stand

Targets (2 CPUs): embedded 1 run >= 97 %, 50 runs >= 85 % with from emit p95 < 50 ms and
no "database is locked"; scale-out 1 run >= 97 %, 100 runs >= 80 %, from emit p95 < 100
ms; the application adds <= 3 ms of server CPU per round on top of the engine.

The machine changes from session to session (session 11's was about as slow as session
9's and half as fast as session 10's: the engine alone 2.3-4.8 ms of CPU a round, and
a 1-minute load of 1-2 from other work on the host before the benchmark started), and
within one session by 30-50 % from hour to hour: compare rows measured together.
`benchmarks/bench_app_overhead.py` (docs/benchmarks/app-overhead.md) measures the
ceiling, the engine alone in process with no database.

Session 25 (its changes below). Its machine was the fastest yet (app-overhead: the
engine alone in process 1.9-2.2 ms of CPU a round at 1 run, 0.6-0.8 at 50). Every
target was met in each of its five full runs with the final code (the table above is
the fifth), and in two headroom runs, `--busy-cores 1`: another process kept one of the
two CPUs busy for the whole benchmark, leaving the product, PostgreSQL, Redis, the fake
provider and the client one CPU between them. No "database is locked" in any.

| target (p95: from emit) | five full runs | two headroom runs (one CPU busy) | met |
|---|---|---|---|
| embedded, 1 run | 98 %, 2-3 ms | 98 %, 3 and 4 ms | yes |
| embedded, 50 runs | 96-98 %, 21, 33, 28, 26, 18 ms | 96 and 94 %, 19 and 23 ms | yes |
| scale-out, 1 run | 98 %, 3-4 ms | 98 %, 3 and 4 ms | yes |
| scale-out, 100 runs | 91-95 %, 29, 42, 49, 76, 30 ms | 92 and 89 %, 54 and 95 ms | yes |
| CPU added, 1 / 10 / 50 runs | 2.01 / 1.52 / 1.45 and 1.97 / 1.15 / 0.88 ms | - | yes |

The 100-run scenarios' own p95s: the full runs 40, 24, 27; 44, 49, 29; 33, 56, 39; 91,
59, 62; 28, 34, 29 ms; the headroom runs 39, 54, 68 and 57, 84, 118 ms. The fourth full
run came in a slower stretch (the servers' CPU a round at 100 runs 3.6 ms, against
2.4-3.0 in the other four). Single scenarios with part of a CPU kept busy
(a loop busy 10 of every 30 ms, 20 of 40, 30 of 40, all the time): scale-out 100 runs
52, 55, 56, 74 and 90 ms (88-92 %); embedded 50 runs with half a CPU busy 29 ms (95 %),
with a whole one 38 and 28 ms (92 and 95 %). So on this machine the product meets the
targets with half of it taken by other work; the misses of sessions 23 and 24 came on
slower hosts (session 23 measured up to 16 % of the CPUs taken as steal), where a host
that stops the machine's CPUs for stretches delays every event pending at once, which a
from-emit p95 counts.

Session 24 (its changes below). Its machine ran the application faster than session
23's (the engine alone in process 2.0-2.6 ms of CPU a round at 1 run, 0.8-1.4 at 50)
and slowed down in its second hour (the starting code's scale-out 100-run p95, in
alternating pairs, 108-125 ms in the first hour, 140-170 ms in the second). Every
target was met in its two full runs of the first hour, with the claims grouped on both
databases (a third: embedded 50 runs 73 ms, scale-out 100 runs 81 ms); not all in the
four full runs of the second hour with the final code (claims grouped on PostgreSQL
only), the table above being the third of them. "Before" is the starting code's runs
of the first hour:

| target (p95: from emit) | before / first hour, full runs / second hour, final code | met |
|---|---|---|
| embedded, 1 run | 98 %, 3 ms / 98 %, 3 and 3 ms / 97-98 %, 3-4 ms | yes |
| embedded, 50 runs | 94 %, 49 ms / 94 %, 36 and 36 / 92-97 %, 91, 60, 28, 36 | 4 of 6 |
| scale-out, 1 run | 97 %, 6 ms / 98 %, 4 and 5 / 97-98 %, 4-5 ms | yes |
| scale-out, 100 runs | 88-94 %, 98-199 / 91-92 %, 76 and 61 / 85-87 %, 108-145 | 2 of 6 |
| CPU added, 1 / 10 / 50 runs | 3.03 / 2.16 / 1.55 / 2.34-2.72 / 1.52-2.24 / 1.39-1.78 | yes |

The CPU added after the changes is every run of app-overhead (six; a seventh, at a
load of 1.0, gave 3.99 ms at 1 run). The 100-run scenarios' own p95s: the first hour's
full runs 63, 75, 85 and 56, 51, 75 ms; the second hour's 133, 162, 83; 73, 98, 132;
74, 204, 124; 125, 85, 155 ms. The same code's 100-run p95 follows the machine: four
more sets in that hour (alone, or after 20 and 50 runs: no difference) gave 88 and 90
ms where the servers' CPU a round was 4.3 and 4.5 ms, 129 and 154 ms where it was 5.4
and 5.3 ms; a diagnostic set after a two-run warm-up, 72 ms (scenarios 55, 92, 70),
its tail still in the POSTs' 0.2-0.8 s (p95 57-144 ms by 200 ms slice, 35-75 after).

Where the 100-run tail was (session 24, before the claims were grouped): by 200 ms
slice of the scenario, p95 140-245 ms in the first 0.2-0.8 s (the 100 POSTs accepted
over 450-775 ms while the runs were claimed and started), 30-110 ms after; by round,
rounds 0-1 and the runs' own events 115-190 ms, rounds 3-5 30-95 ms. A db_worker's one
database lane spent 230-370 ms of wall (32-38 ms of its CPU) on that burst's 50 claims,
each its own UPDATE and commit, then two reads, while the running runs' event groups
waited for the lane (the groups themselves 1.1-1.3 s of the lane's wall a scenario).
One 100-run scenario after only a two-run warm-up also paid a cold db_worker's first
model client (its TLS context built on the loop, 40-90 ms in its profile): both fixed
below.

Session 23 (its change below). Its machine ran the engine about as fast as session
22's (alone in process: 2.7-3.9 ms of CPU a round at 1 run, 1.5-2.1 at 50) but the
application markedly slower, and it slowed down further within the hour: the CPU added
at 50 runs 1.7-3.2 ms a round (session 22: 1.4-1.6), the 50-run application
efficiency in app-overhead 87-95 % in its first hour and 67-90 % in its second (either
version of the code), the host taking up to 16 % of the two CPUs as steal during the
benchmarks (vmstat). The table above is its full run after the change, in that second hour.
"All" is every other scenario of the session (its A/B and diagnostic runs, both
versions of the code):

| target (p95: from emit) | session 23: full run / all | met on session 23's machine |
|---|---|---|
| embedded, 1 run | 96 % (worst 93), 12 ms | no |
| embedded, 50 runs | 93 % (worst 86), 73 ms | % only |
| scale-out, 1 run | 93 % (89), 32 ms / 97 % (93), 5 ms | once in two |
| scale-out, 100 runs | 76 % (53), 579 ms / 67-88 %, 158-742 ms | no |
| CPU added ms, 1 / 10 / 50 runs | 4.60 / 3.65 / 3.17; all 3.11-4.78 / 2.91-4.38 / 1.66-3.21 | no |

The full run's 100-run scenarios: 686, 465 and 204 ms (embedded: 1327, 1471, 1326).

What a round's transaction writes on SQLite (session 23, a copy of a benchmark's
database, 200 transactions of each kind, WAL frames counted from the file's growth): one
run's round is 40 pages: the calls' INSERT 26.5 (the call table's 14 indexes about 19,
its search index 6.6), the events 10.5, the next round's row 5.4 (its request body
spills over a page), the run's row 1. In a loop, warm, that is 0.5 ms of SQLite's CPU,
the search index's trigger 0.15 of it; FTS5 with `detail=none, columnsize=0` (enough for
the words-as-prefixes search) saves 1-2 pages and no CPU: not kept. The writer's thread
CPU at 1 run (2.6 ms a round) splits into the statements' execution 0.66 ms a group, the
COMMIT 0.27, the BEGIN 0.12, and Python's preparation of the values and the batch's fold
about 0.9 (replaying one captured round batch warm, in rolled-back transactions: 1.2-1.5
ms with its SQL, so not only cold caches). Not kept: a one-entry identity cache before
the lru cache of the ids' and times' preparations (a batch's rows share its one
`created_at` and run id), no gain in that replay (best of five, three alternating pairs:
1,159-1,543 without, 1,232-1,689 us with). A db_worker at 100 runs (py-spy, busy
samples): the engine's chat 37 % (its HTTP client 20), the groups' writes 17.5 %, the
recorder's payloads 7 %, the claims 10 %. An ANALYZE of the benchmark's database before
each scenario (what `runs.store.planner_stats` does in the sweep, session 21) left
PostgreSQL's CPU a round where it was (2.1-2.9 ms either way, two alternating pairs).
The tools' thread pool grows toward its 64 threads (CPython's idle count misses a thread
that takes two calls in a row): about 2.6 new threads a run until then, none after; not
a steady cost.

Session 22 (its changes below). The table above is its last full run (all four
changes); "first" is its full run before the last two (the linger, the db_workers'
one lane). The CPU added adds nine runs of app-overhead (four with the session's
starting code, three of them alternating with the first two changes) and one after the
linger. "Other" is every other 100-run scenario of the session without a sampling
profiler (its A/B runs, each after 20 and 50 runs, every version of its code); "four
more" are embedded 50-run scenarios alternating the starting code and the first two
changes (47 and 29 ms, 38 and 64 ms):

| target (p95: from emit) | session 22: first / last full run | met on session 22's machine |
|---|---|---|
| embedded, 1 run | 97 %, 4 ms / 97 %, 4 ms | yes |
| embedded, 50 runs | 95 % (worst 81), 45 ms / 96 % (90), 33 ms; four more 29-64 | 5 of 6 |
| scale-out, 1 run | 97 % (worst 95), 5 ms / 97 % (95), 6 ms | yes |
| scale-out, 100 runs | 90 % (80), 138 ms / 90 % (78), 141 ms; other 97-257 ms | % only |
| CPU added ms, 1 / 10 / 50 runs | 3.12-3.56 / 1.94-2.52 / 1.42-1.58 | 10, 50 yes |

The last full run's 100-run scenarios: 133, 142 and 141 ms (the first's 96, 121, 164;
the one between, with the linger alone, 125, 175, 146).

Why the 100-run p95 is the machine's (session 22's measurements). The runs move in
step: every 200 ms each run's model answers within a few milliseconds of the others',
and the whole round's work (the engine, the recorder, the groups, PostgreSQL's
statements, the fake provider's next reply) falls in that burst. From 20 to 100 runs
(one scenario each, 10 runs apart, in one pass): from emit p95 20, 47, 44, 65, 60, 98,
108 ms; p50 7, 13, 12, 19, 24, 31, 37 ms; the machine busy 33, 61, 69, 71, 77, 78,
79 %: past about 70 runs the CPUs stay busy and each further run's work waits behind
the others'. The whole machine spends 6.7-7.0 ms of CPU a round at 100 runs (daphne
1.4, the two db_workers 3.2, PostgreSQL 2.1-2.4, the fake provider 0.4; the POST, the
claim, the end and the client's GETs are once a run, about 2 ms of it a round), so a
burst of 100 rounds is about 500 ms of CPU, 250 ms of two CPUs, for a 200 ms period.
At 50 runs the same arithmetic gives 125 ms of the 200: p95 36-47 ms. p95 < 100 ms at
100 runs every time needs a burst that clears in well under a period: roughly 3.5 ms of
the machine's CPU a round, half of today's, when the engine's HTTP client alone is
0.55 ms a request (providers.md) and the fake provider's reply 0.4 ms. By 100 ms slice
of two 100-run scenarios: p95 143-306 ms from 0.2 to 0.8 s (the POSTs, claims and
first rounds), 65-194 ms in the middle, 40-311 ms while the first runs end.

Where PostgreSQL's CPU goes (pg_stat_statements over one 100-run scenario, then
removed): 13,156 statements, 769 ms of execution (1.3 ms a round of its 2.1-2.4): the
foreign-key checks of the events, rounds and calls 8,000 (148 ms), the calls' INSERTs
about 280 ms for 1,000 calls (0.28 ms a call: the search index, 14 indexes, the
triggers), the API's run reads 403 (18 ms), the claims 100 (16 ms), the runs' INSERTs
100 (15 ms). The rest of its CPU is outside the statements' execution: parsing,
planning, the protocol, commits. A whole-machine profile (perf, 2 s of the scenario)
is flat: no PostgreSQL function over 1 % of the samples (parsing 1 %, jsonb input 0.3 %,
the compression of payloads over 2 KB 0.5 %); the db_workers, the fake provider and
the client 51 %, PostgreSQL 25 %, daphne 11 %, idle 11 %.

The 1-run CPU: each round's work runs on cold caches. The process sleeps 200 ms
between rounds (on this machine, a container on a shared host), and the same code
costs it several times what it costs in a loop: a payload's preparation for storage
(`RunRecorder._payload`) 12-16 us in a loop, 30-120 us an event in the 1-run scenario
(a wire response's 120, 74 at 10 runs); the garbage collector 0.08 ms a round at 1 and
10 runs (not it). The 1-run "CPU added" measures the machine's wake-ups as much as the
code: at 10 and 50 runs the same code adds 1.9-2.5 and 1.5-1.6 ms.

Session 21 (its changes below). The table above is its last full run; "three full
runs" adds the session's two others (same code but the two changes' commits, the 100
runs of each pooled from three scenarios) and five runs of app-overhead. Its machine
moved as much as the others': one 100-run scenario's p95 went from 91 to 198 ms for the
same code within the hour, three pooled from 109 to 217 ms:

| target (p95: from emit) | session 21, three full runs | met on session 21's machine |
|---|---|---|
| embedded, 1 run | 98 %, 4 ms | yes |
| embedded, 50 runs | 96-97 % (worst 90-94), 25-49 ms | yes |
| scale-out, 1 run | 97-98 % (worst 95-97), 5-7 ms | yes |
| scale-out, 100 runs | 88-92 % (worst 74-84), 109 / 217 / 152 ms | % yes; p95 no |
| CPU added ms, 1 / 10 / 50 runs | 2.83-3.35 / 2.06-2.24 / 1.39-1.91 | 10, 50 yes; 1: not always |

Session 20's 1-run "regression" was the machine: its starting code (96ba3fa) and its
end, alternating three times in one half hour, gave 3.04-3.45 and 2.83-3.27 ms.

Session 20 (its changes below). The table above is its last full run (with the ends
grouped and the task's outcome in one lane trip, before `rowsql.In`); "end" adds three
more runs of scale-out 100 runs and three of app-overhead. Alternating servers of the
session's starting code and its changes, the same code's p95 at 100 runs still moved
from 95 to 143 ms from one half hour to the next:

| target (p95: from emit) | session 20, end | met on session 20's machine |
|---|---|---|
| embedded, 1 run | 98 %, 4 ms | yes |
| embedded, 50 runs | 96 % (worst 90), 32 ms | yes |
| scale-out, 1 run | 97 % (worst 95), 5 ms | yes |
| scale-out, 100 runs | 88-92 %, 91-155 ms (median of four 120 ms) | % yes; p95 once in four |
| CPU added, 1 / 10 / 50 runs | 2.95-3.12 / 1.63-1.99 / 1.44-1.63 ms | 10 and 50 yes; 1 run no |

The 1-run CPU regressed: the previous code measured in the same hour gave 2.75-2.78 /
1.84-1.85 / 1.21-1.80 ms (a lone run's end now goes through the batch writer: its
cost is in "the recorder's writes", 1.42-1.47 -> 1.75-1.76 ms); not yet explained.

Session 19 (its changes below). Its machine was about as fast as session 18's first
hour (the engine alone 0.93-1.24 ms of CPU a round at 10-50 runs in process) and as
noisy from one minute to the next: the same code's scale-out 100 runs gave from emit
p95 of 105 to 295 ms within the half hour of the lanes' A/B below. The table above is
its last full run; "end" adds two more runs of scale-out 100 runs and one of
app-overhead:

| target (p95: from emit) | session 19, end | met on session 19's machine |
|---|---|---|
| embedded, 1 run | 98 %, 3 ms | yes |
| embedded, 50 runs | 97 % (worst 95), 28 ms | yes |
| scale-out, 1 run | 98 %, 4 ms | yes |
| scale-out, 100 runs | 83-87 %, 188-220 ms (in the A/B: 86-93 %, 118-260 ms) | % yes; p95 no |
| CPU added, 1 / 10 / 50 runs | 2.31-2.64 / 1.77-2.11 / 1.43-1.66 ms | yes |

Every target is met on this machine but scale-out's from emit p95 at 100 runs. The
machine is busy for the whole of that scenario (system-wide samples: the db_workers
half, PostgreSQL a quarter), and a group of batches waits 23-33 ms (p50) for its 2-3
ms of CPU whether it makes two round trips to PostgreSQL or eight: the tail is the
CPU's queue, so only less CPU a round shortens it (below: what was measured).

Session 18 (its change below). Its machine was fast and quiet in its first hour (the
engine alone 0.8-1.0 ms of CPU a round at 10 runs in process) and a third slower in its
second (1.1-1.25 ms; the same code's scale-out 100 runs 88 -> 79-80 %, from emit p95
121-145 -> 249-250 ms). "First hour" is the code the session started from, measured
before any change (one full run, two more of scale-out 100 runs, four of
app-overhead); "second hour" covers its two last full runs (the table above is the
last) and two of app-overhead; the A/B below alternates the session's starting code
and its end in the second hour (two pairs):

| target (p95: from emit) | first hour, before | second hour, after | met |
|---|---|---|---|
| embedded, 1 run | 98 %, 3 ms | 97 %, 4 ms | yes |
| embedded, 50 runs | 98 % (worst 92), 23 ms | 96-97 % (85-88), 43-46 ms | yes |
| scale-out, 1 run | 98 %, 4 ms | 97-98 %, 5 ms | yes |
| scale-out, 100 runs | 83-88 %, 121-145 ms | 76-83 %, 271-302 ms | % (1st hour) |
| CPU added, 1 / 10 / 50 runs | 2.4-3.05 / 2.05-2.3 / 1.6 | 3.0-3.2 / 2.5-2.7 / 1.7-1.9 | 10, 50 |

A/B in the second hour, before / after: embedded 50 runs 95-97 %, p95 30-67 / 96-97 %,
29-49 ms; scale-out 100 runs 79-80 %, 249-250 / 78-83 %, 220-227 ms. At 1 run the CPU
added is at the target's limit (3.0 ms) on the faster hour and just above it on the
slower one.

On the faster hour every target but scale-out's from emit p95 at 100 runs was met (the
CPU added at 1 run in three runs of four).
That one is bound by the machine's CPU in the scenario's first second (below: the
tail is the burst of 100 POSTs and 100 run starts, not any one stage of a batch).

Session 17 (its changes below). Its machine was slower than session 16's and busier
(a 1-minute load of 0.7-2.5; the engine alone 1.2-2.0 ms of CPU a round at 10-50 runs
in process, app-overhead.md). The table above is its last full run. "Before" is the
session's starting code measured on the same machine in the same hours (3 full runs
of scale-out, 2-3 of embedded, 3 of app-overhead); "after" covers its runs with all
of its changes (3 full runs, 2 of embedded alone, 2 of app-overhead):

| target (p95: from emit) | before | after | met on session 17's machine |
|---|---|---|---|
| embedded, 1 run | 97 % (1,236 ms), 4-5 ms | 97-98 % (1,229-1,239 ms), 3-5 ms | yes |
| embedded, 50 runs | 87-94 % (worst 53-73), 83 ms (1 run) | 89-95 % (worst 80-91), 125-134 ms | % |
| scale-out, 1 run | 97-98 %, 4 ms (1 run) | 97-98 %, 6-9 ms | yes |
| scale-out, 100 runs | 53-56 %, 558 ms | 58-65 %, 385-655 ms | no |
| CPU added, 1 / 10 / 50 runs | 4.0-4.6 / 4.2-5.3 / 2.8-3.3 | 3.8-4.5 / 3.9-4.1 / 2.1-2.5 | 50 |

Scale-out at 100 runs gained 5-9 points and about a tenth of the servers' CPU a round,
and is still bound by the machine (80-89 % busy, the servers 7.0-9.0 ms a round with
PostgreSQL's 2.8-3.7 ms: session 16's machine did the same scenario at 73-78 %).
Embedded at 50 runs keeps every run above 80 % now (the SQLite writers' turns), but
its from emit p95 did not come under 50 ms on this machine (session 16's: 30-38 ms
with the code this session started from); at 100 runs the turns shorten the tail
(max 708-1,908 ms against 946-2,543 ms) but not always the p95 (508-1,480 ms against
529-773 ms): the trade session 10 found with a process-wide lock (the waiting writers
wake the moment the lock is free and take the GIL from the engine), smaller now that
the writers are a few groups, not every run.

Session 16 (its changes below). Its machine was quiet (a 1-minute load of 0.4-1.4
before the benchmark) and about as fast as session 13's: the engine alone 0.9-3.4 ms
of CPU a round in process (app-overhead.md). The table above is its last full run; the
column covers its 2 full runs after both changes (before them, with the kept request
threads alone: 3 full runs and 5 of embedded 50 runs alone, in brackets):

| target (p95: from emit) | session 16 | met on session 16's machine |
|---|---|---|
| embedded, 1 run | 97-98 % (1,230-1,233 ms), 4 ms [97 %, 1,234-1,241 ms] | yes |
| embedded, 50 runs | 96-97 %, 30-38 ms [91-97 %, 29-98 ms] | yes, in both runs |
| scale-out, 1 run | 97 % (1,231-1,232 ms), 5 ms [96-97 %, 1,238-1,245 ms] | yes (97.4-97.5 %) |
| scale-out, 100 runs | 73-78 %, 149-206 ms [63-72 %, 229-268 ms] | no |
| CPU added, 1 / 10 / 50 runs | 3.0-3.6 / 3.0-3.1 / 2.3 ms [3.7-4.2 / 2.8-3.2 / 2.4-2.6] | 50 |

The new columns show what bounds scale-out at 100 runs: the machine was 77-87 % busy
for the scenario (its 2 CPUs also ran the client, which is not counted), and the
servers' 5.6-6.8 ms of CPU a round came with PostgreSQL's 2.3-2.5 ms and the fake
provider's 0.4-0.5 ms: 8-10 ms a round for 600 rounds, where 80 % leaves about 5 ms
for everything. Embedded at 50 runs kept the machine only 33-42 % busy: daphne is one
process, and its GIL, not the machine, is the limit there.
CPU added (app-overhead.md) is met at 50 runs; at 1 and 10 runs it was 3.0-3.1 ms at
best, a run's fixed costs (claim, history, engine, end) shared by only 6 rounds.

Session 15 (its changes below). Its machine was about half as fast as session 13's: the
engine alone took 1.8-6.3 ms of CPU a round in process (0.9-2.4 in session 13), a pure
Python loop ran 1.8-2.0 s where a fast machine takes about 0.5 s, and the same
configuration moved by 10-40 points of efficiency from one run to the next (embedded
100 runs: 50 %, 55 %, 77 %, 80 %, 83 % within two hours). The table above is the
session's last full run; the column covers its 6 full runs after its changes and 4
runs of scale-out alone:

| target (p95: from emit) | session 13 | session 15 | met on session 15's machine |
|---|---|---|---|
| embedded, 1 run | 97 %, 5-6 ms | 96-97 %, 8-11 ms | in 1 run of 6 |
| embedded, 50 runs | 95-97 %, 20-58 ms | 85-92 %, 153-696 ms | % yes; p95 no |
| scale-out, 1 run | 96 %, 7-13 ms | 93-96 %, 5-24 ms | no |
| scale-out, 100 runs | 67 %, 218-236 ms | 30-48 %, 560-1,220 ms | no |
| CPU added, 1 / 50 runs (app-overhead.md) | 3.7-3.8 / 2.0-2.5 ms | 5.1-6.4 / 4.5-5.0 ms | no |

Sessions 12-13 (their changes below; session 13's machine was about twice as fast as
session 11's: the engine alone 0.9-2.4 ms of CPU a round in process). Session 13's last
full run; its column covers 2 full runs and 2 of 50 runs alone:

| target (p95: from emit) | session 11 end | session 12 after | session 13 | met |
|---|---|---|---|---|
| embedded, 1 run | 94-95 % | 97 % | 97 %, 5-6 ms | yes |
| embedded, 50 runs | 63-90 %, 0.17-1.5 s | 95 %, 67 ms | 95-97 %, 20-58 ms | % yes; p95 in 2 of 4 |
| scale-out, 1 run | 94 % | not measured | 96 %, 7-13 ms | no (1 point) |
| scale-out, 100 runs | 31-57 %, 0.25-1.1 s | 46-67 %, 0.25-0.5 s | 67 %, 218-236 ms | no |
| CPU added, 1 run | 7.4 ms | 4.6 ms | 3.7-3.8 ms | no |
| CPU added, 10 / 50 runs | 8.5 / 6.4 ms | 4.1 / 3.2 ms | 2.7-3.3 / 2.0-2.5 ms | 50: yes |

Session 11, before / after its changes, measured A/B in the same hours (2-3 runs each):

| target (p95: from emit) | session 10 | session 11 before | session 11 after | met |
|---|---|---|---|---|
| embedded, 1 run | 96-97 % | 95 %, 9-12 ms | 94-95 %, 9-16 ms | no |
| embedded, 50 runs | 81-96 %, 0.3-0.8 s | 72-81 %, 1.6-2.0 s | 63-86 %, 0.3-1.5 s | % once |
| scale-out, 1 run | 97 % | 94-95 % | 94 % | no |
| scale-out, 100 runs | 44-57 %, 0.5-0.9 s | 20-23 %, 1.6-1.7 s | 31-36 %, 0.9-1.1 s | no |
| CPU added a round, 50 runs | 4.2 ms | 7.8 ms | 5.6-6.4 ms | no |
| engine alone, 1 / 50 runs | 98 / 79-92 % | 97 / 81 % | 96.7-97.4 / 77-81 % | |

No "database is locked" in any run. The table above is the last "after" run (four
writers a loop, item 3 below); "after" ranges cover the runs with one and with four.

### What session 11 changed (measured, kept)

1. **Group commit across runs, with statements carrying every run's rows**
   (`tools_app/runs/worker/batch_writer.py`). Each run still has one batch in flight at a
   time, but hands it to one writer per event loop, which takes every batch waiting
   and stores them in one transaction: the runs' fenced seq allocations in one
   `UPDATE run ... FROM (VALUES ...) RETURNING` (a run missing from what it returns
   lost its lease), all their events in one INSERT, their new rounds in one upsert,
   their calls in one INSERT. A group costs about what one batch did: 4 statements for
   5 runs as for 1 (tests/runs/test_batch_groups.py). Groups grow with the load: the
   writer takes what arrived while it wrote the last group, with no timer. A failed
   statement writes the group again batch by batch (each run its own outcome); a
   failed COMMIT fails each batch of the group, never written twice. A/B on the
   product path, same hour: scale-out 100 runs 20-23 % -> 31-36 % (server CPU per round
   24.9 -> 16.1-17.4 ms), 50 runs 36-40 % -> 51-63 %, 20 runs 72-73 % -> 84-85 %;
   embedded from emit p95 at 50 runs 1.6-1.7 s -> 0.3-1.1 s, at 100 runs 2.9-4.0 s ->
   1.4-2.8 s, embedded server CPU per round at 50 runs 19.0-21.4 -> 15.6-16.6 ms.
   With one writer per loop, embedded efficiency fell (50 runs 72-81 % -> 53-79 %, 100
   runs 48-55 % -> 29-47 %): one pipeline, and under saturation the runs' last drains
   waited for it (item 3).
2. **A payload's JSON written once.** The recorder took every event through pydantic's
   JSON-mode dump, and the wire request carries the whole conversation: pydantic
   walked it value by value, the cleaning check encoded it, and the database layer
   encoded it again for the event row and again for the round's `request_json`. Now
   a wire body is taken as the JSON data it is (`recorder._dumped`), and
   `storage.CleanPayload` keeps the JSON text the cleaning check writes (per value,
   and the whole composed as `json.dumps` writes a dict); `rowsql` stores those texts
   as they are (`storage.Encoded`; psycopg's Jsonb carrying the text on PostgreSQL).
   In a profile of the application at 50 runs, `model_dump` fell from 10 % of the CPU
   to 2 %. Tests: the texts are exactly json.dumps', the rows read back as the ORM's,
   on both databases (tests/runs/test_storage.py).

3. **As many writers a loop as it has database lanes** (`AGENTFORGE_WORKER_DB_THREADS`,
   4): while one group's statements run in the database (the GIL released), another
   is prepared, and a burst's first batches are written at once. Embedded, A/B in the
   same half hour (noisy): 50 runs 62 % (one writer) against 63-86 % (four), 100 runs
   29 % against 48-73 %; from emit p95 at 20 runs 55 ms against 122-166 ms (a burst's
   first batches, each alone, contend for SQLite's write lock again). The last full run
   (the table): embedded 50 runs 86 % with from emit p95 291 ms, 100 runs 73 % with
   589 ms, against 72-81 % and 1.6-2.0 s before this session's changes.
4. **A wire request's body stored from the engine's own bytes**:
   `ProviderWireRequest.content` (outside the event's dump) carries what was sent;
   when it holds nothing to clean and no secret (`storage.stored_as_sent`), the
   recorder neither encodes the conversation again nor walks it to redact. A 3 KB
   body: 64 -> 33 us of CPU without secrets, 126-289 -> 41 us with one.

5. **A first claim's history read** (`runner.load_history`): a run with no rounds is
   answered by one `rowsql` SELECT, not the ORM's query and prefetch: 1.1 -> 0.11 ms of
   CPU a run.

In process (docs/benchmarks/app-overhead.md), the application added per round at 50
runs 7.8 ms before and 5.6-6.4 ms after (the recorder's writes 3.4 -> 1.8-2.3 ms).

Why the rest was not met then:

- **Embedded, 50 runs**: daphne is saturated. Its CPU per round (15.6-16.6 ms: the
  engine, the application and the API's requests) x 300 rounds is more than a CPU
  for the scenario's ~1.7 s, on a machine whose 2 CPUs also run the fake provider and
  the client; the engine alone reaches only 77-81 % in process at 50 runs. From emit
  grows when the engine runs ahead of its writes (nothing waits for an idempotent
  round's batch).
- **Scale-out 100 runs** is bound by CPU as before: 16-17 ms of server CPU a round
  (daphne 5.7-6.1, each db_worker 5.2-5.7) x 600 rounds on 2 CPUs shared with
  PostgreSQL, Redis and the fake provider. In a db_worker's profile at 100 runs:
  django-tasks-db's claim loop (`get_locked`, ORM) ~15 % of the steady state, the
  channel layer's notifications ~3 %, the engine ~25 %.
- **CPU added per round**: the recorder's writes are 1.8-2.3 ms a round at 50 runs
  in process, most of it SQLite itself (the calls' audit, search and slot triggers);
  the rest: the claim (`Run.objects.get` ~1 ms of CPU a run on this machine), the
  payloads' one JSON encoding, the thread hops, the heartbeat, the notifications, the
  end.
- **The API requests**: Django's ASGI handler runs each request's sync code on a new
  thread with a new database connection (session 10: POST /api/runs 11-13 ms and GET
  /api/runs/<id> 9-10 ms of CPU in daphne against 3.4-3.7 ms in the test client).
  Putting requests on a few kept threads, as the worker's lanes are, would share one
  connection between concurrent requests (a streamed export's transaction with
  another request's): not done without a design for it.

Sessions 8-10's trials (GIL switch interval; grouping runs' batches in one
transaction with per-run statements; one database lane; a process-wide SQLite write
lock; folding a batch before its transaction) are in the history of this file.

### What session 25 changed (measured, kept)

- **daphne's listen backlog 1024** (`make run`, the README's scale-out command and this
  benchmark: `-e tcp:port=...:interface=...:backlog=1024`): with `-b`/`-p` Twisted
  listens with a backlog of 50, and a burst of 100 new connections had some dropped
  and retried by their clients a second later. 100 requests at once on the scale-out
  stack (its db_workers stopped): with 50, 16 of 52 bursts took 1,018-1,274 ms; with
  1024, none of 16 (91-485 ms). The product path unchanged (scale-out 100 runs, three
  alternating pairs: p95 43, 40, 43 ms with 50; 39, 44, 54 with 1024): its client
  retried the dropped connections within the scenario either way.
- **`--busy-cores N`** here: the benchmark with N CPUs kept busy by another process
  (headroom, above).

Measured and not kept:

- **At most N requests on threads at once** (the request waiting on the loop for a
  thread, N 8 or 20): daphne's CPU a POST in a burst of 100 4.2-5.2 -> 3.4-4.0 ms, but
  the product path no better (scale-out 100 runs, three pairs: p95 50, 42, 48 ms
  without, 49, 47, 57 with), as session 17 found. The same bound around the middleware
  and view only (every request still on a thread of its own): no change in the POST's
  CPU.
- **Where a POST's CPU goes now**: 1.08 ms in process (Django's test client, SQLite);
  in daphne on PostgreSQL 3.05 ms one at a time (3.15 on a new connection each), 4.2-4.8
  ms in a burst of 100. An unauthenticated request answered 401 costs daphne 1.0-1.3 ms:
  Twisted, daphne and Django's ASGI handler on the loop about 40 % of its GIL samples,
  the request's thread (middleware, URL resolution, the 401 and its log line) 25 %.
- **A db_worker's GIL at 100 runs** (py-spy `--gil`, past its start): the model
  exchange (httpx on aiohttp) 20 %, the batch writer 16 %, the tools 10 % (nearly all
  of it handing the call to a tool thread, `ThreadPoolExecutor.submit`; a hop alone
  costs 14-51 us of CPU on uvloop), the recorder's payloads 6 %, the claims 5 %.

### What session 24 changed (measured, kept)

1. **On PostgreSQL, the runs a loop starts together are claimed together**
   (`runner._claimed_together` on `loop_groups`, the grouping the event writes already
   used, taken out of `batch_writer`): the first claims of runs never started are one
   `UPDATE ... FROM (VALUES ...) ... RETURNING id, lease_token`
   (`leases.claim_new_many`), their rows one prepared read (`selectors.run_rows`:
   `prepared` takes lists of UUIDs now) and which of them have rounds another; any
   other run is claimed alone (`leases.claim_other`), each run with its own outcome.
   Scale-out, 100 runs, four alternating pairs (three scenarios each, pooled): from emit
   p95 124, 116, 125, 108 -> 72, 90, 74, 81 ms; queued p50 181-287 -> 81-132 ms. The
   runs' wall is measured from their claim (`Run.started_at`), now the group's: the
   100-run efficiency 92-94 -> 89-92 % in those pairs. Not on SQLite
   (`runner.claims_grouped`): there a claim costs its lane well under a millisecond,
   and grouping only lined up runs whose POSTs had come apart, their rounds then
   falling in the same bursts: embedded 50 runs, three alternating pairs, grouped
   90-92 % and p95 43-56 ms against 97-98 % and 22-42 ms one by one (and in
   app-overhead's 50 runs started at once on one loop, 80-84 against 88-95 %, the time
   from a run's creation to its end unchanged). The embedded path claims as before
   (the same statements, for one run).
2. **A process that executes runs builds the model clients' default TLS context at
   start** (`process.preload_for_runs`, `clients.default_ssl_context`): a db_worker's
   first client built it on the event loop all its runs share (23-27 ms of CPU alone,
   40-90 ms in a busy worker's profile).
3. **The benchmark warms up until every db_worker has run a run** (two runs a wave, up
   to ten waves; django-tasks-db's worker ids): one wave of two was often claimed by
   one worker (four waves were needed once), and the next scenario counted the other
   one's first run. app-overhead's recorder share is measured on the writers' loop
   groups (`batch_writer._WRITERS.handle`).

### What session 23 changed (measured, kept)

1. **No index of their own for three foreign keys** (migration
   `0017_fk_indexes_covered_by_unique`): a round's run, an event's run and a call's
   round are each the first column of a unique constraint (run, index; run, seq;
   round, call_index), whose index serves their lookups, joins and cascades, and
   Django's own index on each key was one more B-tree every row wrote. Dropped by
   name, not by `AlterField` (on SQLite that rebuilds the table: every event copied,
   the call table's triggers lost). A run's 11 events in one transaction, SQLite, a
   copy of a benchmark's database, 3,000 transactions three times: 172-182 -> 116-137
   us of CPU. End to end under the noise: app-overhead alternating the two, three
   pairs, the recorder's writes at 1 run 2.30-2.60 against 2.33-2.55 ms a round.

### What session 22 changed (measured, kept)

1. **A scalar's JSON text without building an encoder** (`storage._scalar_text`):
   `JSONEncoder.encode` makes a new C encoder for every value that is not a string,
   and a round's payloads hold dozens (round indexes, times, flags, names):
   `CleanPayload.of` of three typical payloads 24.5 -> 14.5 us (best of five loops).
2. **Each column's preparation chosen once** (`rowsql._preparer`): an INSERT of six
   events' values (without executing it) 20.8 -> 16.9 us. Neither 1 nor 2 shows end to
   end: alternating the session's starting code and these, three pairs at 1 and 10
   runs, the recorder's writes 1.77-1.83 against 1.80-1.94 ms a group (20 runs of 1 run
   each; starting code first) and the CPU added at 1 run 3.10-3.63 against 3.12-3.56
   ms: each is a few hundredths of a millisecond a round, under the machine's noise.
3. **An event nobody waits for lingers up to 100 ms, not 20** (`recorder.LINGER_SECONDS`,
   the longest such an event stays unwritten unless the next request or a wait comes
   first). At 100 runs a round's steps from its model's response to its next request
   (the tools' threads, the loop's queue) take tens of milliseconds, and a 20 ms linger
   wrote the response's events alone, the rest of the round then waiting behind them:
   8.5-9.1 batches a run against 8.0 (a batch's events share one `created_at`, counted
   on the benchmark's database; 8 is one a model request, the claim's and the end's).
   Alternating servers, six pairs of three 100-run scenarios (scale-out, after 20 and
   50 runs): from emit p95 median 161 ms (102-254) with 20 ms, 143 ms (97-224) with 100,
   lower in five pairs of six; 5 ms was worse (p95 176-324 ms, p50 72-161). Embedded,
   two pairs: 50 runs 50 and 62 against 46 and 26 ms. One run: unchanged (its request
   follows its results within a millisecond or two).

4. **One database lane a db_worker** (`AGENTFORGE_DB_WORKER_DB_THREADS`, default 1, or
   `db_worker --db-threads`; the embedded server keeps `AGENTFORGE_WORKER_DB_THREADS`,
   2). A loop runs as many event writers as it has lanes: with one, its runs' batches
   go in one writer's groups, larger and fewer, and one thread less takes the GIL from
   the loop. Scale-out, 100 runs, five alternating pairs of three scenarios (two by
   the setting itself, three by the lanes' count before it existed): from emit p95
   median 201 ms (145-257) with two lanes, 152 ms (123-256) with one, lower in every
   pair; p50 41-92 against 28-54 ms; efficiency 81-89 against 86-92 %; the machine's
   CPU a round 7.3-8.3 against 7.0-8.0 ms. Three lanes: between the two (p95 139-241).
   Embedded, two pairs: one lane is worse at 50 runs (p95 72 and 85 against 43 and 44
   ms), hence the two settings. Session 19 had measured two lanes against four.

### What session 21 changed (measured, kept)

1. **The run path's tables analyzed as they first grow** (`runs.store.planner_stats`, in
   each worker's sweep, every half lease). PostgreSQL checks each event's, round's and
   call's foreign key with a query that each connection plans once and keeps; planned
   while the runs table held the warm-up's few rows, it read the whole table, and
   kept doing so as the table grew, until autovacuum (once a minute, after 10 % of a
   table changed) analyzed it. Six 100-run scenarios in a row on a new database made
   1,300-6,900 full scans of the runs table each (pg_stat_user_tables), PostgreSQL's
   CPU a round going 1.82 -> 2.22 ms and from emit p95 144 -> 244 ms from the first to
   the sixth; with an ANALYZE by hand between scenarios, no scan from the third on,
   PostgreSQL 1.85-2.07 ms, p95 108-158 ms. With the sweep (its first 15 s after the
   workers start): no scan from the third on, as by hand.
2. **The task wake-up's NOTIFY sent after the commit, alone** (`task_wakeup`). A
   transaction that NOTIFYs takes PostgreSQL's cluster-wide notify lock at its commit
   and holds it through its WAL flush, so the 100 POSTs' transactions committed one
   after another (pg_stat_activity every 5 ms over two 100-run scenarios: 150-170
   samples of a backend waiting for that lock at COMMIT; none after). The
   notification's own transaction writes no WAL. On the product path, no difference
   beyond the noise (alternating servers, three pairs of two 100-run scenarios after
   20 and 50 runs: p95 median 145 before, 147 after; the POST burst's wall 0.70 ->
   0.66-0.68 s, daphne's CPU a POST unchanged).
3. **100 runs repeated three times, pooled** (as 1 run was), each scenario's p95 in
   the notes under the table.

Measured, not changed:

- **The high-volume foreign keys dropped** (the events', rounds' and calls' keys to
  their run and round, by hand on the benchmark's database): PostgreSQL's CPU a round
  1.78-2.05 ms against 1.82-2.22 with them over six scenarios (the later ones with the
  stale plans above), p95 136-199 against 144-244 ms. Kept: with the plans kept fresh
  the checks cost about 0.1 ms of PostgreSQL a round, and the keys also refuse a run
  deleted while something writes to it.
- **The tool slots' counters sharded by connection** (eight rows a quarter hour,
  hand-patched): the lock waits on the calls' INSERT gone (27-63 samples -> 0), p95
  141-183 against 154-170 ms: no difference (as sessions 19 and 20 found).
- **64 kept request threads** against 8: daphne's CPU a POST in a burst of 100,
  4.6-5.8 against 4.7-5.1 ms.
- **Where daphne's CPU goes**: a POST in a burst of 100 costs it 4.6-5.3 ms, 2.1 ms in
  process (Django's test client on PostgreSQL); GET /api/runs/{id} 2.7-3.1 ms one at a
  time against 1.2 in process; a 404 under /static/ 1.4 ms (Django's static handler
  starts a thread a request). In a GIL profile of the GET: the view and its
  authentication 38 %, Twisted and daphne 21 %, Django's ASGI handler on the loop 16 %,
  the middleware 8 %.
- **Warm pools**: a 100-run scenario right after the 2-run warm-up (the tools' 64
  threads, the request threads and the connection pools still growing) gave p95
  145-198 ms; after the 20- and 50-run scenarios, 102-172 ms.
- **The recorder at 1 run** (SQLite): the calls' INSERT is its costliest statement,
  287 us for a round's two calls (the full-text index, the slot, run-copy and
  error-group triggers and 14 indexes; in a scratch copy of the schema the triggers
  are 60 % of a call's insert); a profile of the whole application (yappi) puts the
  values' preparation (`rowsql._prepared`, 140 values a round) and the payloads' JSON
  encoding (`CleanPayload.of`, each value encoded on its own) first among its own
  costs, each about a tenth of a millisecond a round.

### What session 20 changed (measured, kept)

Where the 100-run tail comes from (the events' from emit by the moment they were
emitted, one scenario): in the middle of a scenario p50 15-35 ms and nothing over
100 ms; the tail is two phases, the first half second (100 POSTs, the claims, the
first rounds) and the moment the first-claimed runs end while the last-claimed are in
rounds 3-4 (p50 80-190 ms in both). A db_worker's database lanes (py-spy, wall time):
the runs' ends (`runner._finish`, one transaction each, about 4 ms of a lane each
under the load) 42 % of the lanes' samples, more than every batch of events (38 %);
the task's outcome (`set_successful`) 9 %, the claims 9 %.

1. **A run's end written with its last batch, in its loop's groups**
   (`lifecycle.Ending`, `batch_writer.write(..., end=...)`): the run_status event after
   the chat's last events, the move out of running in the batch's fenced UPDATE, what
   the ending runs left in flight closed by three statements a group
   (`close_unfinished_of`, `rowsql.In`). Alternating with the code before (two passes
   of three scenarios a server): from emit p95 median 139 -> 116 ms, efficiency 90 ->
   92 %.
2. **The task's outcome and `task_finished` in one lane trip** (db_worker
   `_store_outcome`), not two: p95 median 143 -> 111 ms against the commit before it
   (noise included). Sending `task_started` from the claiming thread instead of the
   lane was worse (112 -> 156 ms): its log write gives the GIL up to the busy loop,
   and the claim turn's other tasks wait for it to come back. Kept on the lane.

Measured, not changed:

- **The tool slots' trigger dropped** (again, as session 19): p50 40 -> 28 ms, p95
  median 121 -> 114 ms: a share of the lock waits, not the tail.
- **A claim turn's runs handed to the loop with one wake-up** (`submit_all`): p95
  median 95 -> 96.5 ms. Dropped.
- **A db_worker's GIL at 100 runs** (py-spy `--gil`): the loop 72 % (the HTTP exchange
  with the model 29 % of it, the recorder's payloads 18 %, the tools' thread hop 10 %:
  `ThreadPoolExecutor.submit` itself 7.6 %, a wake-up that can cost the loop its CPU),
  the lanes 20 %, the claiming thread 6.5 %.

### What session 19 changed (measured, kept)

1. **Two database lanes a worker, not four** (`AGENTFORGE_WORKER_DB_THREADS`, default
   2). A lane is a thread doing the database work of the runs a process drives; each
   one more is one more thread taking the GIL from the loop that drives the runs.
   Alternating 4 and 2 lanes in one hour (scale-out, 100 runs, three scenarios a
   server, six servers each): efficiency median 83 -> 89 % (74-88 -> 86-93 %), from
   emit p95 median 183 -> 146 ms; the full benchmark, two pairs: 84-85 -> 90-92 %, from
   emit p95 137-249 -> 125-151 ms, the servers' CPU a round 4.8-5.0 -> 4.5-4.6 ms, queued
   p50 174-187 -> 205-214 ms (a burst's claims share two lanes). One lane: 90-94 %,
   p95 129-192 ms, its claims and ends queued behind the groups of batches. Embedded,
   50 runs (two pairs of three): 92-97 %, p95 42-76 ms with 4; 95-97 %, 28-63 ms with 2.
2. **POST /api/runs's writes in one pipeline on PostgreSQL** (`runs.db.pipelined`: the
   run, its first event, its task and the workers' NOTIFY sent together, two round
   trips with the COMMIT where there were six), and the task's row written by a
   statement built once (`rowsql.insert_as_saved`, django-tasks-db's pre_save receiver
   included) instead of the ORM's `create`. In process on PostgreSQL (`run_create`,
   eight interleaved rounds of 200): CPU 1.21 -> 1.00 ms (the pipeline alone 1.18, the
   task's row alone 1.11), wall 2.38 -> 1.69 ms. daphne's CPU a POST under a burst of
   100 stays 5-7 ms (this machine's noise is about a fifth).

Measured, not changed:

- **A worker's batches in a pipeline**: the same `pipelined` around a group's
  statements (answers read where the code needs them), then with every answer read
  after all its statements were sent (the events numbered in SQL from the run's row:
  one round trip and the COMMIT for a group). In process on PostgreSQL a batch's wall
  2.72 -> 2.65-2.72 ms and its CPU 1.04 -> 1.13-1.18 ms (psycopg's pipeline has
  bookkeeping of its own; round trips on loopback cost little next to the statements
  and the commit's flush). On the product path, alternating servers of four scenarios
  (two passes), 100 runs: from emit p95 median 166 ms before, 226 and 178 ms with the
  two versions; 50 runs: no difference. Dropped.
- **A group's time at 100 runs**: 23-33 ms of wall (p50) for 2.3-3.0 ms of its thread's
  CPU, with two round trips as with eight: waiting for a CPU and the GIL, not for
  PostgreSQL's answers.
- **PostgreSQL's CPU** (perf, the whole machine, 2.5 s of the 100-run scenario): 23 %
  of the samples (the db_workers 50 %, daphne 5 %, idle 20 %): executor 7 %, planning
  3.4 %, parsing and analysis about 2 %, commit 3.4 % (the deferred foreign-key checks
  2 %, the WAL's flush 1 %), system calls about 10 %. pg_stat_statements over one
  scenario: 7,955 foreign-key checks for 6,359 events, 1,000 calls and 596 rounds; the
  calls' INSERT 810-960 ms of statement time in 119-130 statements (waits on the tool
  slots' row, as session 17 found).
- **A claim turn** (in process, PostgreSQL): 0.8 ms of CPU finding nothing, 1.1 ms
  claiming one task, 2.6 ms claiming 50: about 40 ms over a burst of 100 runs.
- **A thread hop** (`run_in_executor` of a trivial function on uvloop): 71 us of CPU one
  at a time, 20-23 us with 20-100 at once; a round's two tool calls are two of them.

### What session 18 changed (measured, kept)

Its machine was faster and quieter than session 17's at first (the engine alone
0.8-1.0 ms of CPU a round at 10 runs in process, app-overhead.md), and busier in its
second hour (the same code's scale-out p95 at 100 runs 121-149 ms in the first hour,
143-280 ms in the second).

1. **A run nobody watches is not announced on Redis** (`live/watching.py`). A viewer's
   socket marks its run watched (a key with a time to live of three polls, at least
   30 s, renewed at each of its polls) after joining the run's group and before its
   first read; a worker asks whether a run is marked after each commit, and the runs
   asking in one turn of its loop (a group's runs, settled together) share one MGET
   per Redis host. channels_redis's `group_send` sent two commands (ZREMRANGEBYSCORE,
   ZRANGE) per batch before finding nobody in the group. In a db_worker's GIL
   profile at 100 runs the notifications fell from 10.1 % to 2.3 % (the MGETs); Redis's
   CPU a round 0.1 -> 0.0 ms. Six alternating pairs at 100 runs (the machine busier
   in the later ones): 80-85 % -> 83-88 %, from emit p95 143-280 -> 139-208 ms, the
   servers' CPU a round 4.8-5.3 -> 4.6-5.3 ms. Nothing is missed: a worker that finds
   no mark asked before the mark was set, so before the viewer's first read, which
   holds the commit (tests/scaleout/test_watching.py; test_live_events.py fails
   without the mark).

Measured, not changed (scale-out, 100 runs, unless said):

- **Where the tail is.** From emit by 100 ms slice of the scenario: p95 8-54 ms in the
  first 0.3 s, 150-275 ms from 0.4 to 0.9 s (100 POSTs were still being accepted: the
  last run was created 748 ms and claimed 1,027 ms after the first), 45-100 ms from 1.0
  to 1.5 s, 100-180 ms while the first runs end. By round: rounds 0-1 p95 140-175 ms,
  rounds 2-5 60-85 ms. Every kind of event has the same tail.
- **A batch's stages in a db_worker** (instrumented, not kept): waiting for the run's
  batch before it p50 22 / p95 100-170 ms; for a writer and its lane's thread p50
  9-28 / p95 60-90 ms; the group in its thread p50 22-32 / p95 50-55 ms of wall for
  2.7 ms of CPU; back on the loop p50 8 / p95 45 ms; the notification (before this
  session's change) p50 7-13 / p95 50-65 ms. No stage dominates: the machine's CPU
  does (80-86 % busy).
- **Shorter GIL switch interval** in the db_workers (1 ms, 0.5 ms): worse (77 %, 76 %;
  p95 173, 195 ms).
- **Writers on threads of their own** (`thread_sensitive=False`): the wait for a lane
  p95 60-90 -> 31-33 ms, but the groups slower (p50 37-45 ms), p95 unchanged (127-139).
- **The run's writer not waiting for its notification** (an ordered chain a run):
  118 and 153 ms, within the noise.
- **The tool slots' trigger dropped**: the calls' INSERT statement time 608 -> 130 ms
  in total (pg_stat_statements), from emit p95 unchanged (154-165 against 156-187 ms);
  **`synchronous_commit = off`**: unchanged (150-165 ms). Faster groups do not help
  while the CPU is saturated.
- **The db_workers stopped while the 100 POSTs are accepted** (a diagnostic): p95 94
  and 130 against 130 and 180 ms: the POST burst is part of the tail, not all of it.
- **POST /api/runs under a burst**: 6.2-6.6 ms of daphne's CPU each with 100 at once
  on PostgreSQL (4.1 ms one at a time): 128 kept request threads 5.6 ms, at most 8
  requests at once 5.2 ms; 64 against 8 kept threads changed no row of the product
  path beyond the noise (two pairs).
- **A round's batch written on SQLite at 1 run**: 1.75 ms of its thread's CPU
  (SQLite's statements about 0.6 ms, the commit about 0.45 ms, the rest Python); the
  audit and search triggers about 0.1 ms of it; `wal_autocheckpoint` 10,000: no change.

### What session 17 changed (measured, kept)

Its machine was slower than session 16's (the engine alone 1.2-1.9 ms of CPU a round
at 10-50 runs in process, app-overhead.md; scale-out 100 runs 53 % before these
changes where session 16's reached 73-78 %). A/B numbers alternate the two versions
in the same half hour.

1. **The runs' event loop is uvloop's** (`AGENTFORGE_WORKER_EVENT_LOOP`, default
   `uvloop`; `task_backend.new_worker_loop`, the standard loop where uvloop is not
   installed, as on Windows, or when `asyncio` is chosen): the embedded worker's and
   each db_worker's loop. The application's CPU a round at 50 runs in process 4.69-4.89
   -> 4.16-4.27 ms (two pairs), scale-out 100 runs 51-57 -> 58-66 % (three pairs).
2. **POST /api/runs**: the run inserted by one precompiled INSERT (`rowsql`, every
   column; Run has no `save()` of its own and no signal receivers) instead of the
   ORM's `create`, and its tools read by a prepared `IN` of their names (`prepared`
   takes lists of strings now). daphne's CPU per POST (scale-out, 100 in a row) about
   a sixth less against GET /api/runs/<id> measured in the same run (POST / GET 1.31-
   1.65 after, 1.78-2.0 before, three pairs).
3. **SQLite statements of `rowsql` on the driver's cursor** with `?` placeholders
   rewritten once per statement (cached), as PostgreSQL's already were: Django's
   cursor rewrites `%s` with a regular expression at every execution (10-15 us for a
   batch's INSERT).
4. **A db_worker's claim turn marks its tasks running by one precompiled `UPDATE ...
   FROM (VALUES ...)`**, not the ORM's `bulk_update` (a CASE of one WHEN a task for
   each column): a turn of 50 tasks 27.8 -> 4.0 ms of CPU, a turn of one 3.5 -> 1.8 ms
   (PostgreSQL, in process). Under a burst the claim loop was 7.6 % of a db_worker's
   GIL samples.
5. **SQLite writers take turns on a lock of the process** (`db.write_turn`: the groups
   of batches, the runs' claims and their ends), taken before their transactions:
   SQLite lets one writer in at a time, and a writer that found the database locked
   slept in SQLite's busy handler by steps of up to 100 ms while others went first.
   Embedded, 50 runs: from emit p95 148-570 -> 58-238 ms and max 254-1,167 -> 109-408
   ms with the groups alone taking turns (six pairs); the claims and ends too: worst
   run 53-62 -> 82-91 %, queued p95 617-1,027 -> 162-266 ms (three pairs). (Sessions
   8-10 tried a process-wide lock when each run wrote its own transactions; with groups
   of batches the writers are few, and the busy handler's sleeps were the tail.)

Measured, not changed:

- **The tool slots' trigger** (audit/triggers.py) keeps one row per tool and quarter
  hour, so every transaction writing calls of one tool waits for that row: with
  pg_stat_statements, its upsert took 1.5 s of statement time over 1,020 calls in a
  100-run scenario (lock waits). Disabled, three alternating pairs showed no
  difference in efficiency or from emit (55/47/46 % with it, 48/49/46 % without):
  the machine's CPU, not the row, bounds that scenario. Counters sharded by
  connection would remove the waits if a faster machine shows them.
- **The garbage collector's thresholds** (20,000 / 20 / 10 against 700 / 10 / 10):
  no difference in the application's CPU a round (two pairs). A db_worker's
  collections take 4-5 % of its CPU at 100 runs (gen 0 0.6 ms, gen 1 4 ms).
- **More kept request threads** (64 against 8): a second burst of 100 POSTs costs 5.9
  against 13.0 ms of daphne's CPU each on SQLite (the first creates threads and
  connections either way), but the embedded rows of the benchmark showed no steady
  change in two pairs.
- **django-tasks-db's `set_successful`** through the ORM: 0.42 ms of CPU a run (0.07
  ms a round).
- **The notifications**: channels_redis's `group_send` sends two commands (ZREMRANGEBYSCORE,
  ZRANGE) for a run nobody watches, about 11 % of a db_worker's GIL samples at 100 runs
  (14 commands a run); its pub/sub layer was measured in session 13 (below).
- **psycopg's own cost** on this machine: 60 us of CPU for `SELECT 1`, 100 us for a
  one-row UPDATE, 140 us for a 10-row INSERT of JSON events (prepared or not): a
  statement fewer a batch is worth about 0.1 ms.

### What session 16 changed (measured, kept)

1. **HTTP requests on kept threads** (`agentforge_web/handler.py`): Django gives each
   request a thread-sensitive context of its own, so asgiref started a thread for the
   request's synchronous code (and, in asgiref 3.13, one more to join it), and Django
   opened the request's connection on it and closed it at the end. Now a request
   borrows a single-thread executor for its whole life (asgiref's
   `ThreadSensitiveContext(executor=...)`) and gives it back once the thread is idle:
   one request at a time on a thread, so no connection or transaction is shared; up to
   `AGENTFORGE_REQUEST_THREADS` (8) idle threads are kept. On SQLite connections are
   persistent (`CONN_MAX_AGE = None`: every thread that uses the database now lives
   on). daphne's CPU per request, 300 sequential requests, same hour (before -> after):
   embedded GET /api/runs/<id> 5.9-6.2 -> 2.9 ms, GET its events 8.9-9.0 -> 5.3-5.5 ms,
   GET /api/runs 6.2-6.3 -> 3.7-4.1 ms; scale-out (PostgreSQL's pool) 4.2 -> 3.4-3.8,
   6.1-6.3 -> 5.3-5.4 and 4.5-4.7 -> 3.7-3.8 ms. The benchmark's embedded server CPU a
   round at 50 runs fell to 6.6-8.0 ms (7.0 with the same code the hour before, the
   difference within this machine's noise: its client sends only a POST and one or two
   GETs a run).
2. **A succeeded run's last events written with its end** (`RunRecorder.hold_for_end`,
   `runner._end`): the chat's final answer was committed in a batch of its own, then
   the end in a transaction of its own; now the recorder waits for the batch in flight
   and the end writes what is left in its transaction (a database error there hands
   the run back, as mid-run). One commit fewer a run: batches a round 1.2 -> 1.0 and
   CPU added a round at 1 / 10 / 50 runs 3.72 / 3.15 / 2.43 -> 3.57 / 2.96 / 2.34 ms
   (app-overhead.md, same hour); a run's end is stored 4.2 ms after its chat's on
   PostgreSQL, not 8 (the last batch's commit, 2.1 ms, was in `Run.wall_ms`, the end's
   transaction never was): scale-out 1 run 1,238-1,245 -> 1,232-1,236 ms.
3. **The benchmark reports the machine's other work** (the fake provider's, PostgreSQL's
   and Redis's CPU per round) and how busy the machine was during each scenario, so a
   row bound by the machine's CPU says so.

Measured, not changed: PostgreSQL's prepared statements (psycopg's `prepare_threshold`
5, which Django turns off for connection poolers): scale-out 100 runs 72 % and 79 %
with them, 77 % and 74 % without, PostgreSQL's CPU a round 2.0-2.3 ms either way
(alternating runs in one half hour): no difference beyond the noise. A run's timeline
on this machine (embedded, 1 run): its first
model request 2.6-4.0 ms after its claim (claim, history, engine), each exchange with
the fake provider 203.4-204 ms for its 200 ms (203.8 ms with a bare httpx client and
no application: the provider's timer and a cold wake-up after 200 ms idle, 1.0 ms when
it answers at once), 1.1-1.9 ms of the application between a response and the next
request, and 2.6 ms (SQLite) or 5.4-8 ms (PostgreSQL) from the chat's end to the run's
end stored, of which the last batch's commit is 1.2-2.1 ms (in `Run.wall_ms`) and the
end's own transaction the rest (not in it).

### What session 15 changed (measured, kept)

1. **db_workers woken by enqueues, not by their poll** (`runs/loops/task_wakeup.py`): on
   PostgreSQL every enqueue sends `NOTIFY` (delivered at the enqueuing transaction's
   commit) and a worker waits between claim turns on a LISTENing connection of its own;
   `--interval` (1 s by default) is only the fallback, and turns woken by a burst are
   kept 50 ms apart so that one takes many tasks. Before, a run waited for the next poll:
   half a second on average at the default interval, so this benchmark ran its workers
   at `--interval 0.05`, which cost an idle worker 53 ms of CPU a second (measured with
   the previous commit; 3 ms a second now at the default interval, which this benchmark
   now uses). A run is claimed 19-24 ms after its POST with one run at a time (the
   "queued" column; 26-46 ms before with the 0.05 s poll); scale-out server CPU a round
   at 1 run 48 -> 18-28 ms (the idle worker's polling); at 100 runs 12.2-12.6 before and
   9.9-13.6 ms after, within this machine's noise. Spreading a burst by how busy each
   worker is (a longer wait for a busier one) was tried and dropped: the split was
   already even (20 runs 11/9, 50 runs 29/21; 100 runs fill both workers' 50 slots
   either way). The turns woken by a burst were 20 ms apart at first; 50 ms keeps a
   burst's claim queries to what the 0.05 s poll made (both workers wake for every
   enqueue).
2. **A run's task written in the run's own transaction** (`tasks.enqueue_run_at_commit`,
   with the database backend; an in-process backend still enqueues after the commit):
   one commit a start instead of two, and no queued run without a task if the process
   dies at the commit. **A new run's first event is seq 1** without the UPDATE that
   allocated it (`lifecycle.create_queued`).
3. **Prepared reads on every API request's path** (`prepared.instances`): the token with
   its user, the run a call names, the endpoint and the policy by id or name, the
   default policy. POST /api/runs 10.0-10.7 -> 7.2-8.1 ms of CPU and GET /api/runs/<id>
   3.5-5.6 -> 2.8-3.4 ms (test client, PostgreSQL, 3 runs of 300 requests each). A
   run's claim reads its row the same way (`selectors.run_row`): 0.70 -> 0.16 ms of CPU
   on SQLite (after the table above was measured).

Measured, not changed (the next step, below): in daphne each request costs more than
its view. Scale-out: POST 10.8 ms and GET 5.4 ms of daphne's CPU (2-3 ms above the test
client: a new thread per request, asgiref's hops). Embedded: POST 13.9 ms and GET 9.8 ms,
of which about 2.7 ms is a new SQLite connection (open 0.4 ms, the schema parsed again
by its first statement 2.2 ms), since every request runs on a new thread and Django
closes its connection at the request's end.

### What sessions 12-13 changed (measured, kept)

1. **A worker's database lanes keep their connections** (`task_backend._guarded` calls
   `runs.db.drop_broken_connections`, not Django's `close_old_connections`): with
   `CONN_MAX_AGE = 0` (for the request threads) the latter closed the lane's connection
   at every task's start, so each run's claim reconnected (1.5-10 ms of its start on
   SQLite) and its lane-mates lost theirs. A/B in one hour: embedded 50 runs 90 -> 95 %,
   from emit p95 172 -> 67 ms; scale-out 100 runs 57 -> 67 %, 50 runs 77 -> 90 %; a
   claim's start 7-14 -> 2-6 ms. A connection a task broke is still replaced
   (tests/runs/test_inprocess_backend.py); one inside its caller's transaction is not
   closed (a run handed back after a database error, tests/runs/test_shutdown.py).
2. **Start-up imports** (`runs.process.preload_for_runs`, in daphne's in-process worker
   and `db_worker`): every provider adapter and the channel layer (channels_redis and
   its Redis client) are imported before the process freezes its start-up objects, not
   by its first runs on the shared loop (100-150 ms of a db_worker's first run).

Measured and not kept:

- **channels_redis's pub/sub layer** instead of its core layer: a notification of a run
  nobody watches 189 -> 87 us of CPU alone, but 157 -> 118 us with 100 runs sending at
  once (its one connection a shard, behind a lock): about 0.1 ms a round, for losing
  the core layer's per-channel capacity. A watched run's notification is 727 -> 120 us
  (sender and receiver in one process): worth it for many viewers, not measured here.
- **Persistent connections for the db_worker's claim loop**: on PostgreSQL its
  per-turn `close_old_connections` only returns the connection to the psycopg pool
  (Django refuses `CONN_MAX_AGE` with a pool). An idle db_worker polling at `--interval
  0.05` costs 42 ms of CPU a second (the ORM's `get_locked` query and its transaction,
  20 a second); the 1-run rows' second db_worker is that.
- **`sys.setswitchinterval`** 0.001 s: scale-out 100 runs worse (42-46 %); 0.02 s: no gain.

Why the rest is not met:

- **Scale-out, 100 runs** is bound by the machine's CPU: 80 % means about 400 model
  calls a second on 2 CPUs, so at most 5 ms of CPU a round for everything. On session
  15's machine the servers alone use 9.9-11.5 ms (daphne 2.8-3.4, each db_worker
  3.5-4.1; session 13's, twice as fast: 7.6-7.9), and the fake provider, PostgreSQL,
  Redis and the client share the same CPUs. In a db_worker's GIL profile the provider's
  HTTP exchange (the engine's httpx client) is the largest share, then the loop's own
  scheduling, the notifications, the batch writer and the recorder.
- **Embedded, 50 runs, from emit p95**: daphne's one GIL is saturated (session 15:
  10-12.5 ms of CPU a round, the API's requests at 14 and 10 ms each; session 16:
  6.6-8.0 ms, the requests at about 5 and 3 ms, with the machine only 33-40 % busy), so
  the batches wait; the run's wall time does not (nothing waits for an idempotent
  round's batch), which is why efficiency holds and from emit does not.
- **1-run efficiency** is at the engine's own ceiling: the engine alone reached
  95.9-97.6 % in process on this machine (app-overhead.md), each exchange with the fake
  provider taking 203.5 ms for its 200 ms of latency (its own timer and HTTP); the
  product path adds the claim (3-5 ms to the chat's start) and the last batch's commit
  before the run's end (about 6 ms on PostgreSQL).
- **CPU added per round** (app-overhead.md): at 1 run a run's fixed costs (claim and
  history, the engine built from the snapshot, the end in its own transaction) are
  shared by only 6 rounds, and its 7 batches are about half of it (SQLite's statements
  with the calls' audit, search and slot triggers).

### What would cut the rest

- The engine's HTTP exchange (httpx over aiohttp) is the largest single share of a
  db_worker's CPU; a multi-process embedded worker is the only way past one GIL there.
- Backpressure for idempotent rounds when a run's writes fall behind (from emit at
  saturation); the pub/sub channel layer once many viewers watch.
- The scenario's first second: 100 POSTs at 4.2-5.2 ms of daphne's CPU each (1.1 ms
  in process on SQLite; 3.05 one at a time in daphne on PostgreSQL, of which about 1
  ms is what daphne, Twisted and Django's ASGI handler cost any request; the rest the
  burst's threads: session 25) while the first runs start: about half of the
  machine's CPU in that second.
- PostgreSQL's share (2.8-3.7 ms a round on session 17's machine, as much as a
  db_worker's): fewer statements a batch (the run's fenced UPDATE and the events'
  INSERT as one statement with a data-modifying CTE, PostgreSQL only).
  Session 19 measured what round trips are worth: little (a pipelined group's wall
  and the product path unchanged); what PostgreSQL spends is its statements'
  execution, planning and commit, the events' deferred foreign-key checks 2 % of the
  machine.
- Fewer threads taking the GIL from a worker's loop: two lanes gained 5-7 points at
  100 runs over four (session 19); the tools' thread hops (two a round) are the next
  ones (session 20 grouped the runs' ends and took one lane trip off each).
- The scenario's two bad phases (session 20): the start (POSTs, claims, first rounds
  together) and the first runs' ends during the others' last rounds. Session 24 grouped
  the claims as session 20 grouped the ends; the start's POSTs remain (above).
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=["embedded", "scaleout"])
    parser.add_argument("--runs", default=",".join(map(str, DEFAULT_RUNS)))
    parser.add_argument("--name", default="product-path",
                        help="the result file in docs/benchmarks (without .md)")
    parser.add_argument("--busy-cores", type=int, default=0, choices=range(os.cpu_count() or 1),
                        help="keep this many CPUs busy with other work throughout (headroom)")
    args = parser.parse_args()
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
