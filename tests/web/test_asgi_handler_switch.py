"""AGENTFORGE_ASGI_HANDLER=django (agentforge_web.handler.http_application, read once
when asgi.py is imported): HTTP served by Django's own ASGIHandler instead of the
one-hop handler, the plain alternative the product-path benchmark measures it against;
the static files, the WebSocket router and the embedded worker as always. Real
processes on a fresh SQLite database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.server_support import ROOT, TIMEOUT, environment, free_port

DAPHNE = str(Path(sys.executable).with_name("daphne"))
REQUESTS = 40

SERVED = """
import agentforge_web.asgi as asgi
http = asgi.application.application_mapping["http"]
print(type(http).__name__, type(http.application).__module__,
      type(http.application).__name__, sorted(asgi.application.application_mapping))
"""

SET_UP = """
from django.contrib.auth import get_user_model
from tools_app.models import ErrorPolicy, ModelEndpoint
from tools_app.tools.registry import sync_tools
from tools_app.web.api.tokens import create_token
sync_tools(["tools_app.tools.example_tools"])
ErrorPolicy.objects.create(name="default", is_default=True)
ModelEndpoint.objects.create(name="scripted", kind="scripted", script=[
    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
    {"text": "done: {last_result}"}])
user = get_user_model().objects.create_user("api", is_staff=True)
print("TOKEN", create_token(user, "test")[1])
"""


def served(tmp_path: Path, value: str) -> subprocess.CompletedProcess[str]:
    env = environment(tmp_path) | {"AGENTFORGE_EMBEDDED_WORKER": "0",
                                   "AGENTFORGE_ASGI_HANDLER": value}
    return subprocess.run([sys.executable, "-c", SERVED], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)


@pytest.mark.parametrize(("value", "handler"), [
    ("", "agentforge_web.handler OneHopASGIHandler"),
    ("onehop", "agentforge_web.handler OneHopASGIHandler"),
    ("django", "django.core.handlers.asgi ASGIHandler"),
])
def test_the_switch_picks_the_http_handler_and_changes_nothing_else(
    tmp_path: Path, value: str, handler: str,
) -> None:
    done = served(tmp_path, value)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == (
        f"ASGIStaticFilesHandler {handler} ['http', 'websocket']")


def test_a_bad_value_fails_the_start_loudly(tmp_path: Path) -> None:
    done = served(tmp_path, "plain")
    assert done.returncode != 0
    assert "AGENTFORGE_ASGI_HANDLER must be 'onehop' (the default) or 'django'" in done.stderr


def open_database_files(pid: int, directory: Path) -> int:
    """The files of `directory` (the database and its WAL) the process has open."""
    return sum(1 for target in fd_targets(pid) if target.startswith(str(directory)))


def fd_targets(pid: int) -> list[str]:
    """What each open descriptor of the process points at; one closed between the listing
    and the read (the server's other threads go on) is left out."""
    targets = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            targets.append(os.readlink(fd))
        except FileNotFoundError:
            continue
    return targets


def call(base: str, token: str, method: str, path: str,
         body: dict[str, Any] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"{base}{path}", method=method, data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
        return response.status, response.read()


def wait_until_up(base: str, token: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + TIMEOUT
    while True:
        assert server.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        try:
            if call(base, token, "GET", "/api/runs")[0] == 200:
                return
        except OSError:
            time.sleep(0.1)


def test_a_run_started_over_the_api_succeeds_with_djangos_own_handler(tmp_path: Path) -> None:
    """The embedded default served by Django's handler: a run started with POST
    /api/runs is executed by the embedded worker, read back, and its event stream (an
    async response) served to its end; requests leave no connection open behind them."""
    env = environment(tmp_path) | {"AGENTFORGE_ASGI_HANDLER": "django"}
    for args in (["migrate", "--noinput", "-v0"], ["shell", "-c", SET_UP]):
        done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
    token = done.stdout.split("TOKEN ")[1].strip()
    port, log = free_port(), tmp_path / "daphne.log"
    base = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        server = subprocess.Popen([DAPHNE, "-b", "127.0.0.1", "-p", str(port),
                                   "agentforge_web.asgi:application"], cwd=ROOT, env=env,
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until_up(base, token, server, log)
        status, body = call(base, token, "POST", "/api/runs", {
            "endpoint": "scripted", "tools": ["get_weather"],
            "messages": [{"role": "user", "content": "Weather in Paris?"}]})
        assert status == 201, body
        run_id = json.loads(body)["id"]
        deadline = time.monotonic() + TIMEOUT
        while (run := json.loads(call(base, token, "GET", f"/api/runs/{run_id}")[1])
               )["status"] not in ("succeeded", "failed", "cancelled"):
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        assert run["status"] == "succeeded", run
        assert [r["status"] for r in run["rounds"]] == ["responded", "responded"]
        assert [c["state"] for c in run["rounds"][0]["tool_calls"]] == ["succeeded"]
        status, stream = call(base, token, "GET", f"/api/runs/{run_id}/events/stream")
        assert status == 200
        last = stream.strip().split(b"\n\n")[-1].split(b"\n")
        assert last[1] == b"event: run_status"
        assert json.loads(last[2].removeprefix(b"data: "))["payload"]["status"] == "succeeded"

        # Each request's thread ends with it, and its connection is closed with it: not
        # left open behind it (settings.py keeps SQLite's for threads that live on).
        before = open_database_files(server.pid, tmp_path)
        for _ in range(REQUESTS):
            assert call(base, token, "GET", f"/api/runs/{run_id}")[0] == 200
        assert open_database_files(server.pid, tmp_path) - before < REQUESTS // 4
    finally:
        server.terminate()
        server.wait(timeout=TIMEOUT)
