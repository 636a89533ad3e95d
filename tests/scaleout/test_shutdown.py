"""SIGTERM to a `db_worker` process (reliability plan A3): the run in progress stops at
the next round boundary, is left INTERRUPTED (never RUNNING) and re-queued, the worker
exits 0, and another worker completes the run without redoing finished work. With no
round boundary left (the last model call), the run simply finishes first. A second
SIGTERM makes the worker exit at once, and the run is recovered like a crashed one."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction
from django_tasks_db.models import DBTaskResult
from psycopg._cursor_base import BaseCursor

from tools_app.fake_llm import BackgroundServer
from tools_app.management.commands.db_worker import RunWorker
from tools_app.models import (
    ErrorPolicy,
    Run,
    RunStatus,
    ToolCall,
    ToolRegistration,
    WorkerHeartbeat,
)
from tools_app.runs.worker import runner

from .conftest import (
    RUN_TIMEOUT,
    START_TIMEOUT,
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


def test_sigterm_while_an_idle_workers_claim_query_waits_exits_cleanly(
        workers: WorkerPool) -> None:
    """The stop signal arrives while the claim query waits (here for a lock on the task
    table): the handler leaves the query be, and once it has its answer the worker
    exits 0, with no traceback."""
    a = workers.start("w-idle")
    workers.wait_ready(a)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {DBTaskResult._meta.db_table} IN ACCESS EXCLUSIVE MODE")
        wait_until(lambda: _claims_waiting_for(cursor), START_TIMEOUT,
                   "the worker's claim query to wait for the lock", workers)
        a.sigterm()
        wait_until(lambda: "shutting down gracefully" in a.log(), EXIT_TIMEOUT,
                   "the signal to be handled", workers)
        assert a.alive()
        assert _claims_waiting_for(cursor)  # not cancelled, not broken off
    a.assert_exits_with(0, EXIT_TIMEOUT)
    assert "Traceback" not in a.log(), a.log()


def _claims_waiting_for(cursor: Any) -> int:
    """The worker's queries waiting for the lock this connection holds: its claim query,
    the only one of an idle worker that reads the task table. (pg_stat_activity still
    shows the connection's previous statement: the query waits while it is parsed.)"""
    cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
                   " AND pg_backend_pid() = ANY(pg_blocking_pids(pid))")
    return int(cursor.fetchone()[0])


def test_sigterm_landing_between_the_claim_querys_send_and_its_answer_ends_the_loop_cleanly(
        settings: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """The worker's claim loop, in this process with its own signal handlers: SIGTERM is
    raised right after psycopg has sent the claim query and before it reads the answer,
    where a real signal can land too (an exception raised there leaves the connection
    busy, and the claim's transaction then fails to close). The turn ends
    normally, then the loop, without waiting out its 60 s poll interval."""
    settings.AGENTFORGE_SHUTDOWN_GRACE_SECONDS = 0  # no hand-back timer in this process
    monkeypatch.setattr(runner, "shutdown_requested", threading.Event())
    worker = RunWorker(queue_names=["default"], interval=60.0, batch=False,
                       backend_name="default", startup_delay=False, max_tasks=None,
                       worker_id="w-in-process", excluded_queue_names=[])
    signalled = _sigterm_after_sending_the_claim(monkeypatch)
    handlers = {number: signal.getsignal(number)
                for number in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT)}
    worker.configure_signals()
    try:
        with caplog.at_level(logging.INFO):
            worker.run()
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)

    assert signalled == ["sent"]
    assert not worker.running
    assert runner.shutdown_requested.is_set()
    assert any("shutting down gracefully" in r.getMessage() for r in caplog.records)
    # Nothing failed, and no connection was left busy (psycopg's pool warns of those).
    assert not [r for r in caplog.records
                if r.levelno >= logging.ERROR or r.name.startswith("psycopg")]
    assert WorkerHeartbeat.objects.get(worker_id="w-in-process").stopped_at is not None


def _sigterm_after_sending_the_claim(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make psycopg raise SIGTERM in this process once, right after it has sent the
    claim query (its Python handler runs at once, before the answer is read)."""
    send = BaseCursor._execute_send
    signalled: list[str] = []

    def send_then_signal(cursor: Any, query: Any, **kwargs: Any) -> None:
        send(cursor, query, **kwargs)
        if not signalled and b"SKIP LOCKED" in query.query:
            signalled.append("sent")
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(BaseCursor, "_execute_send", send_then_signal)
    return signalled


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
