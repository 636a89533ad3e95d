"""The embedded server stopping mid-run (SIGTERM to daphne, as Ctrl+C on `make run` or a
service manager's stop) hands the run back; the next start resumes it at once, instead
of waiting for its lease to expire. A real daphne process on a fresh SQLite database."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.server_support import ROOT, TIMEOUT, environment, free_port

DAPHNE = str(Path(sys.executable).with_name("daphne"))

CREATE_RUN = """
from tools_app.runs import services
from tools_app.models import ErrorPolicy, ModelEndpoint, ToolRegistration
from tools_app.tools.registry import sync_tools
sync_tools(["tools_app.tools.example_tools"])
endpoint = ModelEndpoint.objects.create(name="slow", kind="scripted", script=[
    {"tool_calls": [{"name": "slow_tool", "arguments": {"seconds": 1.5}}]},
    {"tool_calls": [{"name": "slow_tool", "arguments": {"seconds": 8}}]},
    {"text": "done: {last_result}"}])
policy = ErrorPolicy.objects.create(name="restart", is_default=True)
run = services.run_create(user=None, endpoint=endpoint, policy=policy,
    tools=[ToolRegistration.objects.get(name="slow_tool")],
    messages=services.conversation(user_message="sleep twice"))
print("RUN", run.pk.hex)
"""


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def start_daphne(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    port = free_port()
    with log.open("ab") as out:
        return subprocess.Popen([DAPHNE, "-b", "127.0.0.1", "-p", str(port),
                                 "agentforge_web.asgi:application"], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT)


def run_row(db: Path, run_id: str) -> tuple[str, int, int]:
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT status, resume_count, rounds_count FROM tools_app_run "
                           "WHERE id = ?", (run_id,)).fetchone()
    return row[0], row[1], row[2]


def wait_for(condition: object, what: str, log: Path) -> None:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")


def test_sigterm_to_the_embedded_server_hands_the_run_back_for_the_next_start(
    tmp_path: Path,
) -> None:
    env = environment(tmp_path)
    db, log = tmp_path / "db.sqlite3", tmp_path / "daphne.log"
    manage(env, "migrate", "--noinput", "-v0")
    # Created with the database backend, so nothing runs it until daphne starts.
    run_id = manage(env | {"TASK_BACKEND": "database"}, "shell", "-c",
                    CREATE_RUN).split("RUN ")[1].strip()

    first = start_daphne(env, log)
    try:
        wait_for(lambda: run_row(db, run_id)[2] == 2, "round 1 (the 8 s sleep) to start", log)
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=TIMEOUT) is not None
    finally:
        first.kill()
    status, resume_count, _ = run_row(db, run_id)
    assert (status, resume_count) == ("interrupted", 0)

    second = start_daphne(env, log)
    try:
        wait_for(lambda: run_row(db, run_id)[0] == "succeeded", "the run to finish", log)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=TIMEOUT)
    assert run_row(db, run_id)[1] == 0  # resumed as handed back, not as a lost worker
