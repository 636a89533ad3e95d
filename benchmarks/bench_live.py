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
at a time and (d) 20 concurrent runs (`--concurrency 20`), 50 clients each; (c) and (d) are
skipped when PostgreSQL or Redis is unreachable on loopback. Runs that do not finish
within the time bound are reported.

Run: .venv/bin/python -m benchmarks.bench_live   (about two minutes; every wait is bounded)
The workload and a scenario's `Outcome` are live_workload.py; the report live_report.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.common import ROOT, UNFLAG_LOOPS_CODE, write_result
from benchmarks.live_report import render
from benchmarks.live_workload import (
    CALCS,
    CLIENTS,
    EMBEDDED_TIMEOUT,
    ENDPOINT,
    ENDPOINT_QUEUED,
    ENDPOINT_SINGLE,
    ROUNDS,
    RUNS,
    SCALE_OUT_TIMEOUT,
    SINGLE_REPEATS,
    SLOW_S,
    START_TIMEOUT,
    TAIL_S,
    TOOLS,
    WARMUP_S,
    WARMUP_SINGLE_S,
    Outcome,
)
from benchmarks.processes import DAPHNE, PYTHON, base_env, free_port, manage, stop

POSTGRES_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_URL = "redis://127.0.0.1:6379/0"

SEQ_RE = re.compile(r'id="run-seq" data-seq="(\d+)"')
STATUS_RE = re.compile(r'data-status="(\w+)"')
TERMINAL = {"succeeded", "failed", "cancelled"}

SETUP_CODE = UNFLAG_LOOPS_CODE + """
import json, os
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth import get_user_model
from django.contrib.sessions.backends.db import SessionStore
from tools_app.web.api.tokens import create_token
from tools_app.models import ModelEndpoint
user = get_user_model().objects.create_user("bench", is_staff=True)
session = SessionStore()
session[SESSION_KEY] = str(user.pk)
session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
session[HASH_SESSION_KEY] = user.get_session_auth_hash()
session.create()
_, token = create_token(user, "bench")
for name, steps in json.loads(os.environ["BENCH_SCRIPTS"]).items():
    ModelEndpoint.objects.create(name=name, kind="scripted", model="scripted", script=steps)
print("BENCH " + json.dumps({"session": session.session_key, "token": token}))
"""


def script(warmup_s: float) -> list[dict[str, Any]]:
    calc = [{"name": "calculator", "arguments": {"expression": f"{i} * 7"}} for i in range(CALCS)]
    slow = {"name": "slow_tool", "arguments": {"seconds": SLOW_S}}
    warmup = [{"tool_calls": [{"name": "slow_tool", "arguments": {"seconds": warmup_s}}]}]
    return [*(warmup if warmup_s else []), *[{"tool_calls": [*calc, slow]}] * ROUNDS,
            {"text": "done"}]


# -- processes -------------------------------------------------------------------------


def prepare(env: dict[str, str]) -> dict[str, str]:
    """Migrate, seed, then create the bench user, its session, an API token, the endpoint."""
    manage(env, "migrate", "--noinput", "-v0")
    manage(env, "seed_demo")
    scripts = {ENDPOINT: script(WARMUP_S), ENDPOINT_QUEUED: script(0),
               ENDPOINT_SINGLE: script(WARMUP_SINGLE_S)}
    out = manage(env, "shell", "-c", SETUP_CODE, extra={"BENCH_SCRIPTS": json.dumps(scripts)})
    line = next(x for x in out.splitlines() if x.startswith("BENCH "))
    return json.loads(line.removeprefix("BENCH "))  # type: ignore[no-any-return]


@dataclass
class Server:
    base_url: str
    ws_url: str
    token: str
    cookie: str


@contextmanager
def serve(env: dict[str, str], workdir: Path, *, db_worker: bool,
          concurrency: int = 1) -> Iterator[Server]:
    creds = prepare(env)
    port = free_port()
    server = Server(base_url=f"http://127.0.0.1:{port}", ws_url=f"ws://127.0.0.1:{port}",
                    token=creds["token"],
                    cookie=f"sessionid={creds['session']}; csrftoken={secrets.token_hex(16)}")
    processes: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    def start(name: str, argv: list[str]) -> None:
        log = workdir / f"{name}.log"
        with log.open("wb") as out:
            processes.append((name, subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out,
                                                     stderr=subprocess.STDOUT), log))

    try:
        start("daphne", [DAPHNE, "-b", "127.0.0.1", "-p", str(port),
                         "agentforge_web.asgi:application"])
        if db_worker:
            start("db_worker", [PYTHON, "manage.py", "db_worker", "--no-reload",
                                "--interval", "0.05", "--no-startup-delay",
                                "--concurrency", str(concurrency)])
        wait_until_up(server, processes)
        yield server
    finally:
        for _, process, _ in processes:
            stop(process)


def wait_until_up(server: Server, processes: list[tuple[str, subprocess.Popen[bytes], Path]],
                  ) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    request = urllib.request.Request(f"{server.base_url}/api/runs",
                                     headers={"Authorization": f"Bearer {server.token}"})
    while time.monotonic() < deadline:
        for name, process, log in processes:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited ({process.returncode}):\n"
                                   f"{log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the server did not answer within {START_TIMEOUT} s")


# -- clients ---------------------------------------------------------------------------


@dataclass
class Watch:
    run_id: str
    resumed_at: float = 0.0
    messages: list[tuple[float, int]] = field(default_factory=list)  # (arrival, last seq)
    finished: bool = False
    error: str = ""


async def start_run(http: aiohttp.ClientSession, server: Server, endpoint: str) -> str:
    body = {"endpoint": endpoint, "tools": TOOLS,
            "messages": [{"role": "user", "content": "live latency benchmark"}]}
    async with http.post(f"{server.base_url}/api/runs", json=body,
                         headers={"Authorization": f"Bearer {server.token}"}) as response:
        data = await response.json()
        if response.status != 201:
            raise RuntimeError(f"POST /api/runs: {response.status} {data}")
        return str(data["id"])


async def watch(http: aiohttp.ClientSession, server: Server, run_id: str,
                deadline: float) -> Watch:
    """Follow one run like the page does, until it is finished (or the deadline)."""
    result = Watch(run_id)
    headers = {"Origin": server.base_url, "Cookie": server.cookie}
    try:
        async with http.ws_connect(f"{server.ws_url}/ws/runs/{run_id}/", headers=headers,
                                   timeout=aiohttp.ClientWSTimeout(ws_close=2)) as ws:
            result.resumed_at = time.time()
            await ws.send_json({"type": "resume", "after": 0})
            tail_until: float | None = None
            while True:
                limit = deadline if tail_until is None else min(deadline, tail_until)
                remaining = limit - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    message = await asyncio.wait_for(ws.receive(), timeout=remaining)
                except TimeoutError:
                    break
                arrived = time.time()
                if message.type != aiohttp.WSMsgType.TEXT:
                    result.error = f"socket closed: {message.type.name} {message.data}"
                    break
                seqs = SEQ_RE.findall(message.data)
                if seqs:
                    result.messages.append((arrived, int(seqs[-1])))
                status = STATUS_RE.search(message.data)
                if status and status.group(1) in TERMINAL and tail_until is None:
                    # The header can be ahead of the seq marker: wait a moment for the rest.
                    result.finished = True
                    tail_until = time.monotonic() + TAIL_S
    except (aiohttp.ClientError, TimeoutError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result


@dataclass
class Stamp:
    created: float  # RunEvent.created_at, epoch seconds
    emitted: float | None  # the engine event's own time ("at"); None for run_status rows


async def stamps_of(http: aiohttp.ClientSession, server: Server, run_id: str,
                    ) -> dict[int, Stamp]:
    """seq -> when the event was emitted and stored, read back through the API."""
    stamps: dict[int, Stamp] = {}
    after = 0
    for _ in range(100):  # 500 events a page
        async with http.get(f"{server.base_url}/api/runs/{run_id}/events?after={after}",
                            headers={"Authorization": f"Bearer {server.token}"}) as response:
            data = await response.json()
        if not data["events"]:
            break
        for event in data["events"]:
            at = event["payload"].get("at")
            stamps[event["seq"]] = Stamp(
                created=datetime.fromisoformat(event["created_at"]).timestamp(),
                emitted=float(at) if isinstance(at, int | float) else None)
        after = data["last_seq"]
    return stamps


async def scenario(server: Server, runs: int, clients: int, endpoint: str,
                   timeout: float) -> Outcome:
    load_before = os.getloadavg()[0]
    deadline = time.monotonic() + timeout
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=20)) as http:
        run_ids = [await start_run(http, server, endpoint) for _ in range(runs)]
        assignment = [run_ids[i % runs] for i in range(clients)]
        watches = await asyncio.gather(*(watch(http, server, run_id, deadline)
                                         for run_id in assignment))
        stamps = {run_id: await stamps_of(http, server, run_id) for run_id in run_ids}
        finished = 0
        for run_id in run_ids:
            async with http.get(f"{server.base_url}/api/runs/{run_id}",
                                headers={"Authorization": f"Bearer {server.token}"}) as r:
                finished += (await r.json())["status"] in TERMINAL
    latencies: list[float] = []
    emitted: list[float] = []
    measured: set[tuple[str, int]] = set()
    for w in watches:
        covered = 0
        for arrived, seq in w.messages:
            for s in range(covered + 1, seq + 1):  # what this message newly covers
                stamp = stamps[w.run_id].get(s)
                if stamp is None or stamp.created <= w.resumed_at:
                    continue  # catch-up, not live
                latencies.append((arrived - stamp.created) * 1000)
                if stamp.emitted is not None:
                    emitted.append((arrived - stamp.emitted) * 1000)
                measured.add((w.run_id, s))
            covered = max(covered, seq)
    times = [stamps[r][s].created for r, s in measured]
    return Outcome(
        runs=runs, clients=clients, latencies_ms=latencies, emitted_ms=emitted,
        events=len(measured), messages=sum(len(w.messages) for w in watches),
        window_s=(max(times) - min(times)) if len(times) > 1 else float("nan"),
        runs_finished=finished,
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


# -- configurations --------------------------------------------------------------------


def embedded() -> tuple[Outcome, Outcome]:
    """(a) and (b): SQLite, the in-memory channel layer, the worker inside daphne."""
    workdir = Path(tempfile.mkdtemp(prefix="agentforge-bench-live-"))
    try:
        env = base_env(f"sqlite:///{workdir / 'bench.sqlite3'}", workdir,
                       AGENTFORGE_EMBEDDED_WORKER="1")
        with serve(env, workdir, db_worker=False) as server:
            one = merged([asyncio.run(scenario(server, 1, 1, ENDPOINT_SINGLE, EMBEDDED_TIMEOUT))
                          for _ in range(SINGLE_REPEATS)])
            many = asyncio.run(scenario(server, RUNS, CLIENTS, ENDPOINT, EMBEDDED_TIMEOUT))
        return one, many
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def scale_out(concurrency: int) -> Outcome | str:
    """(c) with one worker slot, (d) with one per run; or why it was skipped."""
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
                       REDIS_URL=REDIS_URL, TASK_BACKEND="database")
        endpoint = ENDPOINT_QUEUED if concurrency == 1 else ENDPOINT
        with serve(env, workdir, db_worker=True, concurrency=concurrency) as server:
            return asyncio.run(scenario(server, RUNS, CLIENTS, endpoint, SCALE_OUT_TIMEOUT))
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> str:
    started = time.monotonic()
    one, many = embedded()
    serial, concurrent = scale_out(1), scale_out(RUNS)
    elapsed = time.monotonic() - started
    return write_result("live", render(one, many, serial, concurrent, elapsed)).read_text()


if __name__ == "__main__":
    print(main())
