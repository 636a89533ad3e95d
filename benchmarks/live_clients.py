"""bench_live's server and clients: a throwaway product served by `daphne` (and, for the
scale-out configuration, a `manage.py db_worker`), the fake provider where a workload
needs one, the WebSocket viewer that follows a run as the page does, the Server-Sent
Events client that follows it as an API script does, and the read-back of each event's
stored time, from which every delivery's latency is counted (`deliveries`).
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import subprocess
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

from benchmarks.common import ROOT, UNFLAG_LOOPS_CODE
from benchmarks.live_workload import (
    CALCS,
    ENDPOINT,
    ENDPOINT_FOLLOWED,
    ENDPOINT_QUEUED,
    ENDPOINT_SINGLE,
    FOLLOWED_MODEL,
    ROUNDS,
    SLOW_S,
    START_TIMEOUT,
    TAIL_S,
    WARMUP_S,
    WARMUP_SINGLE_S,
)
from benchmarks.processes import DAPHNE, PYTHON, FakeLLM, cpu_seconds, free_port, manage, stop

SEQ_RE = re.compile(r'id="run-seq" data-seq="(\d+)"')
STATUS_RE = re.compile(r'data-status="(\w+)"')
SSE_ID_RE = re.compile(rb"^id: (\d+)$", re.MULTILINE)
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
if os.environ.get("BENCH_FAKE_URL"):
    ModelEndpoint.objects.create(name=os.environ["BENCH_FOLLOWED"], kind="openai",
                                 base_url=os.environ["BENCH_FAKE_URL"],
                                 model=os.environ["BENCH_FOLLOWED_MODEL"])
print("BENCH " + json.dumps({"session": session.session_key, "token": token}))
"""


def script(warmup_s: float) -> list[dict[str, Any]]:
    calc = [{"name": "calculator", "arguments": {"expression": f"{i} * 7"}} for i in range(CALCS)]
    slow = {"name": "slow_tool", "arguments": {"seconds": SLOW_S}}
    warmup = [{"tool_calls": [{"name": "slow_tool", "arguments": {"seconds": warmup_s}}]}]
    return [*(warmup if warmup_s else []), *[{"tool_calls": [*calc, slow]}] * ROUNDS,
            {"text": "done"}]


# -- processes -------------------------------------------------------------------------


def prepare(env: dict[str, str], fake_url: str | None) -> dict[str, str]:
    """Migrate, seed, then create the bench user, its session, an API token, the
    endpoints (the followed runs' one only with the fake provider at `fake_url`)."""
    manage(env, "migrate", "--noinput", "-v0")
    manage(env, "seed_demo")
    scripts = {ENDPOINT: script(WARMUP_S), ENDPOINT_QUEUED: script(0),
               ENDPOINT_SINGLE: script(WARMUP_SINGLE_S)}
    out = manage(env, "shell", "-c", SETUP_CODE, extra={
        "BENCH_SCRIPTS": json.dumps(scripts), "BENCH_FAKE_URL": fake_url or "",
        "BENCH_FOLLOWED": ENDPOINT_FOLLOWED, "BENCH_FOLLOWED_MODEL": FOLLOWED_MODEL})
    line = next(x for x in out.splitlines() if x.startswith("BENCH "))
    return json.loads(line.removeprefix("BENCH "))  # type: ignore[no-any-return]


@dataclass
class Server:
    base_url: str
    ws_url: str
    token: str
    cookie: str
    pids: dict[str, int] = field(default_factory=dict)  # the product's processes

    def cpu_seconds(self) -> float:
        """CPU time so far (user + system) of the product's processes, together."""
        return sum(cpu_seconds(pid) for pid in self.pids.values())


PRODUCT_APPLICATION = "agentforge_web.asgi:application"
# The same server with its live batches not rendered (live_floor_app.py).
FLOOR_APPLICATION = "benchmarks.live_floor_app:application"


@contextmanager
def serve(env: dict[str, str], workdir: Path, *, db_worker: bool,
          concurrency: int = 1, provider: bool = False,
          application: str = PRODUCT_APPLICATION) -> Iterator[Server]:
    """The product on a free loopback port (daphne serving `application`); with
    `provider`, the fake provider too (in a process of its own, not counted in
    `Server.cpu_seconds`)."""
    fake = FakeLLM() if provider else None
    processes: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    if fake is not None:
        processes.append(("fake_llm", fake.process, workdir / "fake_llm.log"))
    try:
        creds = prepare(env, fake.url if fake is not None else None)
    except BaseException:
        for _, process, _ in processes:
            stop(process)
        raise
    port = free_port()
    server = Server(base_url=f"http://127.0.0.1:{port}", ws_url=f"ws://127.0.0.1:{port}",
                    token=creds["token"],
                    cookie=f"sessionid={creds['session']}; csrftoken={secrets.token_hex(16)}")

    def start(name: str, argv: list[str]) -> None:
        log = workdir / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out,
                                       stderr=subprocess.STDOUT)
        processes.append((name, process, log))
        server.pids[name] = process.pid

    try:
        start("daphne", [DAPHNE, "-b", "127.0.0.1", "-p", str(port), application])
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
                tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
                raise RuntimeError(f"{name} exited ({process.returncode}):\n{tail}")
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


async def start_run(http: aiohttp.ClientSession, server: Server, endpoint: str,
                    tools: list[str]) -> str:
    body = {"endpoint": endpoint, "tools": tools,
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


async def follow_sse(http: aiohttp.ClientSession, server: Server, run_id: str,
                     deadline: float) -> Watch:
    """Follow one run as an API script does: GET /api/runs/<id>/events/stream from seq 0
    until the server ends the stream (the run has ended and every event is sent)."""
    result = Watch(run_id)
    url = f"{server.base_url}/api/runs/{run_id}/events/stream"
    try:
        result.resumed_at = time.time()
        async with http.get(url, headers={"Authorization": f"Bearer {server.token}"},
                            timeout=aiohttp.ClientTimeout(total=None)) as response:
            if response.status != 200:
                result.error = f"HTTP {response.status}"
                return result
            pending = b""
            while (remaining := deadline - time.monotonic()) > 0:
                try:
                    chunk = await asyncio.wait_for(response.content.readany(), remaining)
                except TimeoutError:
                    break
                arrived = time.time()
                if not chunk:
                    result.finished = True  # the server ends the stream at the run's end
                    break
                *messages, pending = (pending + chunk).split(b"\n\n")
                seqs = [int(m.group(1)) for message in messages
                        if (m := SSE_ID_RE.search(message))]
                if seqs:
                    result.messages.append((arrived, max(seqs)))
    except (aiohttp.ClientError, TimeoutError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result


@dataclass
class RunState:
    status: str
    wall_ms: float | None  # started -> finished, as the run page shows it


async def run_state(http: aiohttp.ClientSession, server: Server, run_id: str) -> RunState:
    async with http.get(f"{server.base_url}/api/runs/{run_id}",
                        headers={"Authorization": f"Bearer {server.token}"}) as response:
        data = await response.json()
    wall = data.get("wall_ms")
    return RunState(str(data["status"]), float(wall) if wall is not None else None)


@dataclass
class Deliveries:
    latencies_ms: list[float] = field(default_factory=list)  # arrival - created_at
    emitted_ms: list[float] = field(default_factory=list)  # arrival - the engine's time
    measured: set[tuple[str, int]] = field(default_factory=set)  # (run, seq) delivered live


def deliveries(watches: list[Watch], stamps: dict[str, dict[int, Stamp]]) -> Deliveries:
    """Every (event, client) pair delivered live: each seq a message newly covers, for
    events created after the client connected or resumed (the rest is catch-up)."""
    result = Deliveries()
    for w in watches:
        covered = 0
        for arrived, seq in w.messages:
            for s in range(covered + 1, seq + 1):  # what this message newly covers
                stamp = stamps[w.run_id].get(s)
                if stamp is None or stamp.created <= w.resumed_at:
                    continue  # catch-up, not live
                result.latencies_ms.append((arrived - stamp.created) * 1000)
                if stamp.emitted is not None:
                    result.emitted_ms.append((arrived - stamp.emitted) * 1000)
                result.measured.add((w.run_id, s))
            covered = max(covered, seq)
    return result
