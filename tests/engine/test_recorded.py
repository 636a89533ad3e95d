"""Replay at the engine level: RecordedChatModel answers from a recording and says where
a conversation leaves it; RecordedToolExecutor serves recorded results and errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tools_app.engine import (
    ChatRequest,
    ProviderError,
    RegisteredTool,
    ReplayDivergence,
    ScriptedChatModel,
    ToolArgumentsError,
    ToolErrorHandlerResult,
    ToolExecutionRequest,
    ToolService,
    ToolSpecification,
    ToolTimeoutError,
    UserMessage,
)
from tools_app.engine.events import ReplayDiverged, ToolCallFinished, ToolCallProposed
from tools_app.engine.execution import CallableToolExecutor
from tools_app.engine.providers.recorded import (
    MOCK_RESULT,
    RecordedCall,
    RecordedChatModel,
    RecordedRound,
    RecordedToolExecutor,
)

SCRIPT = [{"tool_calls": [{"name": "echo", "arguments": {"text": "a"}},
                          {"name": "echo", "arguments": {"text": "b"}}]},
          {"text": "heard: {last_results}"}]
SPEC = ToolSpecification(name="echo", parameters={
    "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})


class Echo:
    """A live tool that can be told to answer otherwise, counting its calls."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.calls: list[str] = []

    def __call__(self, request: ToolExecutionRequest) -> str:
        text = str(json.loads(request.arguments)["text"])
        self.calls.append(text)
        return self.prefix + text


def service(executor: Any, **options: Any) -> ToolService:
    tools = ToolService(parallel=False, **options)
    tools.register(RegisteredTool(specification=SPEC, executor=executor))
    return tools


async def record() -> tuple[list[RecordedRound], str | None]:
    """Run the script with the live tool once, keeping what a recording keeps."""
    events: list[Any] = []
    result = await service(CallableToolExecutor(Echo())).chat(
        ScriptedChatModel(SCRIPT), [UserMessage(text="go")], observers=[events.append])
    responses = [e.response for e in events if e.kind == "model_response_received"]
    proposed = {(e.round_index, e.request.id): e for e in events
                if isinstance(e, ToolCallProposed)}
    rounds = []
    for index, response in enumerate(responses):
        calls = [RecordedCall(call_index=p.call_index, call_id=p.request.id,
                              tool_name=p.request.name, arguments=p.request.arguments,
                              result_text=f.text, is_error=f.is_error)
                 for f in events if isinstance(f, ToolCallFinished) and f.round_index == index
                 for p in (proposed[(index, f.call_id)],)]
        rounds.append(RecordedRound(index=index, response=response, calls=tuple(calls)))
    return rounds, result.final_response.ai_message.text


async def test_a_recorded_replay_repeats_the_run_executing_nothing() -> None:
    rounds, final_text = await record()
    echo = Echo()

    result = await service(RecordedToolExecutor(rounds, live=CallableToolExecutor(echo))).chat(
        RecordedChatModel(rounds, prelude_messages=1), [UserMessage(text="go")])

    assert result.final_response.ai_message.text == final_text == "heard: a\nb"
    assert echo.calls == []


async def test_a_result_that_differs_is_a_divergence_naming_round_and_call() -> None:
    rounds, _ = await record()

    with pytest.raises(ReplayDivergence) as caught:
        await service(CallableToolExecutor(Echo(prefix="new "))).chat(
            RecordedChatModel(rounds, prelude_messages=1), [UserMessage(text="go")])

    assert (caught.value.round_index, caught.value.call_index) == (0, 0)
    assert str(caught.value) == ("The replay left its recording at round 1, call 1 (echo): "
                                 "the result differs: recorded 'a', now 'new a'")


async def test_a_divergence_may_go_on_live_reported_once() -> None:
    rounds, _ = await record()
    events: list[Any] = []
    live = ScriptedChatModel([{"text": "unused"}, {"text": "live: {last_results}"}])

    result = await service(CallableToolExecutor(Echo(prefix="new "))).chat(
        RecordedChatModel(rounds, prelude_messages=1, live=live), [UserMessage(text="go")],
        observers=[events.append])

    assert result.final_response.ai_message.text == "live: new a\nnew b"
    diverged = [e for e in events if isinstance(e, ReplayDiverged)]
    assert len(diverged) == 1
    assert (diverged[0].round_index, diverged[0].call_index) == (1, 0)
    assert diverged[0].detail.endswith("; going on live")


async def test_the_recorded_model_is_stateless() -> None:
    rounds, _ = await record()
    model = RecordedChatModel(rounds, prelude_messages=1)
    request = ChatRequest(messages=(UserMessage(text="go"),))

    assert await model.chat(request) == await model.chat(request) == rounds[0].response


async def test_a_call_the_recording_lacks_stops_or_gets_a_mock_result() -> None:
    rounds, _ = await record()
    other = ToolExecutionRequest(id="x", name="echo", arguments='{"text": "zzz"}')

    with pytest.raises(ReplayDivergence, match="the recording has no call of echo"):
        await RecordedToolExecutor(rounds).execute_with_result(other)
    mocked = await RecordedToolExecutor(rounds, mode="mock").execute_with_result(other)
    assert mocked.text == MOCK_RESULT.format(tool="echo")
    same = ToolExecutionRequest(id="other-id", name="echo", arguments='{ "text" : "b" }')
    assert (await RecordedToolExecutor(rounds).execute_with_result(same)).text == "b"


async def test_a_recorded_error_is_raised_again_for_the_policy_to_word() -> None:
    rounds = [RecordedRound(index=0, response=None, calls=(RecordedCall(
        call_index=0, call_id="c", tool_name="echo", arguments="{}", state="arguments_error",
        result_text="fix: text is missing", is_error=True, error_type="ToolArgumentsError",
        error_message="text is missing"),))]
    request = ToolExecutionRequest(id="c", name="echo", arguments="{}")

    with pytest.raises(ToolArgumentsError, match="text is missing"):
        await RecordedToolExecutor(rounds).execute_with_result(request)

    def to_model(error: Exception, context: Any) -> ToolErrorHandlerResult:
        return ToolErrorHandlerResult.text(f"fix: {error}")

    model = ScriptedChatModel([{"tool_calls": [{"name": "echo", "arguments": "{}"}]},
                               {"text": "{last_result}"}])
    result = await service(RecordedToolExecutor(
        [rounds[0].model_copy(update={"calls": (rounds[0].calls[0].model_copy(
            update={"call_id": "call_0_0"}),)})]),
        arguments_error_handler=to_model).chat(model, [UserMessage(text="go")])
    assert result.final_response.ai_message.text == "fix: text is missing"


@pytest.mark.parametrize("mode", ["recorded", "mock"])
async def test_a_recorded_timeout_is_raised_again_as_a_timeout(mode: Any) -> None:
    message = "Tool 'echo' timed out after 2 s"
    rounds = [RecordedRound(index=0, response=None, calls=(RecordedCall(
        call_index=0, call_id="call_0_0", tool_name="echo", arguments="{}",
        state="timed_out", result_text=message, is_error=True,
        error_type="ToolTimeoutError", error_message=message),))]
    request = ToolExecutionRequest(id="call_0_0", name="echo", arguments="{}")

    with pytest.raises(ToolTimeoutError) as raised:
        await RecordedToolExecutor(rounds, mode=mode).execute_with_result(request)
    assert str(raised.value) == message
    assert raised.value.timeout is None  # the recording keeps the message, not the timeout

    events: list[Any] = []
    model = ScriptedChatModel([{"tool_calls": [{"name": "echo", "arguments": "{}"}]},
                               {"text": "{last_result}"}])
    result = await service(RecordedToolExecutor(rounds, mode=mode)).chat(
        model, [UserMessage(text="go")], observers=[events.append])
    [finished] = [e for e in events if isinstance(e, ToolCallFinished)]
    assert (finished.outcome, finished.error_type, finished.error_message) == (
        "timed_out", "ToolTimeoutError", message)
    assert result.final_response.ai_message.text == message


async def test_a_model_call_that_never_answered_fails_the_same_way() -> None:
    rounds = [RecordedRound(index=0, response=None)]

    with pytest.raises(ProviderError, match="round 1: the recorded model call did not answer"):
        await RecordedChatModel(rounds, prelude_messages=1).chat(
            ChatRequest(messages=(UserMessage(text="go"),)))


async def test_a_call_that_never_finished_is_not_served() -> None:
    rounds = [RecordedRound(index=0, response=None, calls=(RecordedCall(
        call_index=0, call_id="c", tool_name="echo", arguments="{}", state="started"),))]

    with pytest.raises(ReplayDivergence, match="the recording has no call of echo"):
        await RecordedToolExecutor(rounds).execute_with_result(
            ToolExecutionRequest(id="c", name="echo", arguments="{}"))
