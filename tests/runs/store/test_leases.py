"""Fencing and heartbeats: only the holder of the current lease token writes a run."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db.models import F

from tests.runs.support import WAIT_SCRIPT, calls, execute, expire_lease, start
from tests.runs.tools_for_tests import STATE
from tools_app.engine.events import RoundStarted
from tools_app.models import ErrorPolicy, Round, Run, RunEvent, RunStatus, ToolRegistration
from tools_app.runs.store.eventlog import LeaseLost, append_event, next_seq
from tools_app.runs.store.leases import claim, reap_expired_runs, renew
from tools_app.runs.worker import runner
from tools_app.runs.worker.recorder import RunRecorder

pytestmark = pytest.mark.both

# -- fencing ---------------------------------------------------------------------------


def stolen(run: Run) -> tuple[int, int]:
    """Worker 1 claims, stalls past its lease, worker 2 claims: both tokens."""
    first = claim(str(run.pk), "worker-1")
    assert first is not None
    expire_lease(run)
    second = claim(str(run.pk), "worker-2")
    assert second is not None
    return first, second


def test_claiming_bumps_the_token_and_takes_the_lease(queued_run: Run) -> None:
    token = claim(str(queued_run.pk), "worker-1")

    queued_run.refresh_from_db()
    assert token == queued_run.lease_token == 1
    assert queued_run.status == RunStatus.RUNNING
    assert queued_run.lease_owner == "worker-1"
    assert queued_run.lease_expires_at is not None
    assert claim(str(queued_run.pk), "worker-2") is None  # the lease is live


def test_a_run_claimed_again_keeps_its_first_start(queued_run: Run) -> None:
    """The first claim of a run starts its clock; a claim after it waited or was handed
    back (the general path, not the one-statement first claim) keeps it."""
    first = claim(str(queued_run.pk), "worker-1")
    queued_run.refresh_from_db()
    started = queued_run.started_at
    assert first == 1
    assert started is not None
    Run.objects.filter(pk=queued_run.pk).update(status=RunStatus.QUEUED, lease_owner="")

    second = claim(str(queued_run.pk), "worker-2")

    queued_run.refresh_from_db()
    assert second == 2
    assert (queued_run.status, queued_run.lease_owner) == (RunStatus.RUNNING, "worker-2")
    assert queued_run.started_at == started


def test_a_queued_run_cancelled_before_its_claim_is_ended_not_claimed(
    queued_run: Run,
) -> None:
    Run.objects.filter(pk=queued_run.pk).update(cancel_requested=True)

    assert claim(str(queued_run.pk), "worker-1") is None

    queued_run.refresh_from_db()
    assert queued_run.status == RunStatus.CANCELLED
    assert (queued_run.lease_owner, queued_run.started_at) == ("", None)


def test_a_run_that_is_no_longer_running_cannot_be_finished_with_its_token(
    queued_run: Run,
) -> None:
    """The end is fenced by the token and the status: a run its worker moved to waiting
    keeps its token, but its worker can no longer end it."""
    from django.db import transaction

    from tools_app.runs.store.lifecycle import wait

    token = claim(str(queued_run.pk), "worker-1")
    assert token is not None
    with transaction.atomic():
        wait(str(queued_run.pk), token, {"reason": "approval"})
    before = RunEvent.objects.filter(run=queued_run).count()

    with pytest.raises(LeaseLost):
        runner._finish(str(queued_run.pk), token, RunStatus.SUCCEEDED, {"final_text": "late"})

    queued_run.refresh_from_db()
    assert (queued_run.status, queued_run.final_text) == (RunStatus.WAITING, None)
    assert RunEvent.objects.filter(run=queued_run).count() == before


def test_a_stale_token_cannot_append_events(queued_run: Run) -> None:
    stale, current = stolen(queued_run)
    before = RunEvent.objects.filter(run=queued_run).count()

    with pytest.raises(LeaseLost):
        append_event(str(queued_run.pk), stale, "note", {"from": "worker-1"})
    with pytest.raises(LeaseLost):
        next_seq(str(queued_run.pk), stale)

    assert RunEvent.objects.filter(run=queued_run).count() == before
    seq = append_event(str(queued_run.pk), current, "note", {"from": "worker-2"})
    assert seq == before + 1


@pytest.mark.parametrize("returning", [True, False])
def test_seqs_are_consecutive_and_fenced_with_or_without_update_returning(
    queued_run: Run, returning: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One statement where the database has UPDATE ... RETURNING; two where it has not
    (SQLite before 3.35): the same seqs and the same fencing either way."""
    from django.db import connection

    if not returning:
        monkeypatch.setattr(connection.features, "can_return_columns_from_insert", False)
    stale, current = stolen(queued_run)
    before = Run.objects.get(pk=queued_run.pk).last_seq

    seqs = [next_seq(str(queued_run.pk), current) for _ in range(3)]
    seqs.append(next_seq(queued_run.pk, None))  # a writer that owns the row (a UUID id)
    with pytest.raises(LeaseLost):
        next_seq(str(queued_run.pk), stale)

    assert seqs == [before + 1, before + 2, before + 3, before + 4]
    assert Run.objects.get(pk=queued_run.pk).last_seq == before + 4


def test_a_stale_token_cannot_change_rows(queued_run: Run) -> None:
    stale, _ = stolen(queued_run)
    recorder = RunRecorder(str(queued_run.pk), stale)

    with pytest.raises(LeaseLost):
        recorder.record(RoundStarted(round_index=0), {})
    with pytest.raises(LeaseLost):
        runner._finish(str(queued_run.pk), stale, RunStatus.SUCCEEDED, {"final_text": "stale"})

    assert not Round.objects.filter(run=queued_run).exists()  # rolled back with the event
    queued_run.refresh_from_db()
    assert (queued_run.status, queued_run.final_text) == (RunStatus.RUNNING, None)
    assert queued_run.lease_owner == "worker-2"
    assert renew(str(queued_run.pk), stale) is False


def test_execute_run_leaves_a_run_leased_by_a_live_worker_alone(queued_run: Run) -> None:
    claim(str(queued_run.pk), "live-worker")
    queued_run.refresh_from_db()
    before = (queued_run.last_seq, queued_run.lease_token, queued_run.lease_owner)

    assert execute(queued_run) is None

    assert (queued_run.last_seq, queued_run.lease_token, queued_run.lease_owner) == before
    assert queued_run.status == RunStatus.RUNNING
    assert not Round.objects.filter(run=queued_run).exists()
    assert STATE.calls == []


# -- heartbeat -------------------------------------------------------------------------


def test_the_heartbeat_keeps_the_lease_of_a_long_tool_call(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    settings: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.AGENTFORGE_LEASE_SECONDS = 1.0
    settings.AGENTFORGE_HEARTBEAT_SECONDS = 0.1
    renewals: list[bool] = []
    real_renew = runner.renew

    def counting_renew(run_id: str, token: int) -> bool:
        renewals.append(real_renew(run_id, token))
        return renewals[-1]

    monkeypatch.setattr(runner, "renew", counting_renew)
    reaped: list[list[str]] = []

    async def reap_now() -> None:  # at the end of a call that outlived the lease 1.6 times
        reaped.append(await sync_to_async(reap_expired_runs)())

    STATE.before_return["wait_here"].append(reap_now)
    script = [{"tool_calls": [{"name": "wait_here", "arguments": {"seconds": 1.6}}]},
              {"text": "model saw: {last_result}"}]
    run = start(make_endpoint(script), [tools["wait_here"]], policy)

    assert execute(run) == "succeeded"

    assert reaped == [[]]  # the reaper found the lease alive
    assert renewals
    assert all(renewals)
    assert run.final_text == "model saw: waited 1.6 s"
    assert run.resume_count == 0


def test_a_lost_lease_stops_the_chat_and_writes_nothing_more(
    queued_run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}
    real_renew = runner.renew

    def renew_after_theft(run_id: str, token: int) -> bool:
        if not seen:  # another worker took the run over while the tool ran
            Run.objects.filter(pk=run_id).update(lease_token=F("lease_token") + 1,
                                                 lease_owner="thief")
            seen["last_seq"] = Run.objects.get(pk=run_id).last_seq
        return real_renew(run_id, token)

    monkeypatch.setattr(runner, "renew", renew_after_theft)

    assert execute(queued_run) is None

    assert STATE.cancelled == ["wait_here"]  # the chat (and its tool) stopped
    assert queued_run.last_seq == seen["last_seq"]
    assert RunEvent.objects.filter(run=queued_run).count() == seen["last_seq"]
    assert queued_run.status == RunStatus.RUNNING  # the new owner's to finish
    assert queued_run.lease_owner == "thief"
    [call] = calls(queued_run)
    assert call.state == "started"  # the stale worker recorded no outcome
    assert queued_run.final_text is None


@pytest.mark.django_db(transaction=True)
def test_recording_a_proposed_call_does_not_look_its_round_up_again(queued_run: Run) -> None:
    """The recorder knows the pk of a round it started (once committed): recording each
    of the round's tool calls then needs no query for it."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tools_app.engine.events import ToolCallProposed
    from tools_app.engine.messages import ToolExecutionRequest

    token = claim(str(queued_run.pk), "worker-1")
    assert token is not None
    recorder = RunRecorder(str(queued_run.pk), token)
    recorder.record(RoundStarted(round_index=0), {})
    proposed = ToolCallProposed(round_index=0, call_index=0, known_tool=True,
                                request=ToolExecutionRequest(id="c1", name="wait_here",
                                                             arguments='{"seconds": 1}'))

    with CaptureQueriesContext(connection) as queries:
        recorder.record(proposed, {})

    round_reads = [q["sql"] for q in queries.captured_queries
                   if q["sql"].lstrip().upper().startswith("SELECT")
                   and "tools_app_round" in q["sql"].lower()]
    assert round_reads == []
    call = queued_run.tool_calls.get()
    assert (call.round.index, call.call_id, call.arguments) == (0, "c1", {"seconds": 1})


def test_a_stopping_server_hands_back_only_the_runs_it_executes(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    from tools_app.runs.store.leases import new_worker_id, release_this_process_runs

    endpoint = make_endpoint(WAIT_SCRIPT)
    mine = start(endpoint, [tools["wait_here"]], policy)
    theirs = start(endpoint, [tools["wait_here"]], policy)
    token = claim(str(mine.pk), new_worker_id())
    assert token is not None
    assert claim(str(theirs.pk), "another-host:4242:abcdef01") is not None

    assert release_this_process_runs() == [str(mine.pk)]

    mine.refresh_from_db()
    assert (mine.status, mine.lease_owner, mine.lease_expires_at) == ("interrupted", "", None)
    assert mine.lease_token == token + 1  # a step still in flight is fenced out
    assert mine.resume_count == 0  # a hand-back, not a lost worker
    assert RunEvent.objects.filter(run=mine).order_by("-seq").first().payload["status"] \
        == "interrupted"
    with pytest.raises(LeaseLost):
        next_seq(str(mine.pk), token)
    theirs.refresh_from_db()
    assert (theirs.status, theirs.lease_owner) == ("running", "another-host:4242:abcdef01")
