"""Graceful shutdown: the run stops at the next round boundary and is handed back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.runs.support import (
    ModelSpy,
    assert_seqs_gapless,
    calls,
    events,
    execute,
    kinds,
    rounds,
    start,
    statuses,
)
from tests.runs.tools_for_tests import STATE
from tools_app.models import ErrorPolicy, Round, Run, RunStatus, ToolCall, ToolRegistration
from tools_app.runs import tasks
from tools_app.runs.worker import runner

pytestmark = pytest.mark.both

THREE_ROUNDS = [
    {"tool_calls": [{"name": "lookup", "arguments": {"key": "first"}}]},
    {"tool_calls": [{"name": "lookup", "arguments": {"key": "second"}}]},
    {"text": "model saw: {last_result}"},
]


@pytest.fixture
def shutdown_flag() -> Iterator[None]:
    assert not runner.shutdown_requested.is_set()
    try:
        yield
    finally:
        runner.shutdown_requested.clear()


@pytest.fixture
def interrupted_run(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    model_spy: ModelSpy, shutdown_flag: None, django_capture_on_commit_callbacks: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Run, list[str]]:
    """A run whose worker got SIGTERM while round 0's tool ran; returns the re-enqueued ids."""
    run = start(make_endpoint(THREE_ROUNDS), [tools["lookup"]], policy)
    STATE.on_enter["lookup"].append(runner.shutdown_requested.set)
    enqueued: list[str] = []
    monkeypatch.setattr(tasks, "enqueue_run", enqueued.append)

    with django_capture_on_commit_callbacks(execute=True):
        status = execute(run)

    assert status == "interrupted"
    assert model_spy.take() == [0]
    return run, enqueued


def test_shutdown_stops_the_run_at_the_next_round_boundary(
    interrupted_run: tuple[Run, list[str]],
) -> None:
    run, _ = interrupted_run

    assert run.status == RunStatus.INTERRUPTED
    assert [(r.index, r.status) for r in rounds(run)] == [(0, "responded")]
    [call] = calls(run)
    assert (call.state, call.result_text) == ("succeeded", "value of first")  # step finished
    assert STATE.calls == [("lookup", "first")]
    failed = [e for e in events(run) if e.kind == "chat_failed"]
    assert [e.payload["error_type"] for e in failed] == ["WorkerShutdown"]


def test_an_interrupted_run_holds_no_lease_and_nothing_is_left_running(
    interrupted_run: tuple[Run, list[str]],
) -> None:
    run, _ = interrupted_run

    assert (run.lease_owner, run.lease_expires_at) == ("", None)
    assert run.finished_at is None  # not over: it will resume
    assert not Run.objects.filter(status=RunStatus.RUNNING).exists()
    assert not Round.objects.filter(run=run).exclude(status="responded").exists()
    assert not ToolCall.objects.filter(run=run, state__in=["proposed", "started"]).exists()
    assert statuses(run) == ["queued", "interrupted"]


def test_an_interrupted_run_is_enqueued_again(interrupted_run: tuple[Run, list[str]]) -> None:
    run, enqueued = interrupted_run

    assert enqueued == [str(run.pk)]


def test_after_the_restart_the_run_resumes_and_completes(
    interrupted_run: tuple[Run, list[str]], model_spy: ModelSpy
) -> None:
    run, _ = interrupted_run
    runner.shutdown_requested.clear()

    assert execute(run) == "succeeded"

    assert model_spy.take() == [1, 2]  # round 0 was not asked again
    assert STATE.calls == [("lookup", "first"), ("lookup", "second")]
    assert run.final_text == "model saw: value of second"
    assert statuses(run) == ["queued", "interrupted", "succeeded"]
    assert run.resume_count == 0  # a hand-over, not a lost worker
    assert_seqs_gapless(run)


def test_a_worker_that_is_already_stopping_starts_no_round(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    model_spy: ModelSpy, shutdown_flag: None,
) -> None:
    run = start(make_endpoint(THREE_ROUNDS), [tools["lookup"]], policy)
    runner.shutdown_requested.set()

    assert execute(run) == "interrupted"

    assert model_spy.take() == []
    assert not Round.objects.filter(run=run).exists()


def _database_down_for(monkeypatch: pytest.MonkeyPatch, kind: str) -> list[str]:
    """Fail the first batch that carries round 1's (or the run's own) event of this
    kind, as a dropped connection would; returns the kinds failed so far."""
    from django.db import OperationalError

    from tools_app.runs.worker.recorder import RunRecorder

    real_record = RunRecorder.record_batch
    down: list[str] = []

    def flaky(self: RunRecorder, batch: list[tuple[Any, dict[str, Any]]], **kwargs: Any) -> int:
        if not down and any(event.kind == kind and event.round_index in (1, None)
                            for event, _ in batch):
            down.append(kind)
            raise OperationalError("server closed the connection unexpectedly")
        return real_record(self, batch, **kwargs)

    monkeypatch.setattr(RunRecorder, "record_batch", flaky)
    return down


def _hand_back_after_database_failure(run: Run, monkeypatch: pytest.MonkeyPatch,
                                      capture: Any, *, idempotent: bool) -> None:
    """The database fails the batch that stores round 0's results with round 1's start
    (written while round 1's model call is made): nothing after it is stored, not
    round 1's response nor the failure's report, and the run is interrupted and
    re-queued, not failed. A call on a tool that is not idempotent had its start (and
    round 0's response) committed before it ran; one on an idempotent tool did not
    wait, so the failed batch carried round 0's response and the call too."""
    from tools_app.runs.worker import recorder

    enqueued: list[str] = []
    monkeypatch.setattr(tasks, "enqueue_run", enqueued.append)
    # The results always ride with the request, however slow the machine.
    monkeypatch.setattr(recorder, "LINGER_SECONDS", 60.0)
    down = _database_down_for(monkeypatch, "round_started")
    with capture(execute=True):
        status = execute(run)

    assert status == "interrupted"
    assert down == ["round_started"]
    assert run.status == RunStatus.INTERRUPTED
    assert (run.lease_owner, run.error_type) == ("", "")
    assert enqueued == [str(run.pk)]
    # What the failed batch carried is not stored.
    if idempotent:  # not even round 0's response: the model is asked again
        assert calls(run) == []
        assert [r.status for r in rounds(run)] in ([], ["requested"])
        assert "model_response_received" not in kinds(run)
    else:  # round 0's call started, no result
        assert [r.index for r in rounds(run)] == [0]
        assert [c.state for c in calls(run)] == ["started"]
        assert kinds(run)[-2:] == ["tool_call_started", "run_status"]


def test_a_database_failure_mid_run_hands_the_run_back_instead_of_failing_it(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    django_capture_on_commit_callbacks: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A dropped connection or a database restart is not the run's fault: the run is
    interrupted and re-queued, and resumes from what was stored. An idempotent call
    whose result was lost with the batch is run again (the contract allows it)."""
    run = start(make_endpoint(THREE_ROUNDS), [tools["lookup"]], policy)
    _hand_back_after_database_failure(run, monkeypatch, django_capture_on_commit_callbacks,
                                      idempotent=True)

    assert execute(run) == "succeeded"
    assert run.final_text == "model saw: value of second"
    assert statuses(run) == ["queued", "interrupted", "succeeded"]
    # Nothing of round 0 was stored, so the resumed run started over; the first try may
    # have run round 1's call too before the failure reached the engine (that call did
    # not wait for the failed batch).
    first_try, resumed = STATE.calls[:-2], STATE.calls[-2:]
    assert first_try in ([("lookup", "first")], [("lookup", "first"), ("lookup", "second")])
    assert resumed == [("lookup", "first"), ("lookup", "second")]
    assert [c.attempts for c in calls(run)] == [1, 1]
    assert_seqs_gapless(run)


def test_a_non_idempotent_call_whose_result_a_database_failure_lost_is_never_run_again(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    django_capture_on_commit_callbacks: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = start(make_endpoint([
        {"tool_calls": [{"name": "transfer", "arguments": {"to": "alice"}}]},
        {"text": "model saw: {last_result}"},
    ]), [tools["transfer"]], policy)
    _hand_back_after_database_failure(run, monkeypatch, django_capture_on_commit_callbacks,
                                      idempotent=False)

    assert execute(run) == "succeeded"
    assert STATE.count("transfer") == 1  # its start was stored: in doubt, not re-run
    (transfer,) = calls(run)
    assert (transfer.state, transfer.error_type) == ("unknown_outcome",
                                                     "ToolUnknownOutcomeError")
    assert run.final_text == f"model saw: {transfer.result_text}"
    assert_seqs_gapless(run)


def test_a_database_failure_storing_a_runs_last_events_hands_it_back(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    django_capture_on_commit_callbacks: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A chat's last events are written with the run's end, in its transaction: a
    database failure there hands the run back as one mid-run would (nothing of that
    transaction stored, no end), and the resumed run ends it."""
    from django.db import OperationalError

    from tools_app.runs.worker.recorder import RunRecorder

    run = start(make_endpoint(THREE_ROUNDS), [tools["lookup"]], policy)
    enqueued: list[str] = []
    monkeypatch.setattr(tasks, "enqueue_run", enqueued.append)
    real_record = RunRecorder.record_batch
    failed: list[list[str]] = []

    def down_at_the_end(self: RunRecorder, batch: list[tuple[Any, dict[str, Any]]],
                        **kwargs: Any) -> int:
        if not failed and any(event.kind == "chat_finished" for event, _ in batch):
            failed.append([event.kind for event, _ in batch])
            raise OperationalError("server closed the connection unexpectedly")
        return real_record(self, batch, **kwargs)

    monkeypatch.setattr(RunRecorder, "record_batch", down_at_the_end)
    with django_capture_on_commit_callbacks(execute=True):
        assert execute(run) == "interrupted"

    assert [batch[-1] for batch in failed] == ["chat_finished"]
    assert run.status == RunStatus.INTERRUPTED
    assert (run.lease_owner, run.error_type, run.final_text) == ("", "", None)
    assert enqueued == [str(run.pk)]
    assert "chat_finished" not in kinds(run)
    # The final answer (round 2's response) is not stored; how much of the rounds before
    # it is depends on how far the writer got (the scripted model answers at once).
    assert 2 not in [r.index for r in rounds(run) if r.status == "responded"]
    assert_seqs_gapless(run)

    assert execute(run) == "succeeded"
    assert run.final_text == "model saw: value of second"
    assert statuses(run) == ["queued", "interrupted", "succeeded"]
    assert kinds(run).count("chat_finished") == 1
    assert_seqs_gapless(run)
