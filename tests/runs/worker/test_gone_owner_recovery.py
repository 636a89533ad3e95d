"""The embedded server's start after a kill -9: runs whose lease belongs to a process
of this machine that no longer exists are taken back at once (not once their leases
expire); a run held by a live process is left alone."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from tests.runs.support import execute, start, statuses
from tools_app.models import ErrorPolicy, Run, RunStatus, ToolRegistration
from tools_app.runs.store.leases import new_worker_id, owner_is_gone, runs_to_recover_at_start

pytestmark = pytest.mark.both

SCRIPT = [{"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}]},
          {"text": "done: {last_result}"}]


def owner(pid: int, mark: str = "0badc0de") -> str:
    return f"{socket.gethostname()}:{pid}:{mark}-12345678"


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=30)
    return child.pid


@pytest.fixture
def live_pid() -> Iterator[int]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield child.pid
    finally:
        child.kill()
        child.wait(timeout=30)


def leased_run(make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
               lease_owner: str) -> Run:
    """A run left 'running' under `lease_owner`, its lease far from expiring."""
    run = start(make_endpoint(SCRIPT), [tools["lookup"]], policy)
    now = timezone.now()
    Run.objects.filter(pk=run.pk).update(
        status=RunStatus.RUNNING, lease_owner=lease_owner, lease_token=1, started_at=now,
        lease_expires_at=now + timedelta(hours=1))
    return run


def test_a_run_of_a_dead_process_is_resumed_at_start_without_waiting(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    run = leased_run(make_endpoint, tools, policy, owner(dead_pid()))

    assert runs_to_recover_at_start() == [str(run.pk)]

    run.refresh_from_db()
    assert (run.status, run.resume_count) == (RunStatus.INTERRUPTED, 1)
    assert execute(run) == "succeeded"  # what the re-enqueued task does
    assert run.final_text == "done: value of k"
    assert statuses(run)[-2:] == ["interrupted", "succeeded"]


def test_a_run_of_a_live_process_is_left_to_it(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    live_pid: int,
) -> None:
    run = leased_run(make_endpoint, tools, policy, owner(live_pid))

    assert runs_to_recover_at_start() == []

    run.refresh_from_db()
    assert (run.status, run.lease_token, run.resume_count) == (RunStatus.RUNNING, 1, 0)


def test_which_owners_count_as_gone(live_pid: int) -> None:
    assert owner_is_gone(owner(dead_pid()))
    assert not owner_is_gone(owner(live_pid))
    assert not owner_is_gone(new_worker_id())  # this process's own leases
    assert owner_is_gone(owner(os.getpid()))  # an earlier life of this pid
    # Unsure means alive: another host, an unknown format.
    assert not owner_is_gone(f"elsewhere.example:{dead_pid()}:0badc0de-12345678")
    assert not owner_is_gone("w-1")
    assert not owner_is_gone(f"{socket.gethostname()}:{os.getpid()}:12345678")
