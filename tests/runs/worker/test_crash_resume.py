"""A worker that dies mid-run: the reaper hands the run on, the next worker resumes it.

The crash is real as far as the run can tell: `SimulatedCrash` (a BaseException nothing
in the worker catches) escapes execute_run from inside a tool or a model call, leaving
the run `running` with its call or round in flight. Then its lease expires, the reaper
runs, and execute_run is called again, as the next worker would.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.runs.support import (
    ModelSpy,
    assert_seqs_gapless,
    calls,
    events,
    execute,
    expire_lease,
    kinds,
    rounds,
    start,
    statuses,
)
from tests.runs.tools_for_tests import STATE, SimulatedCrash
from tools_app.models import ErrorPolicy, Round, Run, RunStatus, ToolCall, ToolRegistration
from tools_app.runs.store.eventlog import append_event
from tools_app.runs.store.leases import reap_expired_runs

pytestmark = pytest.mark.both


def crash_once(tool_name: str) -> None:
    """The next call of the tool kills its worker (after the call began its work)."""

    def crash() -> None:
        raise SimulatedCrash(tool_name)

    STATE.on_enter[tool_name].append(crash)


def execute_until_crash(run: Run) -> None:
    with pytest.raises(SimulatedCrash):
        execute(run)
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING  # what a dead worker leaves behind
    assert run.lease_owner != ""


def reap(run: Run) -> list[str]:
    expire_lease(run)
    ids = reap_expired_runs()
    run.refresh_from_db()
    return ids


# Round 0 finishes; round 1 has a finished call and then the one that kills the worker.
TWO_ROUNDS = [
    {"tool_calls": [{"name": "lookup", "arguments": {"key": "r0"}}]},
    {"tool_calls": [{"name": "lookup", "arguments": {"key": "r1"}},
                    {"name": "transfer", "arguments": {"to": "bob"}}]},
    {"text": "model saw: {last_results}"},
]


def crash_in_round_1(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    model_spy: ModelSpy, *, execution_error: str = "to_model",
) -> Run:
    """A run whose worker died while `transfer` (not idempotent) ran in round 1."""
    policy.parallel = False
    policy.execution_error = execution_error
    policy.execution_error_template = "CHECK BY HAND: {error}"
    policy.save()
    run = start(make_endpoint(TWO_ROUNDS), [tools["lookup"], tools["transfer"]], policy)
    crash_once("transfer")
    execute_until_crash(run)
    assert model_spy.take() == [0, 1]
    assert STATE.calls == [("lookup", "r0"), ("lookup", "r1"), ("transfer", "bob")]
    return run


@pytest.fixture
def crashed_in_round_1(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    model_spy: ModelSpy,
) -> Run:
    return crash_in_round_1(make_endpoint, tools, policy, model_spy)


def test_the_reaper_interrupts_a_run_whose_lease_expired(crashed_in_round_1: Run) -> None:
    run = crashed_in_round_1
    token = run.lease_token

    assert reap(run) == [str(run.pk)]

    assert run.status == RunStatus.INTERRUPTED
    assert run.resume_count == 1
    assert run.lease_token == token + 1  # the dead worker is fenced out
    assert (run.lease_owner, run.lease_expires_at) == ("", None)
    last = events(run)[-1]
    assert last.kind == "run_status"
    assert last.payload["status"] == "interrupted"
    assert "stopped responding" in last.payload["message"]


def test_a_run_with_a_live_lease_is_not_reaped(crashed_in_round_1: Run) -> None:
    run = crashed_in_round_1  # its lease has not run out yet

    assert reap_expired_runs() == []

    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING


def test_completed_rounds_are_not_requested_again(
    crashed_in_round_1: Run, model_spy: ModelSpy
) -> None:
    run = crashed_in_round_1
    reap(run)

    assert execute(run) == "succeeded"

    assert model_spy.take() == [2]  # only the step after the interrupted round
    assert [r.index for r in rounds(run)] == [0, 1, 2]
    assert kinds(run).count("model_request_sent") == 3


def test_completed_tool_calls_are_not_executed_again(crashed_in_round_1: Run) -> None:
    run = crashed_in_round_1
    reap(run)

    execute(run)

    assert STATE.count("lookup", "r0") == 1  # a completed round
    assert STATE.count("lookup", "r1") == 1  # a completed call of the interrupted round
    r0, r1, _ = calls(run)
    assert (r0.attempts, r1.attempts) == (1, 1)
    assert (r0.result_text, r1.result_text) == ("value of r0", "value of r1")


def test_an_in_flight_non_idempotent_call_becomes_unknown_outcome(
    crashed_in_round_1: Run,
) -> None:
    run = crashed_in_round_1
    reap(run)

    execute(run)

    assert STATE.count("transfer") == 1  # never executed again
    transfer = calls(run)[2]
    assert transfer.tool_name == "transfer"
    assert transfer.state == "unknown_outcome"
    assert transfer.is_error is True
    assert transfer.error_type == "ToolUnknownOutcomeError"
    assert transfer.handled_by == "policy_execution_to_model"
    assert transfer.result_text == (
        "CHECK BY HAND: The outcome of tool 'transfer' is unknown: its worker stopped while "
        "it ran, and the tool is not idempotent, so it was not run again")
    # The policy's text is what the model got as the tool's result.
    assert run.status == RunStatus.SUCCEEDED
    assert run.final_text == f"model saw: value of r1\n{transfer.result_text}"


def test_an_unknown_outcome_stops_the_run_when_the_policy_rethrows(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    model_spy: ModelSpy,
) -> None:
    run = crash_in_round_1(make_endpoint, tools, policy, model_spy, execution_error="rethrow")
    reap(run)

    assert execute(run) == "failed"

    assert run.error_type == "ToolUnknownOutcomeError"
    assert STATE.count("transfer") == 1
    assert calls(run)[2].state == "unknown_outcome"


def test_event_seqs_stay_unique_and_gapless_across_the_resume(crashed_in_round_1: Run) -> None:
    run = crashed_in_round_1
    reap(run)

    execute(run)

    assert_seqs_gapless(run)
    assert statuses(run) == ["queued", "interrupted", "succeeded"]
    assert kinds(run).count("chat_started") == 2  # one per worker


def test_an_in_flight_idempotent_call_is_executed_once_more(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    model_spy: ModelSpy,
) -> None:
    script = [{"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}]},
              {"text": "model saw: {last_result}"}]
    run = start(make_endpoint(script), [tools["lookup"]], policy)
    crash_once("lookup")
    execute_until_crash(run)
    [call] = calls(run)
    assert (call.state, call.attempts) == ("started", 1)
    reap(run)

    assert execute(run) == "succeeded"

    assert STATE.count("lookup", "k") == 2
    [call] = calls(run)
    assert (call.state, call.attempts, call.result_text) == ("succeeded", 2, "value of k")
    assert run.final_text == "model saw: value of k"
    assert model_spy.take() == [0, 1]  # step 0 once (first worker), step 1 once (second)
    assert_seqs_gapless(run)


def test_a_model_call_that_never_completed_is_asked_again(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    model_spy: ModelSpy,
) -> None:
    script = [{"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}]},
              {"text": "model saw: {last_result}"}]
    run = start(make_endpoint(script), [tools["lookup"]], policy)
    model_spy.crash_once_at.add(1)
    execute_until_crash(run)
    assert model_spy.take() == [0, 1]
    assert [(r.index, r.status) for r in rounds(run)] == [(0, "responded"), (1, "requested")]
    reap(run)

    assert execute(run) == "succeeded"

    assert model_spy.take() == [1]
    assert [(r.index, r.status) for r in rounds(run)] == [(0, "responded"), (1, "responded")]
    assert STATE.count("lookup") == 1
    assert run.final_text == "model saw: value of k"
    assert_seqs_gapless(run)


@pytest.mark.parametrize("in_flight_state", ["started", "cancelled"])
def test_history_written_by_a_dead_worker_is_resumed_from_the_rows(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    model_spy: ModelSpy, in_flight_state: str,
) -> None:
    """Rows in mid-run states, written directly: round 0 answered, its call in flight.

    A call recorded as cancelled is in doubt too: a cancelled sync tool keeps running in
    its thread, so it may have had its effect."""
    script = [{"tool_calls": [{"name": "transfer", "arguments": {"to": "eve"}}]},
              {"text": "model saw: {last_result}"}]
    run = start(make_endpoint(script), [tools["transfer"]], policy)
    response = {
        "ai_message": {"type": "ai", "text": None, "tool_execution_requests": [
            {"id": "call_0_0", "name": "transfer", "arguments": '{"to": "eve"}'}]},
        "finish_reason": "tool_execution",
    }
    round_ = Round.objects.create(run=run, index=0, status="responded", response=response)
    ToolCall.objects.create(run=run, round=round_, call_index=0, call_id="call_0_0",
                            tool_name="transfer", arguments_raw='{"to": "eve"}',
                            state=in_flight_state, attempts=1)
    append_event(str(run.pk), None, "round_started", {"round_index": 0})
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, lease_owner="dead-host:1",
                                         lease_token=1)
    assert reap(run) == [str(run.pk)]

    assert execute(run) == "succeeded"

    assert model_spy.take() == [1]
    assert STATE.count("transfer") == 0
    [call] = calls(run)
    assert call.state == "unknown_outcome"
    assert run.final_text == f"model saw: {call.result_text}"
    assert "not run again" in run.final_text
    assert_seqs_gapless(run)


def test_after_max_resumes_the_reaper_fails_the_run_as_worker_lost(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy, settings: Any,
) -> None:
    settings.AGENTFORGE_MAX_RESUMES = 1
    script = [{"tool_calls": [{"name": "lookup", "arguments": {"key": "poison"}}]},
              {"text": "never"}]
    run = start(make_endpoint(script), [tools["lookup"]], policy)
    STATE.crash_every_time.add("lookup")  # kills every worker that runs it

    execute_until_crash(run)
    assert reap(run) == [str(run.pk)]
    assert (run.status, run.resume_count) == (RunStatus.INTERRUPTED, 1)
    execute_until_crash(run)
    assert reap(run) == []  # not re-queued: given up

    assert run.status == RunStatus.FAILED
    assert run.error_type == "WorkerLost"
    assert run.error_message.startswith("worker lost: the run's worker stopped 2 times")
    assert run.finished_at is not None
    assert STATE.count("lookup") == 2
    assert statuses(run) == ["queued", "interrupted", "failed"]
    assert_seqs_gapless(run)
    assert execute(run) is None  # a failed run is never claimed again
    assert STATE.count("lookup") == 2
