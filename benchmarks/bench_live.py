"""Live latency: an event's commit -> its arrival in a WebSocket client (target p95 < 50 ms).

A real server on loopback: `daphne` in a subprocess on a fresh database (migrated and
seeded through `manage.py`), runs started over the JSON API (POST /api/runs) so they
execute in the server's own worker, and aiohttp WebSocket clients logged in with a
session cookie, exactly as the run page's socket is (Origin header, resume message).

Each client records, for every message, its arrival time and the last seq it covers
(the `run-seq` marker). Afterwards each event's `created_at` is read back (GET
/api/runs/<id>/events) and every seq a message newly covers gets latency = arrival -
created_at. Only events created after the client sent its resume count (the rest is
catch-up, not live). `created_at` is stamped when the RunEvent row is inserted, inside
the event's transaction, just before the commit: so the figure includes the rest of that
transaction and the commit, a small over-estimate of commit -> arrival.

Scenarios: (a) 1 run watched by 1 client; (b) 20 concurrent runs watched by 50 clients
(2-3 per run), both on the embedded configuration (SQLite, in-memory channel layer,
in-process worker); on the scale-out configuration (a fresh PostgreSQL database, created
and dropped here, + Redis + daphne + one `manage.py db_worker`), (c) 20 runs executed one
at a time and (d) 20 concurrent runs (`--concurrency 20`), 50 clients each. (e), in both
configurations: 50 concurrent runs on the product path's workload (the fake provider),
each followed by one Server-Sent Events client (GET /api/runs/<id>/events/stream, whose
`id:` lines are the seqs) and one WebSocket viewer, latency per channel; the same 50 runs
unwatched first, on the same server, give the efficiency (ideal / the run's wall) the
watched runs are compared with; and the product's CPU time (its processes, from /proc)
per delivered event. Scale-out scenarios are skipped when PostgreSQL or Redis is
unreachable on loopback. Runs that do not finish within the time bound are reported.
(e) is also measured on the embedded server with its live batches read but not rendered
(live_floor_app.py): the floor of the live path on this machine, rendering aside.

Run: .venv/bin/python -m benchmarks.bench_live   (a few minutes; every wait is bounded)
     [--only watched|followed] [--followed-runs N] [--name FILE]
`--only` runs (a)-(d) or (e) alone; `--name` writes docs/benchmarks/FILE.md instead of
live.md (a partial run must not replace the full report).
The workload and a scenario's `Outcome` are live_workload.py, the server and the clients
live_clients.py, the report live_report.py.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp

from benchmarks.common import write_result
from benchmarks.live_clients import (
    FLOOR_APPLICATION,
    PRODUCT_APPLICATION,
    TERMINAL,
    Server,
    Watch,
    deliveries,
    follow_sse,
    run_state,
    serve,
    stamps_of,
    start_run,
    watch,
)
from benchmarks.live_report import render
from benchmarks.live_workload import (
    CLIENTS,
    EMBEDDED_TIMEOUT,
    ENDPOINT,
    ENDPOINT_FOLLOWED,
    ENDPOINT_QUEUED,
    ENDPOINT_SINGLE,
    FOLLOWED_RUNS,
    FOLLOWED_TIMEOUT,
    FOLLOWED_TOOLS,
    POLL_S,
    RUNS,
    SCALE_OUT_TIMEOUT,
    SINGLE_REPEATS,
    STREAMS_PER_USER,
    TOOLS,
    WARM_UP_RUNS,
    Followed,
    Outcome,
)
from benchmarks.processes import base_env

POSTGRES_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_URL = "redis://127.0.0.1:6379/0"


def client_session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                 timeout=aiohttp.ClientTimeout(total=20))


async def scenario(server: Server, runs: int, clients: int, endpoint: str,
                   timeout: float) -> Outcome:
    load_before = os.getloadavg()[0]
    deadline = time.monotonic() + timeout
    async with client_session() as http:
        run_ids = [await start_run(http, server, endpoint, TOOLS) for _ in range(runs)]
        assignment = [run_ids[i % runs] for i in range(clients)]
        watches = await asyncio.gather(*(watch(http, server, run_id, deadline)
                                         for run_id in assignment))
        stamps = {run_id: await stamps_of(http, server, run_id) for run_id in run_ids}
        states = [await run_state(http, server, run_id) for run_id in run_ids]
    found = deliveries(list(watches), stamps)
    times = [stamps[r][s].created for r, s in found.measured]
    return Outcome(
        runs=runs, clients=clients, latencies_ms=found.latencies_ms,
        emitted_ms=found.emitted_ms, events=len(found.measured),
        messages=sum(len(w.messages) for w in watches),
        window_s=(max(times) - min(times)) if len(times) > 1 else float("nan"),
        runs_finished=sum(state.status in TERMINAL for state in states),
        events_per_run=sum(len(v) for v in stamps.values()) / max(1, len(stamps)),
        errors=sorted({w.error for w in watches if w.error}),
        unfinished=sum(1 for w in watches if not w.finished),
        load=(load_before, os.getloadavg()[0]),
    )


def merged(outcomes: list[Outcome]) -> Outcome:
    """The same scenario run several times, one after another, as one sample."""
    return Outcome(
        runs=outcomes[0].runs, clients=outcomes[0].clients,
        latencies_ms=[v for o in outcomes for v in o.latencies_ms],
        emitted_ms=[v for o in outcomes for v in o.emitted_ms],
        events=sum(o.events for o in outcomes), messages=sum(o.messages for o in outcomes),
        window_s=sum(o.window_s for o in outcomes),
        runs_finished=min(o.runs_finished for o in outcomes),
        events_per_run=sum(o.events_per_run for o in outcomes) / len(outcomes),
        errors=sorted({e for o in outcomes for e in o.errors}),
        unfinished=sum(o.unfinished for o in outcomes),
        load=(outcomes[0].load[0], outcomes[-1].load[1]),
    )


# -- (e) runs followed over SSE and WebSocket --------------------------------------------


async def unwatched_walls(server: Server, runs: int) -> list[float]:
    """Start `runs` runs at once, nobody watching; their walls once they have ended."""
    deadline = time.monotonic() + FOLLOWED_TIMEOUT
    async with client_session() as http:
        run_ids = await asyncio.gather(*(start_run(http, server, ENDPOINT_FOLLOWED,
                                                   FOLLOWED_TOOLS) for _ in range(runs)))
        walls = []
        for run_id in run_ids:  # one after another: they end at about the same time
            while time.monotonic() < deadline:
                state = await run_state(http, server, run_id)
                if state.status in TERMINAL:
                    if state.wall_ms is not None:
                        walls.append(state.wall_ms)
                    break
                await asyncio.sleep(POLL_S)
    return walls


async def followed_runs(server: Server, runs: int) -> tuple[Followed, float]:
    """Each run started and at once followed by an SSE client and a WebSocket viewer;
    the outcome, and the product's CPU seconds meanwhile."""
    load_before, cpu_before = os.getloadavg()[0], server.cpu_seconds()
    deadline = time.monotonic() + FOLLOWED_TIMEOUT
    async with client_session() as http:
        async def start_and_follow(_: int) -> tuple[str, list[Watch]]:
            run_id = await start_run(http, server, ENDPOINT_FOLLOWED, FOLLOWED_TOOLS)
            return run_id, list(await asyncio.gather(
                follow_sse(http, server, run_id, deadline),
                watch(http, server, run_id, deadline)))

        followed = await asyncio.gather(*(start_and_follow(i) for i in range(runs)))
        cpu = server.cpu_seconds() - cpu_before
        load = (load_before, os.getloadavg()[0])
        run_ids = [run_id for run_id, _ in followed]
        stamps = {run_id: await stamps_of(http, server, run_id) for run_id in run_ids}
        states = [await run_state(http, server, run_id) for run_id in run_ids]
    finished = sum(state.status in TERMINAL for state in states)

    def channel(which: int) -> Outcome:
        watches = [pair[which] for _, pair in followed]
        found = deliveries(watches, stamps)
        times = [stamps[r][s].created for r, s in found.measured]
        return Outcome(
            runs=runs, clients=runs, latencies_ms=found.latencies_ms,
            emitted_ms=found.emitted_ms, events=len(found.measured),
            messages=sum(len(w.messages) for w in watches),
            window_s=(max(times) - min(times)) if len(times) > 1 else float("nan"),
            runs_finished=finished,
            events_per_run=sum(len(v) for v in stamps.values()) / max(1, len(stamps)),
            errors=sorted({w.error for w in watches if w.error}),
            unfinished=sum(1 for w in watches if not w.finished), load=load)

    walls = [state.wall_ms for state in states if state.wall_ms is not None]
    return Followed(runs=runs, sse=channel(0), ws=channel(1), watched_walls_ms=walls), cpu


def followed(server: Server, runs: int) -> Followed:
    """(e) on one server: warm-up, the runs unwatched, then the same number followed."""
    asyncio.run(unwatched_walls(server, WARM_UP_RUNS))
    cpu_before = server.cpu_seconds()
    unwatched = asyncio.run(unwatched_walls(server, runs))
    unwatched_cpu = server.cpu_seconds() - cpu_before
    time.sleep(1.0)  # the unwatched runs' stragglers (a sweep, a last write) settle
    outcome, watched_cpu = asyncio.run(followed_runs(server, runs))
    outcome.unwatched_walls_ms, outcome.cpu_s = unwatched, (unwatched_cpu, watched_cpu)
    return outcome


# -- configurations --------------------------------------------------------------------


@contextmanager
def embedded_server(*, provider: bool,
                    application: str = PRODUCT_APPLICATION) -> Iterator[Server]:
    """SQLite, the in-memory channel layer, the worker inside daphne."""
    workdir = Path(tempfile.mkdtemp(prefix="agentforge-bench-live-"))
    try:
        env = base_env(f"sqlite:///{workdir / 'bench.sqlite3'}", workdir,
                       AGENTFORGE_EMBEDDED_WORKER="1",
                       AGENTFORGE_API_STREAMS_PER_USER=str(STREAMS_PER_USER))
        with serve(env, workdir, db_worker=False, provider=provider,
                   application=application) as server:
            yield server
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def embedded() -> tuple[Outcome, Outcome]:
    """(a) and (b)."""
    with embedded_server(provider=False) as server:
        one = merged([asyncio.run(scenario(server, 1, 1, ENDPOINT_SINGLE, EMBEDDED_TIMEOUT))
                      for _ in range(SINGLE_REPEATS)])
        many = asyncio.run(scenario(server, RUNS, CLIENTS, ENDPOINT, EMBEDDED_TIMEOUT))
    return one, many


def embedded_followed(runs: int, application: str = PRODUCT_APPLICATION) -> Followed:
    with embedded_server(provider=True, application=application) as server:
        return followed(server, runs)


def on_scale_out[T](measure: Callable[[Server], T], concurrency: int, *,
                    provider: bool = False) -> T | str:
    """`measure` on the scale-out configuration (PostgreSQL, Redis, daphne and one
    db_worker with `concurrency` slots), or why it was skipped."""
    try:
        import psycopg
        import redis
    except ImportError as exc:
        return f"skipped: {exc}"
    try:
        redis.Redis.from_url(REDIS_URL, socket_timeout=2).ping()
        admin = psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=3)
    except Exception as exc:  # any failure to reach them means "skip"
        return f"skipped: PostgreSQL or Redis is not reachable on loopback ({exc})"
    name = f"agentforge_bench_live_{secrets.token_hex(4)}"
    workdir = Path(tempfile.mkdtemp(prefix="agentforge-bench-live-"))
    try:
        admin.execute(f'CREATE DATABASE "{name}"')
        env = base_env(f"postgres://postgres@127.0.0.1:5432/{name}", workdir,
                       REDIS_URL=REDIS_URL, TASK_BACKEND="database",
                       AGENTFORGE_API_STREAMS_PER_USER=str(STREAMS_PER_USER))
        with serve(env, workdir, db_worker=True, concurrency=concurrency,
                   provider=provider) as server:
            return measure(server)
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
        shutil.rmtree(workdir, ignore_errors=True)


def scale_out(concurrency: int) -> Outcome | str:
    """(c) with one worker slot, (d) with one per run."""
    endpoint = ENDPOINT_QUEUED if concurrency == 1 else ENDPOINT
    return on_scale_out(lambda server: asyncio.run(
        scenario(server, RUNS, CLIENTS, endpoint, SCALE_OUT_TIMEOUT)), concurrency)


def scale_out_followed(runs: int) -> Followed | str:
    return on_scale_out(lambda server: followed(server, runs), runs, provider=True)


def main() -> str:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=["watched", "followed"],
                        help="(a)-(d) alone, or (e) alone")
    parser.add_argument("--followed-runs", type=int, default=FOLLOWED_RUNS,
                        help="runs in (e) (a smaller number for a quick check)")
    parser.add_argument("--name", default="live",
                        help="the result file in docs/benchmarks (without .md)")
    args = parser.parse_args()
    started = time.monotonic()
    watched = follow = None
    if args.only != "followed":
        one, many = embedded()
        watched = (one, many, scale_out(1), scale_out(RUNS))
    if args.only != "watched":
        follow = (embedded_followed(args.followed_runs),
                  scale_out_followed(args.followed_runs),
                  embedded_followed(args.followed_runs, FLOOR_APPLICATION))
    elapsed = time.monotonic() - started
    return write_result(args.name, render(watched, follow, elapsed)).read_text()


if __name__ == "__main__":
    print(main())
