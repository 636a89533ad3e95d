"""SIGTERM to a `db_worker` process (reliability plan A3): the run in progress stops at
the next round boundary, is left INTERRUPTED (never RUNNING) and re-queued, the worker
exits 0, and another worker completes the run without redoing finished work. With no
round boundary left (the last model call), the run simply finishes first. A second
SIGTERM makes the worker exit at once, and the run is recovered like a crashed one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tools_app.fake_llm import BackgroundServer
from tools_app.models import ErrorPolicy, Run, RunStatus, ToolCall, ToolRegistration

from .conftest import (
    RUN_TIMEOUT,
    WorkerPool,
    assert_seqs_complete,
    counted,
    fake_endpoint,
    start_run,
    statuses,
    steps_requested,
    tasks_of,
    wait_terminal,
    wait_until,
)

pytestmark = [pytest.mark.scaleout, pytest.mark.django_db(transaction=True)]

EXIT_TIMEOUT = 20.0

THREE_ROUNDS = [
    {"tool_calls": [{"name": "tally", "arguments": {"tag": "first", "seconds": 1.5}}]},
    {"tool_calls": [{"name": "tally", "arguments": {"tag": "second"}}]},
    {"text": "Model saw: {last_result}"},
]


def test_sigterm_hands_the_run_to_another_worker(
    workers: WorkerPool, counter_dir: Path, make_endpoint: Any,
    slow_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    run = start_run(make_endpoint(THREE_ROUNDS, name="three rounds"), [slow_tools["tally"]],
                    policy)
    a = workers.start("w-a")
    wait_until(lambda: counted(counter_dir, "tally") == ["first"], RUN_TIMEOUT,
               "round 0's tool to start", workers)

    a.sigterm()
    a.assert_exits_with(0, EXIT_TIMEOUT)
    run.refresh_from_db()
    assert run.status == RunStatus.INTERRUPTED
    assert (run.lease_owner, run.lease_expires_at) == ("", None)
    assert run.rounds_count == 1  # round 0 finished; round 1 was never started
    assert ToolCall.objects.get(run=run).state == "succeeded"
    [handed_back, requeued] = tasks_of(run)
    assert (handed_back.status, handed_back.return_value) == ("SUCCESSFUL", "interrupted")
    assert requeued.status == "READY"

    workers.start("w-b")
    run = wait_terminal(run, workers)

    assert run.status == RunStatus.SUCCEEDED, (run.error_type, run.error_message)
    assert run.final_text == "Model saw: tallied second"
    assert counted(counter_dir, "tally") == ["first", "second"]  # nothing redone
    assert statuses(run) == ["queued", "interrupted", "succeeded"]
    assert run.resume_count == 0  # a graceful hand-off is not a lost worker
    assert [c.attempts for c in ToolCall.objects.filter(run=run)] == [1, 1]
    assert_seqs_complete(run)
    assert [t.worker_ids for t in tasks_of(run)] == [["w-a"], ["w-b"]]


def test_sigterm_during_the_last_model_call_lets_the_run_finish(
    workers: WorkerPool, counter_dir: Path,
    fake_llm: Callable[[dict[str, Any]], BackgroundServer],
    slow_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    """No round boundary is left to stop at: the run ends normally, then the worker exits."""
    server = fake_llm({"scripts": {"slow-last": {"steps": [
        {"tool_calls": [{"name": "tally", "arguments": {"tag": "only"}}]},
        {"text": "Final: {last_result}", "latency_ms": 2000},
    ]}}})
    run = start_run(fake_endpoint(server, "slow-last"), [slow_tools["tally"]], policy)
    a = workers.start("w-a")
    wait_until(lambda: steps_requested(server) == [0, 1], RUN_TIMEOUT,
               "the last model call to reach the provider", workers)

    a.sigterm()
    a.assert_exits_with(0, EXIT_TIMEOUT)
    run.refresh_from_db()

    assert run.status == RunStatus.SUCCEEDED, (run.error_type, run.error_message)
    assert run.final_text == "Final: tallied only"
    assert statuses(run) == ["queued", "succeeded"]
    assert [(t.status, t.return_value) for t in tasks_of(run)] == [("SUCCESSFUL", "succeeded")]
    assert steps_requested(server) == [0, 1]
    assert_seqs_complete(run)


def test_a_second_sigterm_stops_the_worker_at_once(
    workers: WorkerPool, counter_dir: Path, make_endpoint: Any,
    slow_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    """'Press Ctrl+C again to force': the worker exits now, as if it crashed, and the
    run is resumed elsewhere once its lease expires (the call in flight was not
    idempotent, so it is reported as an unknown outcome, not run twice)."""
    run = start_run(make_endpoint([
        {"tool_calls": [{"name": "tally", "arguments": {"tag": "long", "seconds": 60}}]},
        {"text": "Model saw: {last_result}"},
    ], name="long tool"), [slow_tools["tally"]], policy)
    a = workers.start("w-a")
    wait_until(lambda: counted(counter_dir, "tally") == ["long"], RUN_TIMEOUT,
               "the tool to start", workers)

    a.sigterm()
    wait_until(lambda: "shutting down gracefully" in a.log(), EXIT_TIMEOUT,
               "the first signal to be handled", workers)
    a.sigterm()
    a.assert_exits_with(1, EXIT_TIMEOUT)
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING  # as a crash leaves it: the lease will expire

    workers.start("w-b")
    run = wait_terminal(run, workers)

    assert run.status == RunStatus.SUCCEEDED, (run.error_type, run.error_message)
    assert statuses(run) == ["queued", "interrupted", "succeeded"]
    assert run.resume_count == 1
    assert counted(counter_dir, "tally") == ["long"]
    assert ToolCall.objects.get(run=run).state == "unknown_outcome"
    assert_seqs_complete(run)


def test_sigterm_to_an_idle_worker_exits_at_once(workers: WorkerPool) -> None:
    a = workers.start("w-idle")
    workers.wait_ready(a)
    a.sigterm()
    a.assert_exits_with(0, EXIT_TIMEOUT)
    assert Run.objects.count() == 0


def test_a_run_that_cannot_stop_within_the_grace_is_handed_back_as_it_is(
    workers: WorkerPool, counter_dir: Path, make_endpoint: Any,
    slow_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    """Its tool takes longer than the stop grace: the worker hands the run back and exits
    (0) instead of waiting, and another worker resumes it at once, without waiting for
    the lease; the call that was in flight is in doubt, as after a crash."""
    run = start_run(make_endpoint([
        {"tool_calls": [{"name": "tally", "arguments": {"tag": "long", "seconds": 60}}]},
        {"text": "Model saw: {last_result}"},
    ], name="long tool"), [slow_tools["tally"]], policy)
    a = workers.start("w-a", AGENTFORGE_SHUTDOWN_GRACE_SECONDS="1",
                      AGENTFORGE_LEASE_SECONDS="120")  # a lease that would not expire here
    wait_until(lambda: counted(counter_dir, "tally") == ["long"], RUN_TIMEOUT,
               "the long tool to start", workers)

    a.sigterm()
    a.assert_exits_with(0, EXIT_TIMEOUT)
    run.refresh_from_db()
    assert (run.status, run.resume_count, run.lease_owner) == (RunStatus.INTERRUPTED, 0, "")

    workers.start("w-b")
    run = wait_terminal(run, workers)

    assert run.status == RunStatus.SUCCEEDED, (run.error_type, run.error_message)
    [call] = ToolCall.objects.filter(run=run)
    assert call.state == "unknown_outcome"
    assert counted(counter_dir, "tally") == ["long"]  # not run twice
    assert statuses(run)[:2] == ["queued", "interrupted"]
    assert_seqs_complete(run)
