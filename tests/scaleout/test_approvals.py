"""Approvals across processes: a `db_worker` process runs the run until a flagged call
waits; the decision is sent to a separate daphne process (the JSON API); the run then
continues on a worker, which executes the call exactly once. While the run waits, no
worker holds it and its task has ended."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser

from tools_app.models import CallDecision, ErrorPolicy, ModelEndpoint, ToolRegistration
from tools_app.web.api.tokens import create_token

from .conftest import (
    REPO_ROOT,
    START_TIMEOUT,
    WorkerPool,
    counted,
    start_run,
    statuses,
    tasks_of,
    wait_status,
    wait_terminal,
    wait_until,
)

pytestmark = [pytest.mark.scaleout, pytest.mark.django_db(transaction=True)]

DAPHNE = str(Path(sys.executable).with_name("daphne"))
SCRIPT = [
    {"tool_calls": [{"name": "tally", "arguments": {"tag": "approved"}},
                    {"name": "slow_lookup", "arguments": {"key": "k"}}]},
    {"text": "Done: {last_results}"},
]


class Daphne:
    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process, self.port, self.log = process, port, log

    def post(self, path: str, body: dict[str, Any], token: str) -> tuple[int, Any]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
            method="POST", headers={"Authorization": f"Bearer {token}",
                                    "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/accounts/login/",
                                        timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False


@pytest.fixture
def daphne(workers: WorkerPool, tmp_path: Path) -> Iterator[Daphne]:
    """A web process of its own, on the workers' database and Redis (never a worker:
    the database task backend)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "daphne.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [DAPHNE, "-b", "127.0.0.1", "-p", str(port), "agentforge_web.asgi:application"],
            cwd=REPO_ROOT, env=workers.env, stdout=out, stderr=subprocess.STDOUT)
    server = Daphne(process, port, log)
    try:
        wait_until(server.answers, START_TIMEOUT, "daphne to answer")
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def test_a_decision_sent_to_daphne_resumes_the_run_on_a_worker(
    workers: WorkerPool, daphne: Daphne, counter_dir: Path, bob: AbstractUser,
    slow_tools: dict[str, ToolRegistration], policy: ErrorPolicy, make_endpoint: Any,
) -> None:
    ToolRegistration.objects.filter(name="tally").update(requires_approval=True)
    endpoint: ModelEndpoint = make_endpoint(SCRIPT)
    run = start_run(endpoint, [ToolRegistration.objects.get(name="tally"),
                               slow_tools["slow_lookup"]], policy, user=bob)
    first = workers.start("first")
    workers.wait_ready(first)

    wait_status(run, "waiting", workers)
    run.refresh_from_db()
    assert (run.lease_owner, run.lease_expires_at) == ("", None)  # no worker holds it
    wait_until(lambda: all(t.status == "SUCCESSFUL" for t in tasks_of(run)), 30,
               "the first task to end", workers)
    assert counted(counter_dir, "tally") == []
    assert counted(counter_dir, "slow_lookup") == []

    token = create_token(bob, "ci")[1]
    tally_call = run.tool_calls.get(tool_name="tally")
    status, body = daphne.post(f"/api/runs/{run.pk}/decisions",
                               {"call_id": tally_call.call_id, "decision": "approve"}, token)
    assert status == 201, (body, daphne.log.read_text()[-3000:])
    assert body["run_status"] == "queued"

    run = wait_terminal(run, workers)
    assert run.status == "succeeded", (run.error_type, run.error_message, workers.logs())
    assert counted(counter_dir, "tally") == ["approved"]  # once, on a worker
    assert counted(counter_dir, "slow_lookup") == ["k"]
    assert "tallied approved" in (run.final_text or "")
    assert statuses(run) == ["queued", "waiting", "queued", "succeeded"]
    assert CallDecision.objects.get(run=run).decided_by_label == "bob"
    assert len(tasks_of(run)) == 2  # the decision enqueued the second one
    again, body = daphne.post(f"/api/runs/{run.pk}/decisions",
                              {"call_id": tally_call.call_id, "decision": "approve"}, token)
    assert (again, body["error"]["code"]) == (409, "run_finished")
