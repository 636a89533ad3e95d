"""The engine's breakpoint hooks: before a model call (pause, or add messages) and the
call gate (hold some calls of a round: the others run, then the chat pauses; or edit
a call's arguments). A paused chat resumes from a ResumeState without redoing work."""

from __future__ import annotations

from typing import Any

import pytest

from tools_app.engine import (
    ChatMessage,
    GateAnswer,
    ResumeState,
    RunPaused,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolService,
    UserMessage,
    tool,
)

from .support import EventLog, call, calls, final, scripted, user

RAN: list[str] = []


@tool
def note(text: str) -> str:
    """Write a note down."""
    RAN.append(text)
    return f"noted {text}"


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


def three_notes() -> Any:
    return scripted(calls(call("note", {"text": "a"}), call("note", {"text": "b"}),
                          call("note", {"text": "c"})), final("model saw: {last_results}"))


async def test_a_hook_may_pause_before_a_model_call_before_anything_of_the_round() -> None:
    log = EventLog()

    def hook(round_index: int, messages: list[ChatMessage]) -> list[ChatMessage]:
        raise RunPaused("before round 1", call_ids=[], round_index=round_index,
                        reason="breakpoint")

    model = three_notes()
    service = ToolService(before_model_call=hook, observers=[log]).tools([note])
    with pytest.raises(RunPaused):
        await service.chat(model, [user()])

    assert model.calls == 0
    assert log.kinds() == ["chat_started", "chat_paused"]
    assert (log.events[-1].reason, log.events[-1].round_index) == ("breakpoint", 0)


async def test_a_hook_may_add_messages_the_model_then_sees() -> None:
    seen: list[int] = []

    def hook(round_index: int, messages: list[ChatMessage]) -> list[ChatMessage]:
        seen.append(round_index)
        return [UserMessage(text="check c twice")] if round_index == 1 else []

    model = three_notes()
    await ToolService(before_model_call=hook).tools([note]).chat(model, [user()])

    assert seen == [0, 1]
    last = model.requests[1].messages[-1]
    assert isinstance(last, UserMessage)
    assert last.text == "check c twice"


async def test_the_gate_holds_calls_the_others_run_and_a_resume_runs_the_rest() -> None:
    log = EventLog()
    asked: list[list[str]] = []

    def hold_b(requests: list[ToolExecutionRequest], round_index: int) -> GateAnswer:
        asked.append([r.arguments for r in requests])
        held = {r.id for r in requests if '"b"' in r.arguments}
        return GateAnswer(hold=frozenset(held) if len(asked) == 1 else frozenset())

    model = three_notes()
    service = ToolService(call_gate=hold_b, observers=[log]).tools([note])
    with pytest.raises(RunPaused) as paused:
        await service.chat(model, [user()])

    assert sorted(RAN) == ["a", "c"]
    assert paused.value.reason == "breakpoint"
    [held] = paused.value.call_ids
    response = log.events[[e.kind for e in log.events].index("model_response_received")].response
    done = {e.call_id: e for e in log.events if e.kind == "tool_call_finished"}
    completed = {i: ToolExecutionResultMessage(id=i, tool_name="note", text=e.text or "")
                 for i, e in done.items()}
    result = await service.chat(model, [user()], resume=ResumeState(
        round_index=0, round_trips_done=0, pending_response=response,
        completed_results=completed))

    assert sorted(RAN) == ["a", "b", "c"]  # a and c were not run again
    assert len(asked[1]) == 1
    assert held not in completed
    assert "noted b" in result.final_response.ai_message.text


async def test_the_gate_may_edit_arguments_but_not_the_call() -> None:
    def edit(requests: list[ToolExecutionRequest], round_index: int) -> GateAnswer:
        first = requests[0]
        return GateAnswer(edited={first.id: first.model_copy(update={
            "arguments": '{"text": "A!"}'})})

    await ToolService(call_gate=edit).tools([note]).chat(three_notes(), [user()])
    assert RAN == ["A!", "b", "c"]

    def swap(requests: list[ToolExecutionRequest], round_index: int) -> GateAnswer:
        first = requests[0]
        return GateAnswer(edited={first.id: first.model_copy(update={"name": "other"})})

    RAN.clear()
    with pytest.raises(ValueError, match="not its id or tool"):
        await ToolService(call_gate=swap).tools([note]).chat(three_notes(), [user()])
    assert RAN == []
