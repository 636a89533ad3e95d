"""The Responses API adapter: the bodies it writes (each checked against the openai SDK's
ResponseCreateParams, unknown keys refused), the reasoning items it sends back, and what
it reads from JSON and streamed responses (built by the fake provider's wire, whose
output the SDK's own types parse in tests/fake_llm/test_responses_wire.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tools_app.engine import (
    ChatMessage,
    ChatRequest,
    ChatRequestParameters,
    FinishReason,
    NamedToolChoice,
    ProviderError,
    SystemMessage,
    TokenUsage,
    ToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolSpecification,
    UserMessage,
)
from tools_app.engine.events import PartialText, PartialToolCall
from tools_app.engine.providers.anthropic import AnthropicChatModel
from tools_app.engine.providers.openai_responses import OpenAIResponsesModel
from tools_app.engine.providers.request_limits import request_problems
from tools_app.fake_llm.conversation import Conversation, Reply, ReplyCall
from tools_app.fake_llm.wires import OPENAI_RESPONSES
from tools_app.fake_llm.wires.base import dumps

from .bodies import CONVERSATION, WEATHER
from .support import (
    Replay,
    captured_events,
    json_response,
    sse_response,
    validate_anthropic_body,
    validate_responses_body,
)

CALLS = [ReplyCall("get_weather", '{"city":"Paris"}', "call_p"),
         ReplyCall("get_weather", '{"city":"Rome"}', "call_r")]


def fake_response(reply: Reply, *, model: str = "gpt-5-mini", encrypted: bool = True,
                  stream: bool = False) -> Any:
    """A response of the fake provider's Responses wire: JSON, or its SSE text."""
    conversation = Conversation(model=model, encrypted_reasoning=encrypted)
    if not stream:
        return json_response(200, OPENAI_RESPONSES.json_body(reply, conversation))
    items = OPENAI_RESPONSES.stream_items(reply, conversation, 5)
    return sse_response("".join(f"event: {name}\ndata: {dumps(data)}\n\n"
                                for name, data in items))


def model_with(replay: Replay, model: str = "gpt-5-mini", **overrides: Any,
               ) -> OpenAIResponsesModel:
    return OpenAIResponsesModel(base_url="http://127.0.0.1:8000/v1", model=model,
                                api_key="sk-test", transport=replay.transport, **overrides)


async def body_for(parameters: ChatRequestParameters,
                   messages: tuple[ChatMessage, ...] = CONVERSATION, *, stream: bool = False,
                   model: str = "gpt-4o") -> dict[str, Any]:
    replay = Replay([fake_response(Reply(text="ok"), model=model, stream=stream)],
                    validate_responses_body)
    await model_with(replay, model, stream=stream).chat(
        ChatRequest(messages=messages, parameters=parameters))
    return replay.bodies[0]


# -- request bodies ----------------------------------------------------------------------


async def test_it_writes_instructions_items_tools_and_parameters() -> None:
    body = await body_for(ChatRequestParameters(
        tools=(WEATHER,), tool_choice="required", parallel_tool_calls=False,
        temperature=0.3, top_p=0.8, max_output_tokens=512))

    assert body == {
        "model": "gpt-4o", "stream": False, "store": False,
        "instructions": "You are terse.",
        "input": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": "Checking both."},
            {"type": "function_call", "call_id": "call_a", "name": "get_weather",
             "arguments": '{"city": "Paris"}'},
            {"type": "function_call", "call_id": "call_b", "name": "get_weather",
             "arguments": '{"city": "Rome"}'},
            {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
            {"type": "function_call_output", "call_id": "call_b", "output": "no such city"},
            {"role": "assistant", "content": "Paris is sunny; Rome failed."},
            {"role": "user", "content": "Thanks!"},
        ],
        "tools": [{"type": "function", "name": "get_weather",
                   "description": "Current weather for a city.",
                   "parameters": WEATHER.parameters, "strict": True}],
        "tool_choice": "required", "parallel_tool_calls": False,
        "temperature": 0.3, "top_p": 0.8, "max_output_tokens": 512,
    }


async def test_a_tool_not_marked_strict_is_sent_as_not_strict() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    loose = ToolSpecification(name="lookup", description="Look up.", parameters=schema)

    body = await body_for(ChatRequestParameters(tools=(loose, WEATHER)))

    assert [t["strict"] for t in body["tools"]] == [False, True]


@pytest.mark.parametrize(("choice", "wire"), [
    ("auto", "auto"), ("none", "none"), ("required", "required"),
    (NamedToolChoice(name="get_weather"), {"type": "function", "name": "get_weather"}),
])
async def test_tool_choice_forms(choice: ToolChoice, wire: Any) -> None:
    body = await body_for(ChatRequestParameters(tools=(WEATHER,), tool_choice=choice))

    assert body["tool_choice"] == wire


async def test_streaming_is_asked_for_in_the_body() -> None:
    body = await body_for(ChatRequestParameters(), stream=True)

    assert body["stream"] is True
    assert "stream_options" not in body


async def test_reasoning_models_are_asked_for_their_encrypted_reasoning() -> None:
    reasoning = await body_for(ChatRequestParameters(), model="gpt-5-mini")
    chat = await body_for(ChatRequestParameters(), model="gpt-5-chat-latest")
    plain = await body_for(ChatRequestParameters(), model="gpt-4o")

    assert reasoning["include"] == ["reasoning.encrypted_content"]
    assert "include" not in chat
    assert "include" not in plain


async def test_store_include_and_previous_response_id_are_endpoint_options() -> None:
    body = await body_for(ChatRequestParameters(custom={
        "store": True, "previous_response_id": "resp_123", "reasoning": {"effort": "low"},
        "instructions": "ignored", "input": "ignored", "stop": ["x"]}), model="o4-mini")
    chosen = await body_for(ChatRequestParameters(custom={"include": []}), model="gpt-5")

    assert (body["store"], body["previous_response_id"], body["reasoning"]) == (
        True, "resp_123", {"effort": "low"})
    assert "include" not in body  # stored: the reasoning items are found by id
    assert body["instructions"] == "You are terse."
    assert "stop" not in body
    assert chosen["include"] == []


async def test_chained_requests_continue_the_previous_response_with_the_new_items() -> None:
    replay = Replay([fake_response(Reply(text="Checking.", calls=CALLS, finish="tool_calls")),
                     fake_response(Reply(text="Done."))], validate_responses_body)
    model = model_with(replay)
    chained = ChatRequestParameters(custom={"store": True, "previous_response_id": "auto"})
    system = SystemMessage(text="Be brief.")
    first = await model.chat(ChatRequest(messages=(system, UserMessage(text="Paris, Rome?")),
                                         parameters=chained))
    results = tuple(ToolExecutionResultMessage(id=r.id, tool_name=r.name, text="sunny")
                    for r in first.ai_message.tool_execution_requests)

    await model.chat(ChatRequest(messages=(system, UserMessage(text="Paris, Rome?"),
                                           first.ai_message, *results), parameters=chained))

    opening, follow_up = replay.bodies
    assert "previous_response_id" not in opening
    assert opening["input"] == [{"role": "user", "content": "Paris, Rome?"}]
    assert (follow_up["previous_response_id"], follow_up["store"]) == (first.response_id, True)
    assert follow_up["instructions"] == "Be brief."  # not carried over by the API
    assert follow_up["input"] == [
        {"type": "function_call_output", "call_id": "call_p", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_r", "output": "sunny"}]


async def test_auto_chaining_without_store_sends_the_whole_conversation() -> None:
    body = await body_for(ChatRequestParameters(custom={"previous_response_id": "auto"}))

    assert "previous_response_id" not in body
    assert len(body["input"]) == 8


def test_starting_a_run_refuses_what_the_responses_api_does_not_have() -> None:
    problems = request_problems("openai_responses", ChatRequestParameters(
        stop_sequences=("STOP",), max_output_tokens=15,
        custom={"instructions": "x", "seed": 1, "reasoning": {"effort": "high", "budget": 3}}))
    at_least = request_problems("openai_responses", ChatRequestParameters(max_output_tokens=16))

    assert set(problems) == {"stop_sequences", "max_output_tokens", "custom.instructions",
                             "custom.seed", "custom.reasoning.budget"}
    assert problems["max_output_tokens"] == "must be from 16 to 1,000,000"
    assert at_least == {}
    unstored = request_problems("openai_responses", ChatRequestParameters(
        custom={"previous_response_id": "auto"}))
    stored = request_problems("openai_responses", ChatRequestParameters(
        custom={"previous_response_id": "auto", "store": True}))
    assert unstored == {"custom.previous_response_id": '"auto" needs custom.store true (only '
                                                       "a stored response can be continued)"}
    assert stored == {}
    assert "system messages are the instructions" in problems["custom.instructions"]


# -- reasoning items round trip ----------------------------------------------------------


async def test_reasoning_items_go_back_in_their_place_with_the_calls() -> None:
    replay = Replay([fake_response(Reply(text="Checking.", calls=CALLS, finish="tool_calls")),
                     fake_response(Reply(text="Done."))], validate_responses_body)
    model = model_with(replay)
    first = await model.chat(ChatRequest(messages=(UserMessage(text="Paris and Rome?"),)))
    received = first.ai_message.provider_blocks
    results = tuple(ToolExecutionResultMessage(id=r.id, tool_name=r.name, text="sunny")
                    for r in first.ai_message.tool_execution_requests)

    await model.chat(ChatRequest(messages=(UserMessage(text="Paris and Rome?"),
                                           first.ai_message, *results)))

    sent = replay.bodies[1]["input"]
    assert [i.get("type") for i in sent] == [None, "reasoning", "message", "function_call",
                                             "function_call", "function_call_output",
                                             "function_call_output"]
    assert sent[1] == {"type": "reasoning", "id": received[0]["id"],
                       "summary": received[0]["summary"],
                       "encrypted_content": received[0]["encrypted_content"]}
    assert [i["id"] for i in sent[2:5]] == [i["id"] for i in received[1:4]]
    assert received[4] == {"type": "response", "id": first.response_id}
    assert [(i["call_id"], i["arguments"]) for i in sent[3:5]] == [
        ("call_p", '{"city":"Paris"}'), ("call_r", '{"city":"Rome"}')]


async def test_a_reasoning_item_without_encrypted_content_is_left_out_with_the_ids() -> None:
    replay = Replay([fake_response(Reply(calls=CALLS[:1], finish="tool_calls"),
                                   encrypted=False),
                     fake_response(Reply(text="Done."))], validate_responses_body)
    model = model_with(replay)
    first = await model.chat(ChatRequest(messages=(UserMessage(text="Paris?"),)))
    result = ToolExecutionResultMessage(id="call_p", tool_name="get_weather", text="sunny")

    await model.chat(ChatRequest(messages=(UserMessage(text="Paris?"), first.ai_message,
                                           result)))

    assert replay.bodies[1]["input"][1:] == [
        {"type": "function_call", "call_id": "call_p", "name": "get_weather",
         "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "call_p", "output": "sunny"}]


async def test_an_edited_call_replaces_the_received_one_in_its_place() -> None:
    replay = Replay([fake_response(Reply(calls=CALLS[:1], finish="tool_calls")),
                     fake_response(Reply(text="Done."))], validate_responses_body)
    model = model_with(replay)
    first = await model.chat(ChatRequest(messages=(UserMessage(text="Paris?"),)))
    edited = first.ai_message.model_copy(update={"tool_execution_requests": (
        ToolExecutionRequest(id="call_p", name="get_weather", arguments='{"city":"Lyon"}'),)})
    result = ToolExecutionResultMessage(id="call_p", tool_name="get_weather", text="rain")

    await model.chat(ChatRequest(messages=(UserMessage(text="Paris?"), edited, result)))

    call = replay.bodies[1]["input"][2]
    assert (call["type"], call["arguments"], call["id"]) == (
        "function_call", '{"city":"Lyon"}', first.ai_message.provider_blocks[1]["id"])


async def test_anthropic_never_sends_responses_items_as_its_own_blocks() -> None:
    replay = Replay([fake_response(Reply(text="Hi.", calls=CALLS[:1], finish="tool_calls"))])
    first = await model_with(replay).chat(ChatRequest(messages=(UserMessage(text="Paris?"),)))
    from .wire import anthropic_message

    anthropic = Replay([json_response(200, anthropic_message(text="ok"))],
                       validate_anthropic_body)
    await AnthropicChatModel(model="claude-sonnet-4-5", api_key="k",
                             transport=anthropic.transport).chat(ChatRequest(messages=(
        UserMessage(text="Paris?"), first.ai_message,
        ToolExecutionResultMessage(id="call_p", tool_name="get_weather", text="sunny"))))

    assistant = anthropic.bodies[0]["messages"][1]["content"]
    assert [b["type"] for b in assistant] == ["text", "tool_use"]


# -- responses ---------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_it_reads_parallel_calls_text_reasoning_and_usage(stream: bool) -> None:
    reply = Reply(text="Checking both.", calls=CALLS, finish="tool_calls", input_tokens=30,
                  output_tokens=12)
    replay = Replay([fake_response(reply, stream=stream)], validate_responses_body)

    with captured_events() as events:
        response = await model_with(replay, stream=stream).chat(
            ChatRequest(messages=(UserMessage(text="Paris and Rome?"),)))

    message = response.ai_message
    assert [(r.id, r.name, r.arguments) for r in message.tool_execution_requests] == [
        ("call_p", "get_weather", '{"city":"Paris"}'), ("call_r", "get_weather",
                                                        '{"city":"Rome"}')]
    assert (message.text, message.thinking) == ("Checking both.", "Deciding what to answer.")
    assert [b["type"] for b in message.provider_blocks] == [
        "reasoning", "message", "function_call", "function_call", "response"]
    assert response.finish_reason is FinishReason.TOOL_EXECUTION
    assert response.usage == TokenUsage(input_tokens=30, output_tokens=12, total_tokens=42,
                                        cached_input_tokens=0)
    assert response.response_id
    assert response.response_id.startswith("resp_")
    fragments = [e for e in events if isinstance(e, PartialToolCall)]
    texts = "".join(e.delta for e in events if isinstance(e, PartialText))
    if stream:
        assert [(f.index, f.id, f.name) for f in fragments if f.name] == [
            (0, "call_p", "get_weather"), (1, "call_r", "get_weather")]
        assert "".join(f.arguments_delta for f in fragments if f.index == 1) == \
            '{"city":"Rome"}'
        assert texts == "Checking both."
    else:
        assert fragments == []
        assert texts == ""


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_a_response_cut_off_in_a_call_is_an_error(stream: bool) -> None:
    reply = Reply(calls=CALLS[:1], finish="length")
    replay = Replay([fake_response(reply, stream=stream)])

    with pytest.raises(ProviderError, match="cut off") as caught:
        await model_with(replay, stream=stream).chat(
            ChatRequest(messages=(UserMessage(text="Paris?"),)))

    assert caught.value.error_type == "truncated_tool_call"


async def test_a_cut_off_answer_is_a_length_finish() -> None:
    replay = Replay([fake_response(Reply(text="The weather is", finish="length"))])

    response = await model_with(replay).chat(ChatRequest(messages=(UserMessage(text="?"),)))

    assert (response.finish_reason, response.ai_message.text) == (
        FinishReason.LENGTH, "The weather is")


@pytest.mark.parametrize("event", [
    {"type": "error", "code": "server_error", "message": "The server had an error",
     "param": None, "sequence_number": 3},
    {"type": "response.failed", "sequence_number": 3, "response": {
        "id": "resp_1", "object": "response", "status": "failed", "output": [],
        "error": {"code": "server_error", "message": "The server had an error"}}},
], ids=["error", "response.failed"])
async def test_a_failure_in_the_stream_raises_with_its_code(event: dict[str, Any]) -> None:
    text = fake_response(Reply(calls=CALLS[:1], finish="tool_calls"), stream=True)
    events = text.content.decode().split("\n\n")[:3]
    body = "\n\n".join([*events, f"event: {event['type']}\ndata: {json.dumps(event)}", ""])
    replay = Replay([sse_response(body)])

    with pytest.raises(ProviderError, match="The server had an error") as caught:
        await model_with(replay, stream=True).chat(ChatRequest(messages=(
            UserMessage(text="?"),)))

    assert caught.value.code == "server_error"


async def test_a_stream_that_ends_before_completion_is_an_error() -> None:
    text = fake_response(Reply(calls=CALLS[:1], finish="tool_calls"), stream=True)
    body = "\n\n".join(text.content.decode().split("\n\n")[:-2]) + "\n\n"
    replay = Replay([sse_response(body)])

    with pytest.raises(ProviderError, match=r"before response\.completed"):
        await model_with(replay, stream=True).chat(ChatRequest(messages=(
            UserMessage(text="?"),)))


async def test_a_failed_response_body_is_an_error() -> None:
    failed = {"id": "resp_1", "object": "response", "status": "failed", "output": [],
              "error": {"code": "rate_limit_exceeded", "message": "Slow down"}}
    replay = Replay([json_response(200, failed)])

    with pytest.raises(ProviderError, match="Slow down"):
        await model_with(replay).chat(ChatRequest(messages=(UserMessage(text="?"),)))
