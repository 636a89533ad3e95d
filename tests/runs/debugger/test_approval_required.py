"""A tool flagged "requires approval" (in code or in the admin) never executes without a
person's decision: the run waits (no worker, no lease) until every flagged call of the
round is decided, then resumes from its stored state and honours each decision."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser

from tests.runs.support import calls, execute, expire_lease, kinds, start, statuses
from tests.runs.tools_for_tests import STATE, SimulatedCrash
from tools_app.models import CallDecision, ErrorPolicy, Run, RunStatus, ToolRegistration
from tools_app.runs.debugger import approvals
from tools_app.runs.debugger.approvals import DecisionError, DecisionRequest, decide
from tools_app.runs.services import run_cancel
from tools_app.runs.store.leases import reap_expired_runs

pytestmark = pytest.mark.both

SCRIPT = [{"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}},
                          {"name": "delete_everything", "arguments": {"scope": "all"}}]},
          {"text": "model saw: {last_results}"}]


def waiting_run(make_endpoint: Any, tools: dict[str, ToolRegistration],
                policy: ErrorPolicy, script: list[dict[str, Any]] | None = None) -> Run:
    policy.parallel = False
    policy.save()
    run = start(make_endpoint(script or SCRIPT),
                [tools["lookup"], ToolRegistration.objects.get(name="delete_everything")],
                policy)
    assert execute(run) == "waiting"
    return run


def decide_as(user: AbstractUser | None, run: Run, call_id: str, decision: str,
              **fields: Any) -> CallDecision:
    decided = decide(run=run, user=user, request=DecisionRequest(call_id, decision, **fields))
    run.refresh_from_db()
    assert decided.run_status == run.status  # nothing executes runs here
    return decided.decision


def flagged_call_id(run: Run) -> str:
    return next(c.call_id for c in calls(run) if c.tool_name == "delete_everything")


@pytest.mark.parametrize("flagged_in", ["code", "admin"])
def test_a_flagged_tool_never_executes_without_a_decision(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    flagged_in: str,
) -> None:
    name = "delete_everything" if flagged_in == "code" else "transfer"
    if flagged_in == "admin":
        ToolRegistration.objects.filter(name=name).update(requires_approval=True)
    args = {"scope": "all"} if name == "delete_everything" else {"to": "mallory"}
    script = [{"tool_calls": [{"name": name, "arguments": args},
                              {"name": "lookup", "arguments": {"key": "k"}}]},
              {"text": "model saw: {last_results}"}]
    run = start(make_endpoint(script), [ToolRegistration.objects.get(name=name),
                                        tools["lookup"]], policy)

    assert execute(run) == "waiting"
    assert execute(run) is None  # a waiting run is not claimable: the task just ends

    assert STATE.calls == []  # nothing of the paused round ran
    assert (run.status, run.lease_owner, run.lease_expires_at) == ("waiting", "", None)
    assert run.waiting_since is not None
    assert [c.tool_name for c in approvals.pending_calls(run)] == [name]
    assert [c.state for c in calls(run)] == ["proposed", "proposed"]
    assert statuses(run)[-1] == "waiting"
    assert "chat_paused" in kinds(run)
    assert not Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING).exists()


def test_approve_resumes_and_runs_the_call_once(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    alice: AbstractUser,
) -> None:
    run = waiting_run(make_endpoint, tools, policy)

    stored = decide_as(alice, run, flagged_call_id(run), "approve")

    assert (stored.decided_by, stored.decided_by_label) == (alice, "alice")
    assert run.status == "queued"
    assert execute(run) == "succeeded"
    assert STATE.calls == [("lookup", "k"), ("delete_everything", "all")]
    assert [c.state for c in calls(run)] == ["succeeded", "succeeded"]
    assert statuses(run)[-3:] == ["waiting", "queued", "succeeded"]
    decision_event = next(e for e in run.events.all() if e.kind == "call_decision")
    assert (decision_event.payload["decision"], decision_event.payload["by"]) == ("approve",
                                                                                "alice")


def test_reject_tells_the_model_through_the_policy_and_never_runs_the_call(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    alice: AbstractUser,
) -> None:
    run = waiting_run(make_endpoint, tools, policy)

    decide_as(alice, run, flagged_call_id(run), "reject", message="too <risky>")
    assert execute(run) == "succeeded"

    assert STATE.calls == [("lookup", "k")]
    refused = calls(run)[1]
    assert (refused.state, refused.is_error, refused.error_type) == ("rejected", True,
                                                                      "ToolRejectedError")
    assert "rejected by alice: too <risky>" in (refused.result_text or "")
    assert "rejected by alice: too <risky>" in (run.final_text or "")


def test_edit_runs_the_call_with_the_edited_arguments(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    alice: AbstractUser,
) -> None:
    run = waiting_run(make_endpoint, tools, policy)

    decide_as(alice, run, flagged_call_id(run), "edit", arguments={"scope": "tmp"})
    assert execute(run) == "succeeded"

    assert STATE.calls == [("lookup", "k"), ("delete_everything", "tmp")]
    assert "deleted tmp" in (run.final_text or "")
    assert CallDecision.objects.get(run=run).arguments == {"scope": "tmp"}


def test_edited_arguments_are_checked_against_the_schema_by_argument(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    alice: AbstractUser,
) -> None:
    run = waiting_run(make_endpoint, tools, policy)

    with pytest.raises(DecisionError) as missing:
        decide_as(alice, run, flagged_call_id(run), "edit", arguments={"scope": 3})
    with pytest.raises(DecisionError) as not_object:
        decide_as(alice, run, flagged_call_id(run), "edit", arguments=["all"])
    with pytest.raises(DecisionError) as absent:
        decide_as(alice, run, flagged_call_id(run), "edit", arguments={})

    assert missing.value.code == "invalid_arguments"
    assert list(missing.value.problems) == ["scope"]
    assert "is not of type 'string'" in missing.value.problems["scope"]
    assert list(not_object.value.problems) == [""]
    assert list(absent.value.problems) == ["scope"]
    assert run.status == "waiting"
    assert not CallDecision.objects.exists()


def test_a_decision_sent_twice_changes_nothing_and_a_different_one_is_refused(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    alice: AbstractUser,
) -> None:
    run = waiting_run(make_endpoint, tools, policy)
    call_id = flagged_call_id(run)
    first = decide_as(alice, run, call_id, "approve")
    events_before = run.last_seq

    repeated = decide(run=run, user=alice, request=DecisionRequest(call_id, "approve"))
    again, created = repeated.decision, repeated.created
    with pytest.raises(DecisionError) as other:
        decide(run=run, user=alice, request=DecisionRequest(call_id, "reject"))

    run.refresh_from_db()
    assert (again.pk, created) == (first.pk, False)
    assert other.value.code == "already_decided"
    assert (run.last_seq, run.status) == (events_before, "queued")
    assert CallDecision.objects.count() == 1


def test_decisions_for_unknown_unflagged_or_finished_things_are_refused(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    alice: AbstractUser,
) -> None:
    run = waiting_run(make_endpoint, tools, policy)
    lookup_id = calls(run)[0].call_id

    with pytest.raises(DecisionError) as unknown:
        decide_as(alice, run, "no-such-call", "approve")
    with pytest.raises(DecisionError) as unflagged:
        decide_as(alice, run, lookup_id, "approve")
    with pytest.raises(DecisionError) as bad_kind:
        decide_as(alice, run, lookup_id, "maybe")
    run_cancel(run=run)
    with pytest.raises(DecisionError) as cancelled:
        decide_as(alice, run, flagged_call_id(run), "approve")

    assert (unknown.value.code, unknown.value.status) == ("unknown_call", 404)
    assert unflagged.value.code == "not_pending"
    assert (bad_kind.value.code, bad_kind.value.status) == ("invalid_field", 400)
    assert cancelled.value.code == "run_finished"
    assert "cancelled" in str(cancelled.value)
    assert STATE.calls == []


def test_cancel_ends_a_waiting_run_at_once(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    run = waiting_run(make_endpoint, tools, policy)

    run_cancel(run=run)
    run.refresh_from_db()

    assert run.status == "cancelled"
    assert "waited for a decision" in run.error_message
    assert execute(run) is None
    assert STATE.calls == []


def test_approve_all_decides_every_waiting_call_of_the_round(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    alice: AbstractUser,
) -> None:
    script = [{"tool_calls": [{"name": "delete_everything", "arguments": {"scope": "a"}},
                              {"name": "delete_everything", "arguments": {"scope": "b"}}]},
              {"text": "done"}]
    run = waiting_run(make_endpoint, tools, policy, script)
    first = calls(run)[0].call_id

    decide_as(alice, run, first, "approve")
    assert run.status == "waiting"  # one call of the round still waits
    approvals.decide_round(run=run, user=alice, round_index=0)
    run.refresh_from_db()

    assert run.status == "queued"
    assert execute(run) == "succeeded"
    assert sorted(STATE.calls) == [("delete_everything", "a"), ("delete_everything", "b")]


def test_a_worker_dying_after_a_decision_keeps_it_and_runs_the_call_once(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    alice: AbstractUser,
) -> None:
    run = waiting_run(make_endpoint, tools, policy)
    decide_as(alice, run, flagged_call_id(run), "edit", arguments={"scope": "tmp"})

    def crash() -> None:
        raise SimulatedCrash("lookup")

    STATE.on_enter["lookup"].append(crash)  # the worker dies before the flagged call
    with pytest.raises(SimulatedCrash):
        execute(run)
    expire_lease(run)
    assert reap_expired_runs() == [str(run.pk)]
    assert execute(run) == "succeeded"

    assert STATE.count("delete_everything") == 1
    assert STATE.count("delete_everything", "tmp") == 1


def test_the_approval_timeout_rejects_waiting_calls(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    settings: Any,
) -> None:
    settings.AGENTFORGE_APPROVAL_TIMEOUT = 30
    run = waiting_run(make_endpoint, tools, policy)
    assert approvals.expire_waiting_runs() == []  # not yet expired

    Run.objects.filter(pk=run.pk).update(waiting_since=run.created_at.replace(year=2000))
    assert approvals.expire_waiting_runs() == [str(run.pk)]
    run.refresh_from_db()
    assert run.status == "queued"
    assert execute(run) == "succeeded"

    decision = CallDecision.objects.get(run=run)
    assert (decision.decision, decision.decided_by, decision.decided_by_label) == (
        "reject", None, "approval timeout")
    assert "no decision within 30 s" in (calls(run)[1].result_text or "")
    assert STATE.calls == [("lookup", "k")]
