"""The lifecycle is the one owner of status moves: allowed ones write their event,
illegal ones raise and change nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from tests.runs.support import execute, start
from tools_app.models import ErrorPolicy, Run, RunEvent, RunStatus, ToolRegistration
from tools_app.runs.store.leases import claim
from tools_app.runs.store.lifecycle import (
    ALLOWED_MOVES,
    IllegalTransition,
    check_move,
    finish,
    move_locked,
)

pytestmark = pytest.mark.both

TERMINAL = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


@pytest.fixture
def run(make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> Run:
    return start(make_endpoint([{"text": "done"}]), [tools["lookup"]], policy)


def test_every_status_has_its_moves_and_finished_runs_have_none() -> None:
    assert set(ALLOWED_MOVES) == set(RunStatus)
    for status in TERMINAL:
        assert ALLOWED_MOVES[status] == frozenset()
    check_move(RunStatus.QUEUED, RunStatus.RUNNING)
    check_move(RunStatus.RUNNING, RunStatus.WAITING)
    check_move(RunStatus.WAITING, RunStatus.RUNNING)
    check_move(RunStatus.INTERRUPTED, RunStatus.RUNNING)


@pytest.mark.parametrize(("current", "to"), [
    (RunStatus.SUCCEEDED, RunStatus.RUNNING),
    (RunStatus.FAILED, RunStatus.QUEUED),
    (RunStatus.CANCELLED, RunStatus.INTERRUPTED),
    (RunStatus.QUEUED, RunStatus.SUCCEEDED),
    (RunStatus.QUEUED, RunStatus.INTERRUPTED),
    (RunStatus.INTERRUPTED, RunStatus.SUCCEEDED),
])
def test_an_illegal_move_raises_with_both_statuses(current: RunStatus, to: RunStatus) -> None:
    with pytest.raises(IllegalTransition, match=f"from {current} to {to}"):
        check_move(current, to)


def test_moving_a_finished_run_raises_and_changes_nothing(run: Run) -> None:
    assert execute(run) == "succeeded"
    before = (run.status, run.lease_token, run.last_seq)

    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        with pytest.raises(IllegalTransition):
            move_locked(locked, RunStatus.CANCELLED, error_type="Cancelled")

    run.refresh_from_db()
    assert (run.status, run.lease_token, run.last_seq) == before
    assert RunEvent.objects.filter(run=run).count() == before[2]


def test_a_worker_cannot_finish_a_run_as_queued(run: Run) -> None:
    token = claim(str(run.pk), "worker-1")
    assert token is not None

    with pytest.raises(IllegalTransition), transaction.atomic():
        finish(str(run.pk), token, RunStatus.QUEUED, {})

    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING


def test_a_move_by_someone_else_fences_the_worker_and_writes_its_event(run: Run) -> None:
    token = claim(str(run.pk), "worker-1")
    assert token is not None

    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        seq = move_locked(locked, RunStatus.INTERRUPTED, {"message": "why"})

    run.refresh_from_db()
    assert (run.status, run.lease_token, run.lease_owner) == (
        RunStatus.INTERRUPTED, token + 1, "")
    event = RunEvent.objects.get(run=run, seq=seq)
    assert (event.kind, event.payload) == ("run_status",
                                           {"status": "interrupted", "message": "why"})
    from tools_app.runs.store.eventlog import LeaseLost

    with pytest.raises(LeaseLost), transaction.atomic():  # the old worker writes nothing
        finish(str(run.pk), token, RunStatus.SUCCEEDED, {})
    run.refresh_from_db()
    assert run.status == RunStatus.INTERRUPTED
