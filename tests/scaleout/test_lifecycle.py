"""A run from start to end through a real `db_worker` process on PostgreSQL: with the
offline scripted model, and with an OpenAI-compatible endpoint served by the fake
provider (JSON and streaming)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django_tasks_db.models import DBTaskResult

from tools_app.fake_llm import BackgroundServer
from tools_app.models import ErrorPolicy, Round, Run, RunStatus, ToolCall, ToolRegistration

from .conftest import (
    WorkerPool,
    assert_seqs_complete,
    counted,
    fake_endpoint,
    start_run,
    statuses,
    steps_requested,
    tasks_of,
    wait_terminal,
)

pytestmark = [pytest.mark.scaleout, pytest.mark.django_db(transaction=True)]

TWO_ROUNDS = [
    {"tool_calls": [{"name": "slow_lookup", "arguments": {"key": "alpha"}},
                    {"name": "tally", "arguments": {"tag": "beta"}}]},
    {"tool_calls": [{"name": "tally", "arguments": {"tag": "gamma"}}]},
    {"text": "Done. Results: {last_results}"},
]


def assert_completed(run: Run, *, rounds: int, calls: int) -> None:
    """Succeeded, every row complete, the lease released, claimed exactly once."""
    assert run.status == RunStatus.SUCCEEDED, (run.error_type, run.error_message)
    assert run.finished_at is not None
    assert run.lease_owner == ""
    assert run.lease_expires_at is None
    assert run.lease_token == 1  # one claim, no reaper takeover
    assert run.resume_count == 0
    assert run.rounds_count == rounds
    assert run.tool_calls_count == calls
    assert run.errors_count == 0
    stored_rounds = list(Round.objects.filter(run=run).order_by("index"))
    assert [r.index for r in stored_rounds] == list(range(rounds))
    assert {r.status for r in stored_rounds} == {"responded"}
    assert all(r.response and r.finished_at for r in stored_rounds)
    stored_calls = list(ToolCall.objects.filter(run=run))
    assert len(stored_calls) == calls
    assert {(c.state, c.attempts) for c in stored_calls} == {("succeeded", 1)}
    assert all(c.result_text and c.finished_at for c in stored_calls)
    assert statuses(run) == ["queued", "succeeded"]
    assert_seqs_complete(run)
    [task] = tasks_of(run)
    assert task.status == "SUCCESSFUL"
    assert task.return_value == "succeeded"
    assert len(task.worker_ids) == 1


def test_scripted_run_completes_in_a_worker_process(
    workers: WorkerPool, counter_dir: Path, make_endpoint: Any,
    slow_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    endpoint = make_endpoint(TWO_ROUNDS, name="two rounds")
    run = start_run(endpoint, [slow_tools["slow_lookup"], slow_tools["tally"]], policy)
    [task] = tasks_of(run)
    assert task.status == "READY"  # enqueued in the database, for any worker to claim

    workers.start("w-lifecycle")
    run = wait_terminal(run, workers)

    assert_completed(run, rounds=3, calls=3)
    assert run.final_text == "Done. Results: tallied gamma"
    assert counted(counter_dir, "slow_lookup") == ["alpha"]
    assert counted(counter_dir, "tally") == ["beta", "gamma"]
    assert DBTaskResult.objects.filter(status="RUNNING").count() == 0


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_fake_provider_run_completes_in_a_worker_process(
    stream: bool, workers: WorkerPool, counter_dir: Path,
    fake_llm: Callable[[dict[str, Any]], BackgroundServer],
    slow_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    server = fake_llm({"scripts": {"e2e": {"latency_ms": 150, "steps": [
        {"tool_calls": [{"name": "slow_lookup", "arguments": {"key": "alpha"}}]},
        {"tool_calls": [{"name": "tally", "arguments": {"tag": "beta"}}]},
        {"text": "The answer: {last_result}"},
    ]}}})
    endpoint = fake_endpoint(server, "e2e", stream=stream)
    run = start_run(endpoint, [slow_tools["slow_lookup"], slow_tools["tally"]], policy)

    workers.start("w-fake")
    run = wait_terminal(run, workers)

    assert_completed(run, rounds=3, calls=2)
    assert run.final_text == "The answer: tallied beta"
    assert steps_requested(server, "e2e") == [0, 1, 2]  # each model turn asked once
    assert counted(counter_dir, "slow_lookup") == ["alpha"]
    assert counted(counter_dir, "tally") == ["beta"]
    first = Round.objects.get(run=run, index=0)
    assert first.request_json is not None
    assert first.request_json.get("stream", False) is stream
    assert first.latency_ms is not None
    assert first.latency_ms >= 150
