"""Resuming a persisted run (ResumeState): finished work is never redone."""

import pytest

from tools_app.engine import (
    AiMessage,
    ChatMessage,
    ChatResponse,
    FinishReason,
    MaxRoundTripsExceededError,
    ResumeState,
    ToolErrorHandlerResult,
    ToolExecutionError,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolService,
    ToolUnknownOutcomeError,
    tool,
)

from .support import EventLog, call, calls, final, scripted, user


class Bank:
    def __init__(self) -> None:
        self.transfers: list[str] = []

    @tool
    def transfer(self, to: str) -> str:
        self.transfers.append(to)
        return f"sent to {to}"


def request(call_id: str, to: str) -> ToolExecutionRequest:
    return ToolExecutionRequest(id=call_id, name="transfer", arguments=f'{{"to": "{to}"}}')


DONE = request("call_0_0", "alice")
IN_FLIGHT = request("call_0_1", "bob")
NOT_STARTED = request("call_0_2", "carol")
PENDING = ChatResponse(
    ai_message=AiMessage(tool_execution_requests=(DONE, IN_FLIGHT, NOT_STARTED)),
    finish_reason=FinishReason.TOOL_EXECUTION,
)
DONE_RESULT = ToolExecutionResultMessage(id=DONE.id, tool_name="transfer", text="sent to alice")


def resume_state() -> ResumeState:
    return ResumeState(
        round_index=0,
        round_trips_done=0,
        pending_response=PENDING,
        completed_results={DONE.id: DONE_RESULT},
        unknown_outcome_ids=frozenset({IN_FLIGHT.id}),
    )


async def test_a_resumed_round_runs_only_the_calls_that_never_ran() -> None:
    bank = Bank()
    # The script's first step stands for the pending response: it is not requested again.
    model = scripted(calls(call("unused")), final("two transfers done, one unknown"))
    result = await ToolService().tools(bank).chat(model, [user()], resume=resume_state())

    assert bank.transfers == ["carol"]
    assert model.calls == 1
    assert result.final_response.ai_message.text == "two transfers done, one unknown"
    done, unknown, ran = model.tool_results(0)
    assert done == DONE_RESULT
    assert unknown.id == IN_FLIGHT.id
    assert unknown.is_error is True
    assert "unknown" in unknown.text
    assert ran == ToolExecutionResultMessage(id=NOT_STARTED.id, tool_name="transfer",
                                             text="sent to carol")


async def test_the_pending_assistant_message_is_appended_before_the_results() -> None:
    model = scripted(calls(call("unused")), final())
    await ToolService().tools(Bank()).chat(model, [user()], resume=resume_state())
    messages = model.requests[0].messages
    assert messages[:2] == (user(), PENDING.ai_message)
    assert [m.id for m in messages[2:]] == [DONE.id, IN_FLIGHT.id, NOT_STARTED.id]  # type: ignore[union-attr]


async def test_only_calls_executed_now_are_reported_as_executions() -> None:
    result = await ToolService().tools(Bank()).chat(
        scripted(calls(call("unused")), final()), [user()], resume=resume_state()
    )
    assert [e.request.id for e in result.tool_executions] == [IN_FLIGHT.id, NOT_STARTED.id]
    assert result.intermediate_responses == [PENDING]


async def test_an_unknown_outcome_goes_through_the_execution_handler() -> None:
    seen: list[ToolExecutionError] = []

    def handler(error: ToolExecutionError, context: object) -> ToolErrorHandlerResult:
        seen.append(error)
        return ToolErrorHandlerResult.text("check the bank statement before retrying")

    log = EventLog()
    service = ToolService(execution_error_handler=handler, observers=[log]).tools(Bank())
    model = scripted(calls(call("unused")), final())
    await service.chat(model, [user()], resume=resume_state())
    [error] = seen
    assert isinstance(error, ToolUnknownOutcomeError)
    assert error.tool_name == "transfer"
    assert model.tool_results(0)[1].text == "check the bank statement before retrying"
    outcomes = {e.call_id: e.outcome for e in log.of_kind("tool_call_finished")}
    assert outcomes == {IN_FLIGHT.id: "unknown_outcome", NOT_STARTED.id: "succeeded"}


async def test_a_strict_handler_stops_a_resumed_run_on_an_unknown_outcome() -> None:
    def strict(error: ToolExecutionError, context: object) -> ToolErrorHandlerResult:
        raise error

    bank = Bank()
    service = ToolService(execution_error_handler=strict, parallel=False).tools(bank)
    with pytest.raises(ToolUnknownOutcomeError):
        await service.chat(scripted(final()), [user()], resume=resume_state())
    assert bank.transfers == []


async def test_resuming_counts_the_round_trips_already_done() -> None:
    history: list[ChatMessage] = [
        user(),
        AiMessage(tool_execution_requests=(request("call_old", "dave"),)),
        ToolExecutionResultMessage(id="call_old", tool_name="transfer", text="sent to dave"),
    ]
    state = ResumeState(round_index=1, round_trips_done=1, pending_response=PENDING)
    service = ToolService(max_tool_calling_round_trips=2).tools(Bank())
    model = scripted(calls(call("x")), calls(call("y")), calls(call("transfer", {"to": "erin"})))
    with pytest.raises(MaxRoundTripsExceededError, match="max_tool_calling_round_trips=2"):
        await service.chat(model, history, resume=state)
    assert model.calls == 1
