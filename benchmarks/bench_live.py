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
in-process worker); (c) as (b) on the scale-out configuration (PostgreSQL + Redis +
daphne + one `manage.py db_worker`), skipped when PostgreSQL or Redis is unreachable.

Run: .venv/bin/python -m benchmarks.bench_live   (about a minute; every wait is bounded)
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
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

from benchmarks.common import ROOT, summary, write_result

PYTHON = sys.executable
DAPHNE = str(Path(PYTHON).with_name("daphne"))
POSTGRES_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_URL = "redis://127.0.0.1:6379/0"

# The script every run plays: a warm-up round (the watchers connect while it sleeps),
# then ROUNDS rounds of CALCS parallel calculator calls plus one slow_tool of SLOW_S,
# then a final answer: about 17 events per round, spread out by the slow tool.
WARMUP_S, ROUNDS, CALCS, SLOW_S = 1.0, 8, 4, 0.05
ENDPOINT = "bench-live"
TOOLS = ["calculator", "slow_tool"]
TARGET_MS = 50.0

# Upper bounds of waits, never measured durations.
SETUP_TIMEOUT = 60.0
START_TIMEOUT = 30.0
SCENARIO_TIMEOUT = 60.0
TAIL_S = 0.5  # after a client sees a terminal status, how long it waits for the last seq

SEQ_RE = re.compile(r'id="run-seq" data-seq="(\d+)"')
STATUS_RE = re.compile(r'data-status="(\w+)"')
TERMINAL = {"succeeded", "failed", "cancelled"}

SETUP_CODE = """
import json, os
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth import get_user_model
from django.contrib.sessions.backends.db import SessionStore
from tools_app.api_tokens import create_token
from tools_app.models import ModelEndpoint
user = get_user_model().objects.create_user("bench", is_staff=True)
session = SessionStore()
session[SESSION_KEY] = str(user.pk)
session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
session[HASH_SESSION_KEY] = user.get_session_auth_hash()
session.create()
_, token = create_token(user, "bench")
ModelEndpoint.objects.create(name=os.environ["BENCH_ENDPOINT"], kind="scripted",
                             model="scripted", script=json.loads(os.environ["BENCH_SCRIPT"]))
print("BENCH " + json.dumps({"session": session.session_key, "token": token}))
"""


def script() -> list[dict[str, Any]]:
    calc = [{"name": "calculator", "arguments": {"expression": f"{i} * 7"}} for i in range(CALCS)]
    slow = {"name": "slow_tool", "arguments": {"seconds": SLOW_S}}
    warmup = {"tool_calls": [{"name": "slow_tool", "arguments": {"seconds": WARMUP_S}}]}
    return [warmup, *[{"tool_calls": [*calc, slow]}] * ROUNDS, {"text": "done"}]


# -- processes -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def base_env(database_url: str, workdir: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("REDIS_URL", "TASK_BACKEND", "AGENTFORGE_EMBEDDED_WORKER", "SECRET_KEY_FILE",
                 "AGENTFORGE_TOOL_MODULES"):
        env.pop(name, None)
    env.update({
        "DJANGO_SETTINGS_MODULE": "agentforge_web.settings",
        "DATABASE_URL": database_url,
        "DATA_DIR": str(workdir),
        "DEBUG": "0",  # as deployed; the session and the server share this throwaway key
        "SECRET_KEY": secrets.token_urlsafe(40),
        "ALLOWED_HOSTS": "127.0.0.1",
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        **extra,
    })
    return env


def manage(env: dict[str, str], *args: str, extra: dict[str, str] | None = None) -> str:
    done = subprocess.run([PYTHON, "manage.py", *args], cwd=ROOT, env={**env, **(extra or {})},
                          capture_output=True, text=True, timeout=SETUP_TIMEOUT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {args[0]} failed:\n{done.stdout[-2000:]}"
                           f"{done.stderr[-3000:]}")
    return done.stdout


def prepare(env: dict[str, str]) -> dict[str, str]:
    """Migrate, seed, then create the bench user, its session, an API token, the endpoint."""
    manage(env, "migrate", "--noinput", "-v0")
    manage(env, "seed_demo")
    out = manage(env, "shell", "-c", SETUP_CODE,
                 extra={"BENCH_ENDPOINT": ENDPOINT, "BENCH_SCRIPT": json.dumps(script())})
    line = next(x for x in out.splitlines() if x.startswith("BENCH "))
    return json.loads(line.removeprefix("BENCH "))  # type: ignore[no-any-return]


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@dataclass
class Server:
    base_url: str
    ws_url: str
    token: str
    cookie: str


@contextmanager
def serve(env: dict[str, str], workdir: Path, *, db_worker: bool) -> Iterator[Server]:
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
                                "--interval", "0.05", "--no-startup-delay"])
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


async def start_run(http: aiohttp.ClientSession, server: Server) -> str:
    body = {"endpoint": ENDPOINT, "tools": TOOLS,
            "messages": [{"role": "user", "content": "live latency benchmark"}]}
    async with http.post(f"{server.base_url}/api/runs", json=body,
                         headers={"Authorization": f"Bearer {server.token}"}) as response:
        data = await response.json()
        if response.status != 201:
            raise RuntimeError(f"POST /api/runs: {response.status} {data}")
        return str(data["id"])


async def watch(http: aiohttp.ClientSession, server: Server, run_id: str,
                deadline: float) -> Watch:
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
                    result.finished = True
                    tail_until = time.monotonic() + TAIL_S
    except (aiohttp.ClientError, TimeoutError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result


async def created_at(http: aiohttp.ClientSession, server: Server, run_id: str,
                     ) -> dict[int, float]:
    """seq -> RunEvent.created_at (epoch seconds), read back through the API."""
    stamps: dict[int, float] = {}
    after = 0
    for _ in range(100):
        async with http.get(f"{server.base_url}/api/runs/{run_id}/events?after={after}",
                            headers={"Authorization": f"Bearer {server.token}"}) as response:
            data = await response.json()
        for event in data["events"]:
            stamps[event["seq"]] = datetime.fromisoformat(event["created_at"]).timestamp()
        if not data["events"]:
            return stamps
        after = data["last_seq"]
    return stamps


@dataclass
class Outcome:
    latencies_ms: list[float]
    runs: int
    clients: int
    events: int  # events created while watched, summed over runs
    deliveries: int  # (event, client) pairs measured
    messages: int
    window_s: float  # first to last measured event's created_at
    errors: list[str]
    unfinished: int


async def scenario(server: Server, runs: int, clients: int) -> Outcome:
    deadline = time.monotonic() + SCENARIO_TIMEOUT
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=20)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        run_ids = [await start_run(http, server) for _ in range(runs)]
        assignment = [run_ids[i % runs] for i in range(clients)]
        watches = await asyncio.gather(*(watch(http, server, run_id, deadline)
                                         for run_id in assignment))
        stamps = {run_id: await created_at(http, server, run_id) for run_id in run_ids}
    latencies: list[float] = []
    measured_events: set[tuple[str, int]] = set()
    for w in watches:
        covered = 0
        for arrived, seq in w.messages:
            for s in range(covered + 1, seq + 1):
                created = stamps[w.run_id].get(s)
                if created is not None and created > w.resumed_at:
                    latencies.append((arrived - created) * 1000)
                    measured_events.add((w.run_id, s))
            covered = max(covered, seq)
    times = [stamps[r][s] for r, s in measured_events]
    return Outcome(
        latencies_ms=latencies, runs=runs, clients=clients, events=len(measured_events),
        deliveries=len(latencies), messages=sum(len(w.messages) for w in watches),
        window_s=(max(times) - min(times)) if times else float("nan"),
        errors=sorted({w.error for w in watches if w.error}),
        unfinished=sum(1 for w in watches if not w.finished),
    )


# -- configurations --------------------------------------------------------------------


def embedded() -> tuple[Outcome, Outcome]:
    workdir = Path(tempfile.mkdtemp(prefix="agentforge-bench-live-"))
    try:
        env = base_env(f"sqlite:///{workdir / 'bench.sqlite3'}", workdir,
                       AGENTFORGE_EMBEDDED_WORKER="1")
        with serve(env, workdir, db_worker=False) as server:
            one = asyncio.run(scenario(server, 1, 1))
            many = asyncio.run(scenario(server, 20, 50))
        return one, many
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def scale_out() -> Outcome | str:
    """(c), or why it was skipped."""
    try:
        import psycopg
        import redis
    except ImportError as exc:
        return f"skipped: {exc}"
    try:
        redis.Redis.from_url(REDIS_URL, socket_timeout=2).ping()
        admin = psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=3)
    except Exception as exc:  # noqa: BLE001 - any failure to reach them means "skip"
        return f"skipped: PostgreSQL or Redis is not reachable on loopback ({exc})"
    name = f"agentforge_bench_live_{secrets.token_hex(4)}"
    workdir = Path(tempfile.mkdtemp(prefix="agentforge-bench-live-"))
    try:
        admin.execute(f'CREATE DATABASE "{name}"')
        env = base_env(f"postgres://postgres@127.0.0.1:5432/{name}", workdir,
                       REDIS_URL=REDIS_URL, TASK_BACKEND="database")
        with serve(env, workdir, db_worker=True) as server:
            return asyncio.run(scenario(server, 20, 50))
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
        shutil.rmtree(workdir, ignore_errors=True)


# -- report ----------------------------------------------------------------------------


def row(label: str, outcome: Outcome) -> str:
    stats = summary(outcome.latencies_ms)
    rate = outcome.events / outcome.window_s if outcome.window_s > 0 else float("nan")
    delivery_rate = outcome.deliveries / outcome.window_s if outcome.window_s > 0 else float("nan")
    return (f"| {label} | {outcome.runs} / {outcome.clients} | {stats['p50']:.1f} ms "
            f"| {stats['p95']:.1f} ms | {stats['max']:.1f} ms | {outcome.events} "
            f"| {outcome.deliveries} | {outcome.messages} | {rate:.0f} / {delivery_rate:.0f} |")


def verdict(outcome: Outcome) -> str:
    p95 = summary(outcome.latencies_ms)["p95"]
    return "meets" if p95 < TARGET_MS else "MISSES"


def problems(label: str, outcome: Outcome) -> list[str]:
    notes = [f"{label}: {error}" for error in outcome.errors]
    if outcome.unfinished:
        notes.append(f"{label}: {outcome.unfinished} client(s) did not see the run finish "
                     f"within {SCENARIO_TIMEOUT:g} s")
    return notes


def main() -> str:
    started = time.monotonic()
    one, many = embedded()
    scaled = scale_out()
    elapsed = time.monotonic() - started
    rows = [row("(a) embedded", one), row("(b) embedded", many)]
    verdicts = [f"(a) {verdict(one)}", f"(b) {verdict(many)}"]
    notes = problems("(a)", one) + problems("(b)", many)
    if isinstance(scaled, Outcome):
        rows.append(row("(c) scale-out", scaled))
        verdicts.append(f"(c) {verdict(scaled)}")
        notes += problems("(c)", scaled)
        scale_note = ("(c) PostgreSQL + Redis channel layer + daphne + ONE `manage.py "
                      "db_worker` (TASK_BACKEND=database). A db_worker executes one task at a "
                      "time, so its 20 runs ran one after another, not concurrently; the 50 "
                      "clients were all connected throughout.")
    else:
        scale_note = f"(c) scale-out: {scaled}."
    per_run = 2 + ROUNDS * (2 + 3 * (CALCS + 1))
    return write_result("live", f"""
## Live latency: event commit -> arrival in a WebSocket client

A real `daphne` server on loopback, runs started with POST /api/runs (executed by the
server's worker), aiohttp WebSocket clients with a logged-in session cookie. Each run plays
a scripted model: a {WARMUP_S:g} s warm-up call (the watchers connect meanwhile), then
{ROUNDS} rounds of {CALCS} parallel `calculator` calls + one `slow_tool` of {SLOW_S:g} s,
then an answer (about {per_run} events per run). Latency = arrival (client clock) -
`RunEvent.created_at`, for every event a message newly covers, counted only for events
created after the client sent its resume. `created_at` is stamped at the RunEvent insert,
inside the event's transaction just before the commit, so the figures include the rest of
that transaction and the commit (a slight over-estimate). Server and clients share one
machine ({os.cpu_count()} CPUs), one clock.

| scenario | runs / clients | p50 | p95 | max | events | deliveries | messages | events/s / deliveries/s |
|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

(a) and (b): the embedded configuration (SQLite WAL, in-memory channel layer, in-process
worker in the daphne process). In (b) the 50 clients are spread 3/3/.../2 over the 20 runs.
{scale_note}
"events" counts events created while watched; "deliveries" counts (event, client) pairs;
a message can cover several events. Total benchmark time {elapsed:.0f} s.

Target p95 < {TARGET_MS:g} ms: {", ".join(verdicts)} the target.
{chr(10).join(f"- problem: {n}" for n in notes)}
""").read_text()


if __name__ == "__main__":
    print(main())
