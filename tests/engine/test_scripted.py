"""The offline models: ScriptedChatModel (a fixed script) and FunctionChatModel."""

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from tools_app.engine import (
    AiMessage,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    FinishReason,
    FunctionChatModel,
    ProviderError,
    ScriptedCall,
    ScriptedChatModel,
    ScriptStep,
    ToolArgumentsError,
    ToolErrorHandlerResult,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolService,
    tool,
)

from .support import EventLog, call, calls, final, scripted, user


@tool
def echo(word: str) -> str:
    return f"echo:{word}"


async def ask(model: Any, *messages: ChatMessage) -> ChatResponse:
    response: ChatResponse = await model.chat(ChatRequest(messages=messages or (user(),)))
    return response


async def test_steps_are_played_one_per_model_turn() -> None:
    model = ScriptedChatModel([calls(call("echo", {"word": "hi"})), final("bye")])
    first = await ask(model, user())
    assert first.ai_message.tool_execution_requests == (
        ToolExecutionRequest(id="call_0_0", name="echo", arguments='{"word": "hi"}'),
    )
    assert first.finish_reason is FinishReason.TOOL_EXECUTION
    assert first.ai_message.text is None
    second = await ask(model, user(), first.ai_message)
    assert second.ai_message == AiMessage(text="bye")
    assert second.finish_reason is FinishReason.STOP
    assert (second.model_name, second.response_id) == ("scripted", "scripted-1")


async def test_the_step_is_chosen_from_the_conversation_so_replays_are_identical() -> None:
    model = ScriptedChatModel([final("one"), final("two")])
    assert (await ask(model, user())).ai_message.text == "one"
    assert (await ask(model, user())).ai_message.text == "one"
    assert (await ask(model, user(), AiMessage(text="one"))).ai_message.text == "two"


async def test_steps_may_be_plain_dicts() -> None:
    model = ScriptedChatModel([
        {"tool_calls": [{"name": "echo", "arguments": {"word": "a"}}]},
        {"text": "fin", "finish_reason": "length"},
    ])
    result = await ToolService().tools([echo]).chat(model, [user()])
    assert result.final_response.ai_message.text == "fin"
    assert result.final_response.finish_reason is FinishReason.LENGTH


async def test_several_calls_in_one_step_are_parallel_calls() -> None:
    model = scripted(calls(call("echo", {"word": "a"}), call("echo", {"word": "b"})), final())
    result = await ToolService().tools([echo]).chat(model, [user()])
    [intermediate] = result.intermediate_responses
    assert [r.id for r in intermediate.ai_message.tool_execution_requests] == [
        "call_0_0",
        "call_0_1",
    ]
    assert [m.text for m in model.tool_results(1)] == ["echo:a", "echo:b"]


async def test_last_result_and_last_results_are_substituted() -> None:
    model = scripted(
        calls(call("echo", {"word": "one"})),
        calls(call("echo", {"word": "two"}), call("echo", {"word": "three"})),
        ScriptStep(text="first={last_result} all={last_results}"),
    )
    result = await ToolService().tools([echo]).chat(model, [user()])
    assert result.final_response.ai_message.text == "first=echo:two all=echo:two\necho:three"


async def test_last_result_is_empty_when_no_tool_ran_yet() -> None:
    response = await ask(ScriptedChatModel([ScriptStep(text="[{last_result}]")]))
    assert response.ai_message.text == "[]"


async def test_raw_string_arguments_are_sent_verbatim() -> None:
    scripted_call = ScriptedCall(name="echo", arguments='{"word": "unterminated')
    assert scripted_call.raw_arguments() == '{"word": "unterminated'
    response = await ask(ScriptedChatModel([calls(scripted_call)]))
    assert response.ai_message.tool_execution_requests[0].arguments == '{"word": "unterminated'


async def test_raw_string_arguments_rehearse_invalid_json_from_a_model() -> None:
    model = scripted(calls(call("echo", "{word: hi}")), final())
    with pytest.raises(ToolArgumentsError, match="not valid JSON"):
        await ToolService().tools([echo]).chat(model, [user()])

    tolerant = ToolService(
        arguments_error_handler=lambda e, c: ToolErrorHandlerResult.text("send valid JSON"),
    ).tools([echo])
    model = scripted(calls(call("echo", "{word: hi}")), calls(call("echo", {"word": "hi"})),
                     final("{last_result}"))
    result = await tolerant.chat(model, [user()])
    assert model.tool_results(1)[0].text == "send valid JSON"
    assert result.final_response.ai_message.text == "echo:hi"


async def test_running_past_the_script_is_a_clear_provider_error() -> None:
    model = ScriptedChatModel([calls(call("echo", {"word": "a"}))])
    with pytest.raises(ProviderError, match="has 1 steps and was asked for step 2") as caught:
        await ToolService().tools([echo]).chat(model, [user()])
    assert "add a final text step" in str(caught.value)
    assert caught.value.provider == "scripted"
    assert caught.value.retryable is False


async def test_the_scripted_model_reports_a_deterministic_usage() -> None:
    model = ScriptedChatModel([final("12345678")])
    first, again = await ask(model, user("abcd")), await ask(model, user("abcd"))
    assert first.usage == again.usage
    assert first.usage is not None
    assert first.usage.total_tokens == (first.usage.input_tokens or 0) + (
        first.usage.output_tokens or 0
    )


async def test_a_streaming_script_emits_fragments_that_reassemble_to_the_message() -> None:
    log = EventLog()
    arguments = {"word": "a fairly long argument value to split into fragments"}
    model = ScriptedChatModel(
        [
            ScriptStep(text="Let me echo that for you.", tool_calls=(
                call("echo", arguments), call("echo", {"word": "b"}))),
            final("All echoed, thank you for waiting."),
        ],
        stream=True,
    )
    result = await ToolService(observers=[log]).tools([echo]).chat(model, [user()])

    by_round: dict[int, list[Any]] = {0: [], 1: []}
    for event in log.events:
        if event.kind in ("partial_text", "partial_tool_call"):
            by_round[event.round_index].append(event)
    streamed = [reassemble(by_round[0]), reassemble(by_round[1])]
    assert streamed == [result.intermediate_responses[0].ai_message,
                        result.final_response.ai_message]
    assert sum(e.kind == "partial_text" for e in by_round[0]) > 1
    assert sum(e.kind == "partial_tool_call" and bool(e.arguments_delta) for e in by_round[0]) > 2
    kinds = log.kinds()
    assert kinds.index("partial_text") < kinds.index("model_response_received")


def reassemble(fragments: list[Any]) -> AiMessage:
    text = "".join(f.delta for f in fragments if f.kind == "partial_text")
    parts: dict[int, dict[str, str]] = {}
    for f in fragments:
        if f.kind == "partial_tool_call":
            part = parts.setdefault(f.index, {"id": "", "name": "", "arguments": ""})
            part["id"] = f.id or part["id"]
            part["name"] = f.name or part["name"]
            part["arguments"] += f.arguments_delta
    requests = tuple(ToolExecutionRequest(**parts[i]) for i in sorted(parts))
    return AiMessage(text=text or None, tool_execution_requests=requests)


async def test_without_stream_no_fragments_are_emitted() -> None:
    log = EventLog()
    model = ScriptedChatModel([final("quiet")])
    await ToolService(observers=[log]).chat(model, [user()])
    assert "partial_text" not in log.kinds()


# -- FunctionChatModel -----------------------------------------------------------------


async def test_a_sync_function_model_answering_with_a_string() -> None:
    seen: list[int] = []

    def answer(messages: Sequence[ChatMessage], request: ChatRequest) -> str:
        seen.append(len(messages))
        return "plain answer"

    response = await ask(FunctionChatModel(answer, model_name="fn"))
    assert response.ai_message == AiMessage(text="plain answer")
    assert response.finish_reason is FinishReason.STOP
    assert response.model_name == "fn"
    assert seen == [1]


async def test_an_async_function_model_drives_the_loop() -> None:
    async def answer(messages: Sequence[ChatMessage], request: ChatRequest) -> AiMessage:
        await asyncio.sleep(0)
        results = [m for m in messages if isinstance(m, ToolExecutionResultMessage)]
        if not results:
            return AiMessage(tool_execution_requests=(
                ToolExecutionRequest(id="c1", name="echo", arguments='{"word": "x"}'),
            ))
        return AiMessage(text=f"got {results[0].text}")

    result = await ToolService().tools([echo]).chat(FunctionChatModel(answer), [user()])
    assert result.final_response.ai_message.text == "got echo:x"
    assert result.intermediate_responses[0].finish_reason is FinishReason.TOOL_EXECUTION


async def test_a_function_model_may_return_a_full_response() -> None:
    full = ChatResponse(ai_message=AiMessage(text="t"), finish_reason=FinishReason.LENGTH)
    assert await ask(FunctionChatModel(lambda messages, request: full)) is full


async def test_a_function_model_returning_something_else_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="42"):
        await ask(FunctionChatModel(lambda messages, request: 42))
