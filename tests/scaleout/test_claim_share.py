"""A burst of runs is shared between the db_workers (issue 42, finding 7): one claim turn
takes at most AGENTFORGE_CLAIM_PER_TURN tasks, so a second worker gets part of a burst
even when the first has slots for all of it; a worker alone still takes everything, a
turn at a time."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from django.db import transaction
from django_tasks_db.models import DBTaskResult

from tools_app.models import TERMINAL_STATUSES, ErrorPolicy, Run, RunStatus, ToolRegistration

from .conftest import EXECUTE_RUN, WorkerPool, start_run, wait_until

pytestmark = [pytest.mark.scaleout, pytest.mark.django_db(transaction=True)]

RUNS = 40
PER_TURN = 5
DRAIN_TIMEOUT = 90.0  # an upper bound, never a measured duration
# Room for the whole burst in each worker: only the per-turn bound shares it.
WORKER_ENV = {"AGENTFORGE_WORKER_CONCURRENCY": str(RUNS),
              "AGENTFORGE_CLAIM_PER_TURN": str(PER_TURN)}


def start_burst(make_endpoint: Any, tally: ToolRegistration, policy: ErrorPolicy) -> None:
    """RUNS runs enqueued in one commit: the workers see them all at once."""
    endpoint = make_endpoint([
        {"tool_calls": [{"name": "tally", "arguments": {"tag": "burst", "seconds": 0.05}}]},
        {"text": "done"},
    ], name="burst")
    with transaction.atomic():
        for i in range(RUNS):
            start_run(endpoint, [tally], policy, text=f"run {i}")


def drained(workers: WorkerPool) -> list[DBTaskResult[..., Any]]:
    wait_until(lambda: Run.objects.filter(status__in=TERMINAL_STATUSES).count() == RUNS,
               DRAIN_TIMEOUT, f"{RUNS} runs to finish", workers, interval=0.2)
    assert set(Run.objects.values_list("status", flat=True)) == {RunStatus.SUCCEEDED}
    tasks = list(DBTaskResult.objects.filter(task_path=EXECUTE_RUN))
    assert len(tasks) == RUNS
    assert {len(t.worker_ids) for t in tasks} == {1}  # each claimed once
    return tasks


def test_a_burst_is_spread_across_two_workers(
    workers: WorkerPool, make_endpoint: Any, slow_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy,
) -> None:
    pool = [workers.start("w-1", **WORKER_ENV), workers.start("w-2", **WORKER_ENV)]
    workers.wait_ready(*pool)

    start_burst(make_endpoint, slow_tools["tally"], policy)

    by_worker = Counter(t.worker_ids[0] for t in drained(workers))
    assert set(by_worker) == {"w-1", "w-2"}, by_worker  # both took part
    # No claim turn took more than its share.
    turns = Counter((t.worker_ids[0], t.started_at) for t in
                    DBTaskResult.objects.filter(task_path=EXECUTE_RUN))
    assert max(turns.values()) <= PER_TURN, turns


def test_a_lone_worker_takes_the_whole_burst_a_share_a_turn(
    workers: WorkerPool, make_endpoint: Any, slow_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy,
) -> None:
    workers.wait_ready(workers.start("alone", **WORKER_ENV))

    start_burst(make_endpoint, slow_tools["tally"], policy)

    tasks = drained(workers)
    assert {t.worker_ids[0] for t in tasks} == {"alone"}
    turns = Counter(t.started_at for t in tasks)
    assert max(turns.values()) <= PER_TURN, turns
    assert len(turns) >= RUNS // PER_TURN
