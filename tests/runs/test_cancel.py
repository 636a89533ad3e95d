"""run_cancel: a queued run stops at once; a running one is stopped by its heartbeat."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from tests.runs.support import (
    assert_seqs_gapless,
    calls,
    events,
    execute,
    expire_lease,
    kinds,
    start,
    statuses,
)
from tests.runs.tools_for_tests import STATE, SimulatedCrash
from tools_app.models import ErrorPolicy, Round, Run, RunStatus, ToolRegistration
from tools_app.runs import sweeps
from tools_app.runs.services import run_cancel
from tools_app.runs.store.leases import reap_expired_runs

pytestmark = pytest.mark.both

def test_cancelling_a_queued_run_cancels_it_at_once(queued_run: Run) -> None:
    returned = run_cancel(run=queued_run)

    assert returned.status == RunStatus.CANCELLED
    queued_run.refresh_from_db()
    assert queued_run.status == RunStatus.CANCELLED
    assert queued_run.cancel_requested is True
    assert queued_run.error_type == "Cancelled"
    assert queued_run.finished_at is not None
    assert statuses(queued_run) == ["queued", "cancelled"]
    assert_seqs_gapless(queued_run)


def test_a_cancelled_queued_run_is_never_executed(queued_run: Run) -> None:
    run_cancel(run=queued_run)
    queued_run.refresh_from_db()
    last_seq = queued_run.last_seq

    assert execute(queued_run) is None

    assert queued_run.status == RunStatus.CANCELLED
    assert queued_run.last_seq == last_seq
    assert not Round.objects.filter(run=queued_run).exists()
    assert STATE.calls == []


def test_cancelling_a_finished_run_changes_nothing(
    weather_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    run = start(weather_endpoint, [demo_tools["get_weather"]], policy)
    execute(run)

    assert run_cancel(run=run).status == RunStatus.SUCCEEDED
    run.refresh_from_db()
    assert (run.status, run.cancel_requested) == (RunStatus.SUCCEEDED, False)


def test_cancelling_a_running_run_stops_its_tool_through_the_heartbeat(queued_run: Run) -> None:
    seen: dict[str, Any] = {}

    def cancel_from_the_ui() -> None:  # what the cancel button does while the tool sleeps
        run = run_cancel(run=Run.objects.get(pk=queued_run.pk))
        seen["status"], seen["cancel_requested"] = run.status, run.cancel_requested

    STATE.on_enter["wait_here"].append(sync_to_async(cancel_from_the_ui))

    assert execute(queued_run) == "cancelled"

    assert seen == {"status": RunStatus.RUNNING, "cancel_requested": True}  # not at once
    assert STATE.cancelled == ["wait_here"]  # the tool's task was cancelled
    assert queued_run.status == RunStatus.CANCELLED
    assert (queued_run.error_type, queued_run.error_message) == (
        "Cancelled", "Cancelled by the user")
    assert (queued_run.lease_owner, queued_run.lease_expires_at) == ("", None)
    assert queued_run.finished_at is not None
    [call] = calls(queued_run)
    assert call.state == "cancelled"
    assert queued_run.rounds_count == 1
    assert kinds(queued_run)[-2:] == ["chat_failed", "run_status"]
    assert events(queued_run)[-2].payload["cancelled"] is True
    assert statuses(queued_run) == ["queued", "cancelled"]
    assert_seqs_gapless(queued_run)
    assert execute(queued_run) is None  # and it stays cancelled


def test_cancelling_a_run_whose_worker_died_ends_it_cancelled(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    """The user cancels a run that shows "running" because its worker died: once the
    reaper hands it on, the next claim must end it, not leave it interrupted for ever."""
    script = [{"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}]}, {"text": "x"}]
    run = start(make_endpoint(script), [tools["lookup"]], policy)
    STATE.crash_every_time.add("lookup")
    with pytest.raises(SimulatedCrash):
        execute(run)

    assert run_cancel(run=run).status == RunStatus.RUNNING  # the dead worker cannot act on it
    expire_lease(run)
    assert reap_expired_runs() == [str(run.pk)]

    assert execute(run) is None  # what the re-enqueued task does

    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert run.error_type == "Cancelled"
    assert run.finished_at is not None
    assert (run.lease_owner, run.lease_expires_at) == ("", None)
    assert statuses(run) == ["queued", "interrupted", "cancelled"]
    assert STATE.count("lookup") == 1  # the call in doubt was not run again
    assert_seqs_gapless(run)


def test_a_run_interrupted_after_its_cancel_was_requested_ends_cancelled_at_restart(
    queued_run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker stopped (SIGTERM) before its heartbeat saw the cancel: the restarted
    server's recovery must finish the cancel, not leave the run interrupted."""
    Run.objects.filter(pk=queued_run.pk).update(status=RunStatus.INTERRUPTED,
                                                cancel_requested=True, lease_token=1)
    enqueued: list[str] = []
    monkeypatch.setattr(sweeps, "enqueue_run", enqueued.append)

    assert sweeps.recover_at_start() == [str(queued_run.pk)]
    assert enqueued == [str(queued_run.pk)]
    assert execute(queued_run) is None

    assert queued_run.status == RunStatus.CANCELLED
    assert queued_run.finished_at is not None
    assert statuses(queued_run)[-1] == "cancelled"
    assert STATE.calls == []
