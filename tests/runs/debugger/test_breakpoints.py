"""Breakpoints: a run pauses (waiting, no worker) before a round's model call, before
calls of a tool or matching a condition, after a failed call; a person continues it,
steps one call or one round, aborts it, edits the held calls' arguments or adds a
message before the model call. Every resume goes on from what was stored."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser

from tests.runs.support import calls, execute, kinds, start, statuses
from tests.runs.tools_for_tests import STATE
from tools_app.engine import ChatRequest, ChatResponse, ScriptedChatModel, UserMessage
from tools_app.models import ErrorPolicy, Run, RunPause, ToolRegistration
from tools_app.runs.debugger.approvals import (
    DecisionError,
    DecisionRequest,
    decide,
    expire_waiting_runs,
)
from tools_app.runs.debugger.breakpoints import continue_run
from tools_app.runs.debugger.timeline import round_views
from tools_app.runs.services import RunRequestError, run_cancel
from tools_app.runs.worker.history import load_history

pytestmark = pytest.mark.both

TWO_ROUNDS = [
    {"tool_calls": [{"name": "lookup", "arguments": {"key": "a"}},
                    {"name": "transfer", "arguments": {"to": "mallory"}}]},
    {"tool_calls": [{"name": "lookup", "arguments": {"key": "b"}}]},
    {"text": "model saw: {last_results}"},
]


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[ChatRequest]:
    """Every request the scripted model was sent."""
    requests: list[ChatRequest] = []
    original = ScriptedChatModel.chat

    async def chat(self: ScriptedChatModel, request: ChatRequest) -> ChatResponse:
        requests.append(request)
        return await original(self, request)

    monkeypatch.setattr(ScriptedChatModel, "chat", chat)
    return requests


def run_with(make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
             breakpoints: list[dict[str, Any]], script: list[dict[str, Any]] | None = None,
             names: tuple[str, ...] = ("lookup", "transfer"), endpoint: str = "scripted",
             ) -> Run:
    policy.parallel = False
    policy.save()
    return start(make_endpoint(script or TWO_ROUNDS, name=endpoint),
                 [ToolRegistration.objects.get(pk=tools[n].pk) for n in names], policy,
                 breakpoints=breakpoints)


def go_on(run: Run, user: AbstractUser, step: str = "run", **fields: Any) -> RunPause:
    continued = continue_run(run=run, user=user, step=step, **fields)
    run.refresh_from_db()
    assert continued.run_status == run.status  # nothing executes runs here
    return continued.pause


def open_pause(run: Run) -> RunPause:
    pause = Run.objects.get(pk=run.pk).open_pause
    assert pause is not None
    return pause


def test_before_round_pauses_before_the_model_call_and_continue_goes_on(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    alice: AbstractUser, seen: list[ChatRequest],
) -> None:
    run = run_with(make_endpoint, tools, policy, [{"kind": "before_round", "round": 2}])

    assert execute(run) == "waiting"
    pause = open_pause(run)
    assert (pause.before, pause.round_index, pause.reason) == ("model", 1, "before round 2")
    assert (run.rounds_count, len(seen)) == (1, 1)  # round 2 was not asked for
    assert STATE.calls == [("lookup", "a"), ("transfer", "mallory")]
    assert (run.lease_owner, run.lease_expires_at) == ("", None)

    go_on(run, alice)
    assert run.status == "queued"
    assert execute(run) == "succeeded"
    assert len(seen) == 3  # each model step asked once
    assert statuses(run)[-3:] == ["waiting", "queued", "succeeded"]
    assert "breakpoint_continued" in kinds(run)


def test_before_tool_holds_its_calls_the_others_run_and_edits_apply(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    alice: AbstractUser,
) -> None:
    run = run_with(make_endpoint, tools, policy, [{"kind": "before_tool", "tool": "transfer"}])

    assert execute(run) == "waiting"
    pause = open_pause(run)
    transfer = calls(run)[1]
    assert (pause.before, pause.call_ids) == ("calls", [transfer.call_id])
    assert STATE.calls == [("lookup", "a")]  # the other call of the round ran
    assert [c.state for c in calls(run)] == ["succeeded", "proposed"]

    with pytest.raises(DecisionError) as invalid:
        go_on(run, alice, arguments={transfer.call_id: {"to": 7}})
    with pytest.raises(DecisionError) as not_held:
        go_on(run, alice, arguments={calls(run)[0].call_id: {"key": "z"}})
    with pytest.raises(DecisionError) as no_message_here:
        go_on(run, alice, message="hello")
    go_on(run, alice, arguments={transfer.call_id: {"to": "carol"}})
    assert execute(run) == "succeeded"

    assert (invalid.value.code, list(invalid.value.problems)) == ("invalid_arguments", ["to"])
    assert not_held.value.code == "not_pending"
    assert no_message_here.value.code == "invalid_field"
    assert STATE.calls == [("lookup", "a"), ("transfer", "carol"), ("lookup", "b")]
    assert STATE.count("lookup", "a") == 1  # not run again on the resume


def test_a_condition_matches_an_argument_at_a_json_pointer(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    matching = run_with(make_endpoint, tools, policy, [
        {"kind": "condition", "tool": "transfer", "pointer": "/to", "value": "mallory"}])
    other = run_with(make_endpoint, tools, policy, [
        {"kind": "condition", "tool": "transfer", "pointer": "/to", "value": "bob"}],
        endpoint="other")

    assert execute(matching) == "waiting"
    assert open_pause(matching).reason == 'transfer with /to = "mallory"'
    assert execute(other) == "succeeded"


def test_a_failed_call_pauses_before_the_next_model_call(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    alice: AbstractUser,
) -> None:
    script = [{"tool_calls": [{"name": "always_fails", "arguments": {"reason": "boom"}}]},
              {"text": "model saw: {last_results}"}]
    run = run_with(make_endpoint, tools, policy, [{"kind": "tool_error"}], script,
                   names=("always_fails",))

    assert execute(run) == "waiting"
    pause = open_pause(run)
    assert (pause.before, pause.round_index) == ("model", 1)
    assert "a tool call failed in round 1" in pause.reason
    go_on(run, alice)
    assert execute(run) == "succeeded"
    assert "boom" in (run.final_text or "")


def test_step_one_call_at_a_time(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    alice: AbstractUser,
) -> None:
    script = [{"tool_calls": [{"name": "lookup", "arguments": {"key": k}} for k in "xyz"]},
              {"text": "done"}]
    run = run_with(make_endpoint, tools, policy, [{"kind": "before_tool", "tool": "lookup"}],
                   script, names=("lookup",))

    assert execute(run) == "waiting"
    assert len(open_pause(run).call_ids) == 3
    go_on(run, alice, "call")
    assert execute(run) == "waiting"
    assert STATE.calls == [("lookup", "x")]
    assert len(open_pause(run).call_ids) == 2
    go_on(run, alice, "call")
    assert execute(run) == "waiting"
    assert STATE.calls == [("lookup", "x"), ("lookup", "y")]
    go_on(run, alice, "run")
    assert execute(run) == "succeeded"
    assert STATE.calls == [("lookup", "x"), ("lookup", "y"), ("lookup", "z")]


def test_stepping_the_last_held_call_pauses_before_the_next_model_call(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    alice: AbstractUser, seen: list[ChatRequest],
) -> None:
    # One call held, the round's next step a model call that answers with text: "step
    # one call" runs that call and stops there, not at the run's end.
    script = [{"tool_calls": [{"name": "lookup", "arguments": {"key": "x"}},
                              {"name": "transfer", "arguments": {"to": "carol"}}]},
              {"text": "done"}]
    run = run_with(make_endpoint, tools, policy, [{"kind": "before_tool", "tool": "lookup"}],
                   script)

    assert execute(run) == "waiting"
    assert open_pause(run).call_ids == [calls(run)[0].call_id]
    assert STATE.calls == [("transfer", "carol")]
    go_on(run, alice, "call")
    assert execute(run) == "waiting"
    assert STATE.calls == [("transfer", "carol"), ("lookup", "x")]
    assert len(seen) == 1  # round 2's model call not made yet
    pause = open_pause(run)
    assert (pause.before, pause.round_index) == ("model", 1)
    assert pause.reason == "before round 2, after stepping one call"

    go_on(run, alice, "call")  # from a model call: make it, pause before its calls
    assert execute(run) == "succeeded"  # it answered with text: nothing left to hold
    assert (len(seen), run.final_text) == (2, "done")


def test_the_call_records_the_arguments_edited_at_a_breakpoint_and_the_models(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    alice: AbstractUser,
) -> None:
    script = [{"tool_calls": [{"name": "lookup", "arguments": {"key": k}} for k in "xyz"]},
              {"text": "done"}]
    run = run_with(make_endpoint, tools, policy, [{"kind": "before_tool", "tool": "lookup"}],
                   script, names=("lookup",))

    def recorded() -> list[dict[str, Any]]:
        return [c for r in round_views(Run.objects.get(pk=run.pk), display=False)
                for c in r["calls"]]

    assert execute(run) == "waiting"
    x, y, _ = open_pause(run).call_ids
    # x steps with an edit; y is edited too but stays held, then edited again.
    go_on(run, alice, "call", arguments={x: {"key": "X"}, y: {"key": "Y1"}})
    assert execute(run) == "waiting"
    assert [c["breakpoint_edit"] is not None for c in recorded()] == [True, False, False]
    go_on(run, alice, "run", arguments={y: {"key": "Y2"}})
    assert execute(run) == "succeeded"

    assert STATE.calls == [("lookup", "X"), ("lookup", "Y2"), ("lookup", "z")]
    views = recorded()
    assert [c["arguments"] for c in views] == [{"key": "x"}, {"key": "y"}, {"key": "z"}]
    assert [c["result_text"] for c in views] == ["value of X", "value of Y2", "value of z"]
    edits = [c["breakpoint_edit"] for c in views]
    assert [e and e["arguments"] for e in edits] == [{"key": "X"}, {"key": "Y2"}, None]
    assert edits[0] is not None
    assert edits[0]["edited_by_label"] == alice.get_username()
    assert [c["ran_edited"] for c in views] == [True, True, False]


def test_step_one_round_pauses_before_the_next_model_call(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    alice: AbstractUser,
) -> None:
    run = run_with(make_endpoint, tools, policy, [{"kind": "before_round", "round": 1}])

    assert execute(run) == "waiting"
    go_on(run, alice, "round")
    assert execute(run) == "waiting"  # before round 2: no breakpoint there, a step
    pause = open_pause(run)
    assert (pause.before, pause.round_index) == ("model", 1)
    assert pause.reason == "before round 2, after stepping one round"
    assert STATE.calls == [("lookup", "a"), ("transfer", "mallory")]
    go_on(run, alice, "run")
    assert execute(run) == "succeeded"


def test_a_message_added_before_the_model_call_is_seen_and_kept_on_resume(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    alice: AbstractUser, seen: list[ChatRequest],
) -> None:
    run = run_with(make_endpoint, tools, policy, [{"kind": "before_round", "round": 2}])
    execute(run)

    go_on(run, alice, message="Use <metric> units")
    assert execute(run) == "succeeded"

    added = seen[1].messages[-1]
    assert isinstance(added, UserMessage)
    assert added.text == "Use <metric> units"
    history, _ = load_history(Run.objects.get(pk=run.pk))
    users = [m.text for m in history if isinstance(m, UserMessage)]
    assert users == ["Please help", "Use <metric> units"]
    assert [m.text for m in seen[2].messages if isinstance(m, UserMessage)] == users


@pytest.mark.parametrize("how", ["abort", "cancel"])
def test_abort_and_cancel_are_one_action_at_a_breakpoint(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    alice: AbstractUser, how: str,
) -> None:
    run = run_with(make_endpoint, tools, policy, [{"kind": "before_tool", "tool": "transfer"}])
    execute(run)
    pause = open_pause(run)

    if how == "abort":
        go_on(run, alice, "abort", arguments={pause.call_ids[0]: {"to": 7}})  # moot
    else:
        run = run_cancel(run=run, user=alice)

    assert run.status == "cancelled"
    assert (run.error_type, run.error_message) == ("Cancelled",
                                                   "Cancelled at a breakpoint by alice")
    pause.refresh_from_db()
    assert (pause.resolution, pause.resolved_by_label) == ("abort", "alice")
    assert pause.resolved_at is not None
    assert pause.edited_arguments == {}
    assert kinds(run).count("breakpoint_continued") == 1
    assert execute(run) is None
    assert STATE.count("transfer") == 0


def test_continue_is_refused_when_the_run_is_not_at_a_breakpoint(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    alice: AbstractUser,
) -> None:
    ToolRegistration.objects.filter(name="transfer").update(requires_approval=True)
    run = run_with(make_endpoint, tools, policy, [{"kind": "before_round", "round": 2}])
    assert execute(run) == "waiting"  # for the approval of transfer, first

    with pytest.raises(DecisionError) as approval_first:
        go_on(run, alice)
    with pytest.raises(DecisionError) as bad_step:
        go_on(run, alice, "jump")
    decide(run=run, user=alice, request=DecisionRequest(calls(run)[1].call_id, "approve"))
    assert execute(run) == "waiting"  # now at the breakpoint
    go_on(run, alice)
    with pytest.raises(DecisionError) as queued:
        go_on(run, alice)
    assert execute(run) == "succeeded"
    with pytest.raises(DecisionError) as finished:
        go_on(run, alice)

    assert approval_first.value.code == "not_paused"
    assert "waits for approval decisions" in str(approval_first.value)
    assert (bad_step.value.code, bad_step.value.status) == ("invalid_field", 400)
    assert queued.value.code == "not_paused"
    assert finished.value.code == "run_finished"


@pytest.mark.parametrize(("breakpoints", "message"), [
    ("before round 2", "must be a list"),
    ([{"kind": "somewhere"}], "kind must be one of"),
    ([{"kind": "before_round", "round": 0}], "round must be a whole number"),
    ([{"kind": "before_round", "round": True}], "round must be a whole number"),
    ([{"kind": "before_tool", "tool": "nope"}], "tool must be one of the run's tools"),
    ([{"kind": "condition", "tool": "lookup", "pointer": "key", "value": 1}], "JSON pointer"),
    ([{"kind": "condition", "tool": "lookup", "pointer": "/key"}], "value is required"),
])
def test_bad_breakpoints_are_refused_naming_the_problem(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    breakpoints: Any, message: str,
) -> None:
    with pytest.raises(RunRequestError, match=message) as refused:
        run_with(make_endpoint, tools, policy, breakpoints)
    assert refused.value.field == "breakpoints"
    assert not Run.objects.exists()


def test_a_pause_stored_before_its_worker_died_still_stands(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    alice: AbstractUser,
) -> None:
    """The hook stores the pause, then the run moves to waiting: a worker dying in
    between leaves an open pause on a running run; the next worker stops there again."""
    run = run_with(make_endpoint, tools, policy, [{"kind": "before_round", "round": 3}])
    RunPause.objects.create(run=run, round_index=0, before="model", reason="before round 1")

    assert execute(run) == "waiting"
    assert open_pause(run).reason == "before round 1"
    assert RunPause.objects.count() == 1
    assert STATE.calls == []
    go_on(run, alice)
    assert execute(run) == "waiting"  # at round 3's breakpoint now
    assert open_pause(run).round_index == 2


def test_the_approval_timeout_leaves_a_run_at_a_breakpoint_waiting(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    settings: Any,
) -> None:
    settings.AGENTFORGE_APPROVAL_TIMEOUT = 1
    run = run_with(make_endpoint, tools, policy, [{"kind": "before_round", "round": 2}])
    execute(run)
    Run.objects.filter(pk=run.pk).update(waiting_since=run.created_at.replace(year=2000))

    assert expire_waiting_runs() == []
    assert Run.objects.get(pk=run.pk).status == "waiting"
