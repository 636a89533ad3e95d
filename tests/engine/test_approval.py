"""Tools that require a person's approval never run without it: the safety flag is
never silently ignored (before it was, such tools ran at once)."""

from __future__ import annotations

from typing import Any

import pytest

from tools_app.engine import (
    ApprovalPending,
    ToolApprovalPending,
    ToolErrorContext,
    ToolExecutionRequest,
    ToolRejectedError,
    ToolService,
    rethrow_arguments_error,
    tool,
)

from .support import call, calls, final, scripted, user

RAN: list[str] = []


@tool(requires_approval=True)
def wire_money(amount: int) -> str:
    """Send money (needs a person's approval)."""
    RAN.append(f"wire {amount}")
    return f"sent {amount}"


@tool
def look_up(key: str) -> str:
    """Read something (no approval needed)."""
    RAN.append(f"look {key}")
    return f"value of {key}"


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


def model() -> Any:
    return scripted(calls(call("wire_money", {"amount": 100}), call("look_up", {"key": "k"})),
                    final("model saw: {last_results}"))


async def test_without_an_approver_a_flagged_call_is_refused_and_never_runs() -> None:
    events: list[Any] = []
    service = ToolService(observers=[events.append]).tools([wire_money, look_up])

    result = await service.chat(model(), [user()])

    assert RAN == ["look k"]  # the other call of the round ran
    refused = result.tool_executions[0]
    assert refused.result.is_error
    assert "requires a person's approval" in refused.result.text
    assert "was not executed" in refused.result.text
    finished = [e for e in events if e.kind == "tool_call_finished"]
    assert [(e.tool_name, e.outcome) for e in finished] == [
        ("wire_money", "rejected"), ("look_up", "succeeded")]
    assert not [e for e in events if e.kind == "tool_call_started" and e.tool_name == "wire_money"]


@pytest.mark.parametrize(("decision", "runs", "text"), [
    (True, True, "sent 100"),
    (False, False, "Tool 'wire_money' was not executed: not approved"),
    ("over the limit", False, "Tool 'wire_money' was not executed: over the limit"),
])
async def test_the_approver_decides_each_flagged_call(
    decision: bool | str, runs: bool, text: str,
) -> None:
    asked: list[tuple[str, str, int | None]] = []

    async def approver(request: ToolExecutionRequest, context: ToolErrorContext) -> bool | str:
        asked.append((request.name, request.arguments, context.round_index))
        return decision

    service = ToolService(approver=approver).tools([wire_money, look_up])
    result = await service.chat(model(), [user()])

    assert asked == [("wire_money", '{"amount": 100}', 0)]  # never asked for look_up
    assert ("wire 100" in RAN) is runs
    assert result.tool_executions[0].result.text == text


async def test_a_refusal_goes_through_the_execution_error_handler() -> None:
    def stop(error: Exception, context: ToolErrorContext) -> Any:
        raise error

    service = ToolService(execution_error_handler=stop,
                          arguments_error_handler=rethrow_arguments_error).tools([wire_money])

    with pytest.raises(ToolRejectedError):
        await service.chat(scripted(calls(call("wire_money", {"amount": 1})), final()),
                           [user()])
    assert RAN == []


async def test_an_approver_may_run_the_call_with_edited_arguments() -> None:
    async def approver(request: ToolExecutionRequest, context: ToolErrorContext) -> Any:
        return request.model_copy(update={"arguments": '{"amount": 5}'})

    service = ToolService(approver=approver).tools([wire_money, look_up])
    result = await service.chat(model(), [user()])

    assert RAN == ["wire 5", "look k"]
    assert result.tool_executions[0].result.text == "sent 5"


async def test_an_approver_may_not_change_which_call_runs() -> None:
    def approver(request: ToolExecutionRequest, context: ToolErrorContext) -> Any:
        return request.model_copy(update={"name": "look_up"})

    service = ToolService(approver=approver).tools([wire_money, look_up])

    with pytest.raises(ValueError, match="not its id or tool"):
        await service.chat(model(), [user()])
    assert RAN == []


async def test_an_undecided_call_pauses_the_round_before_any_call_of_it_runs() -> None:
    events: list[Any] = []
    asked: list[str] = []

    def approver(request: ToolExecutionRequest, context: ToolErrorContext) -> bool:
        asked.append(request.id)
        raise ApprovalPending(request.id)

    two_flagged = scripted(calls(call("look_up", {"key": "k"}), call("wire_money", {"amount": 1}),
                                 call("wire_money", {"amount": 2})), final())
    service = ToolService(approver=approver, observers=[events.append]).tools(
        [wire_money, look_up])

    with pytest.raises(ToolApprovalPending) as paused:
        await service.chat(two_flagged, [user()])

    assert RAN == []  # not even the call that needs no approval
    assert len(asked) == 2  # every flagged call of the round was asked about
    assert paused.value.call_ids == asked
    assert paused.value.round_index == 0
    assert events[-1].kind == "chat_paused"
    assert events[-1].call_ids == asked
    assert not [e for e in events if e.kind in ("tool_call_started", "chat_failed")]
