"""One `db_worker` process running several runs at once (--concurrency /
AGENTFORGE_WORKER_CONCURRENCY): they overlap in time, each is claimed once, a worker
takes no more than it has slots for, and a SIGTERM checkpoints every run in progress."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tools_app.models import ErrorPolicy, Run, RunStatus, ToolCall, ToolRegistration

from .conftest import (
    RUN_TIMEOUT,
    WorkerPool,
    assert_seqs_complete,
    counted,
    start_run,
    statuses,
    tasks_of,
    wait_terminal,
    wait_until,
)

pytestmark = [pytest.mark.scaleout, pytest.mark.django_db(transaction=True)]

EXIT_TIMEOUT = 20.0


def one_slow_round(tag: str, seconds: float) -> list[dict[str, Any]]:
    return [{"tool_calls": [{"name": "tally", "arguments": {"tag": tag, "seconds": seconds}}]},
            {"text": "Model saw: {last_result}"}]


def test_a_worker_with_three_slots_runs_three_runs_at_once_and_no_more(
    workers: WorkerPool, counter_dir: Path, make_endpoint: Any,
    slow_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    runs = [start_run(make_endpoint(one_slow_round(f"r{i}", 2.0), name=f"slow {i}"),
                      [slow_tools["tally"]], policy) for i in range(4)]
    workers.start("w-a", AGENTFORGE_WORKER_CONCURRENCY="3")

    wait_until(lambda: len(counted(counter_dir, "tally")) == 3, RUN_TIMEOUT,
               "three tools to run at once", workers)
    assert Run.objects.filter(status=RunStatus.RUNNING).count() == 3
    assert Run.objects.filter(status=RunStatus.QUEUED).count() == 1  # no fourth slot
    finished = [wait_terminal(run, workers) for run in runs]

    assert [run.status for run in finished] == [RunStatus.SUCCEEDED] * 4
    assert sorted(counted(counter_dir, "tally")) == ["r0", "r1", "r2", "r3"]  # each once
    calls = sorted(ToolCall.objects.filter(run__in=runs), key=lambda c: c.started_at)
    first_three = calls[:3]
    assert max(c.started_at for c in first_three) < min(c.finished_at for c in first_three)
    for run in finished:
        assert [t.worker_ids for t in tasks_of(run)] == [["w-a"]]
        assert_seqs_complete(run)


def test_sigterm_checkpoints_every_run_in_progress(
    workers: WorkerPool, counter_dir: Path, make_endpoint: Any,
    slow_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    script = [
        {"tool_calls": [{"name": "tally", "arguments": {"tag": "first", "seconds": 1.5}}]},
        {"tool_calls": [{"name": "tally", "arguments": {"tag": "second"}}]},
        {"text": "Model saw: {last_result}"},
    ]
    runs = [start_run(make_endpoint(script, name=f"three rounds {i}"), [slow_tools["tally"]],
                      policy) for i in range(2)]
    a = workers.start("w-a", AGENTFORGE_WORKER_CONCURRENCY="2")
    wait_until(lambda: counted(counter_dir, "tally") == ["first", "first"], RUN_TIMEOUT,
               "both runs' first tool to start", workers)

    a.sigterm()
    a.assert_exits_with(0, EXIT_TIMEOUT)
    for run in runs:
        run.refresh_from_db()
        assert run.status == RunStatus.INTERRUPTED
        assert run.rounds_count == 1  # round 0 finished; round 1 never started
        assert (run.lease_owner, run.lease_expires_at) == ("", None)

    workers.start("w-b", AGENTFORGE_WORKER_CONCURRENCY="2")
    finished = [wait_terminal(run, workers) for run in runs]

    assert [run.status for run in finished] == [RunStatus.SUCCEEDED] * 2
    assert sorted(counted(counter_dir, "tally")) == ["first", "first", "second", "second"]
    for run in finished:
        assert run.final_text == "Model saw: tallied second"
        assert statuses(run) == ["queued", "interrupted", "succeeded"]
        assert [t.worker_ids for t in tasks_of(run)] == [["w-a"], ["w-b"]]
        assert_seqs_complete(run)
