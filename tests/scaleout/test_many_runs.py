"""Two `db_worker` processes drain 50 queued runs (reliability plan A4): every run is
claimed once (SELECT ... FOR UPDATE SKIP LOCKED plus the run lease), every tool call
executes exactly once, and nothing is left running."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django_tasks_db.models import DBTaskResult

from tools_app.models import (
    TERMINAL_STATUSES,
    ErrorPolicy,
    Run,
    RunEvent,
    RunStatus,
    ToolCall,
    ToolRegistration,
)

from .conftest import EXECUTE_RUN, WorkerPool, assert_seqs_complete, counted, start_run, wait_until

pytestmark = [pytest.mark.scaleout, pytest.mark.django_db(transaction=True)]

RUNS = 50
DRAIN_TIMEOUT = 90.0


def test_two_workers_run_fifty_runs_exactly_once(
    workers: WorkerPool, counter_dir: Path, make_endpoint: Any,
    slow_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    pool = [workers.start("w-1"), workers.start("w-2")]
    workers.wait_ready(*pool)
    tally = slow_tools["tally"]
    runs = []
    for i in range(RUNS):
        endpoint = make_endpoint([
            {"tool_calls": [{"name": "tally", "arguments": {"tag": f"run-{i}", "seconds": 0.05}}]},
            {"text": "done: {last_result}"},
        ], name=f"quick-{i}")
        runs.append(start_run(endpoint, [tally], policy, text=f"run {i}"))

    started = time.monotonic()
    wait_until(lambda: Run.objects.filter(status__in=TERMINAL_STATUSES).count() == RUNS,
               DRAIN_TIMEOUT, f"{RUNS} runs to finish", workers, interval=0.2)
    drained_in = time.monotonic() - started

    by_id = {r.pk: r for r in Run.objects.all()}
    assert {r.status for r in by_id.values()} == {RunStatus.SUCCEEDED}
    for i, run in enumerate(runs):
        stored = by_id[run.pk]
        assert stored.final_text == f"done: tallied run-{i}"
        assert (stored.lease_token, stored.resume_count) == (1, 0)  # claimed once, never lost
    # Each tool call executed exactly once, across both processes.
    tags = counted(counter_dir, "tally")
    assert Counter(tags) == Counter(f"run-{i}" for i in range(RUNS))
    calls = ToolCall.objects.all()
    assert calls.count() == RUNS
    assert {(c.state, c.attempts) for c in calls} == {("succeeded", 1)}
    # One chat per run: one chat_started and one terminal status each.
    started_chats = Counter(RunEvent.objects.filter(kind="chat_started")
                            .values_list("run_id", flat=True))
    assert started_chats == Counter({run.pk: 1 for run in runs})
    for run in runs:
        assert_seqs_complete(run)
    # django-tasks-db's view: one task per run, each claimed by exactly one worker.
    tasks = list(DBTaskResult.objects.filter(task_path=EXECUTE_RUN))
    assert len(tasks) == RUNS
    assert sorted(t.args_kwargs["args"][0] for t in tasks) == sorted(str(r.pk) for r in runs)
    assert {t.status for t in tasks} == {"SUCCESSFUL"}
    assert {len(t.worker_ids) for t in tasks} == {1}
    assert {t.worker_ids[0] for t in tasks} == {"w-1", "w-2"}  # both took part
    assert drained_in < DRAIN_TIMEOUT
