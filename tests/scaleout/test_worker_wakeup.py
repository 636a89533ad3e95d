"""A db_worker waiting between claim turns is woken by a run's enqueue, not by the end of
its poll interval (runs/loops/task_wakeup.py): with an interval of a minute, a run started
after the worker went idle still ends within seconds."""

from __future__ import annotations

from typing import Any

import pytest

from tools_app.models import ErrorPolicy, RunStatus, ToolRegistration

from .conftest import WorkerPool, start_run, tasks_of, wait_terminal

pytestmark = [pytest.mark.scaleout, pytest.mark.django_db(transaction=True)]

# Far longer than WOKEN_WITHIN: a worker that only polled would not look again in time.
IDLE_INTERVAL = "120"
# Upper bound of the wait for a woken worker's run, never a measured duration.
WOKEN_WITHIN = 30.0
ONE_ROUND = [{"tool_calls": [{"name": "tally", "arguments": {"tag": "woken"}}]},
             {"text": "Done: {last_result}"}]


def test_an_idle_worker_is_woken_by_each_run_started(
    workers: WorkerPool, make_endpoint: Any, slow_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy,
) -> None:
    worker = workers.start("w-idle", interval=IDLE_INTERVAL)
    workers.wait_ready(worker)
    endpoint = make_endpoint(ONE_ROUND, name="woken")

    # The first run may still meet the worker's first claim turn; the second is
    # enqueued while the worker waits out its interval after claiming the first.
    for number in range(2):
        run = start_run(endpoint, [slow_tools["tally"]], policy, text=f"run {number}")
        run = wait_terminal(run, workers, timeout=WOKEN_WITHIN)
        assert run.status == RunStatus.SUCCEEDED, (run.error_type, run.error_message)
        assert run.final_text == "Done: tallied woken"
        [task] = tasks_of(run)
        assert task.worker_ids == ["w-idle"]


def test_an_idle_worker_waiting_on_its_listener_stops_at_sigterm(workers: WorkerPool) -> None:
    """The wait between claim turns is on the LISTENing connection now, not a sleep:
    a stop signal still ends it at once, not after the poll interval."""
    worker = workers.start("w-stop", interval=IDLE_INTERVAL)
    workers.wait_ready(worker)
    worker.sigterm()
    worker.assert_exits_with(0, timeout=WOKEN_WITHIN)
