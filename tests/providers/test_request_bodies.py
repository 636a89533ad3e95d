"""The requests each adapter writes, checked against the official SDKs' request types
(OpenAI CompletionCreateParams*, Anthropic MessageCreateParams*, unknown keys refused)
and against Gemini's documented GenerateContentRequest."""

from __future__ import annotations

from typing import Any

import pytest

from tools_app.engine import (
    AiMessage,
    ChatRequest,
    ChatRequestParameters,
    NamedToolChoice,
    ToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from tools_app.engine.providers.anthropic import AnthropicChatModel
from tools_app.engine.providers.gemini import GeminiChatModel
from tools_app.engine.providers.openai import OpenAIChatModel, OpenAICompatibleChatModel

from .bodies import CONVERSATION, WEATHER, anthropic_body, openai_body
from .support import (
    Replay,
    json_response,
    validate_gemini_body,
    validate_openai_body,
)
from .wire import anthropic_message, gemini_response, openai_completion

FULL = ChatRequestParameters(
    tools=(WEATHER,), tool_choice="auto", parallel_tool_calls=False, temperature=0.3,
    top_p=0.8, max_output_tokens=512, stop_sequences=("STOP",))


# -- OpenAI ------------------------------------------------------------------------------


async def test_openai_writes_every_message_kind_and_parameter() -> None:
    body = await openai_body(FULL)

    assert body == {
        "model": "gpt-4o", "stream": False,
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": "Checking both.", "tool_calls": [
                {"id": "call_a", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                {"id": "call_b", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
            {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
            {"role": "tool", "tool_call_id": "call_b", "content": "no such city"},
            {"role": "assistant", "content": "Paris is sunny; Rome failed."},
            {"role": "user", "content": "Thanks!"}],
        "tools": [{"type": "function", "function": {
            "name": "get_weather", "description": "Current weather for a city.",
            "parameters": WEATHER.parameters, "strict": True}}],
        "tool_choice": "auto", "parallel_tool_calls": False,
        "max_completion_tokens": 512, "temperature": 0.3, "top_p": 0.8, "stop": ["STOP"]}


@pytest.mark.parametrize(("choice", "wire"), [
    ("auto", "auto"), ("required", "required"), ("none", "none"),
    (NamedToolChoice(name="get_weather"),
     {"type": "function", "function": {"name": "get_weather"}}),
])
async def test_openai_tool_choice_forms(choice: ToolChoice, wire: Any) -> None:
    body = await openai_body(ChatRequestParameters(tools=(WEATHER,), tool_choice=choice))

    assert body["tool_choice"] == wire


async def test_openai_streaming_asks_for_usage() -> None:
    body = await openai_body(ChatRequestParameters(), stream=True)

    assert (body["stream"], body["stream_options"]) == (True, {"include_usage": True})


async def test_compatible_servers_get_max_tokens_and_openai_max_completion_tokens() -> None:
    parameters = ChatRequestParameters(max_output_tokens=100)

    assert (await openai_body(parameters))["max_completion_tokens"] == 100
    assert (await openai_body(parameters, compatible=True))["max_tokens"] == 100
    body = await openai_body(parameters, max_tokens_field="max_tokens")
    assert body["max_tokens"] == 100
    assert "max_completion_tokens" not in body


async def test_tool_settings_are_left_out_without_tools() -> None:
    body = await openai_body(ChatRequestParameters(tool_choice="none", parallel_tool_calls=True))

    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(body)


async def test_custom_parameters_are_merged_last_and_model_can_be_overridden() -> None:
    parameters = ChatRequestParameters(model_name="gpt-4.1", temperature=1.0,
                                       custom={"seed": 7, "temperature": 0.0,
                                               "reasoning_effort": "low"})

    body = await openai_body(parameters)

    assert (body["model"], body["seed"], body["temperature"], body["reasoning_effort"]) == (
        "gpt-4.1", 7, 0.0, "low")


async def test_default_parameters_of_the_model_are_overridden_by_the_request() -> None:
    defaults = ChatRequestParameters(temperature=0.1, max_output_tokens=64)

    body = await openai_body(ChatRequestParameters(temperature=0.9), parameters=defaults)

    assert (body["temperature"], body["max_completion_tokens"]) == (0.9, 64)


async def test_openai_headers() -> None:
    replay = Replay([json_response(200, openai_completion(text="ok"))])
    model = OpenAIChatModel(model="gpt-4o", api_key="sk-x", extra_headers={"OpenAI-Project": "p"},
                            transport=replay.transport)

    await model.chat(ChatRequest(messages=(UserMessage(text="hi"),)))

    request = replay.requests[0]
    assert str(request.url) == "https://api.openai.com/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-x"
    assert request.headers["openai-project"] == "p"


async def test_a_compatible_server_without_a_key_gets_no_authorization_header() -> None:
    replay = Replay([json_response(200, openai_completion(text="ok"))], validate_openai_body)
    model = OpenAICompatibleChatModel(base_url="http://127.0.0.1:11434/v1", model="llama3.2",
                                      transport=replay.transport)

    await model.chat(ChatRequest(messages=(UserMessage(text="hi"),)))

    assert str(replay.requests[0].url) == "http://127.0.0.1:11434/v1/chat/completions"
    assert "authorization" not in replay.requests[0].headers


# -- Anthropic ---------------------------------------------------------------------------


async def test_anthropic_writes_system_tools_and_one_user_message_per_round() -> None:
    body = await anthropic_body(ChatRequestParameters(
        tools=(WEATHER,), tool_choice="required", max_output_tokens=1000,
        stop_sequences=("STOP",)))

    assert body == {
        "model": "claude-sonnet-4-5", "max_tokens": 1000, "stream": False,
        "system": "You are terse.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking both."},
                {"type": "tool_use", "id": "call_a", "name": "get_weather",
                 "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "call_b", "name": "get_weather",
                 "input": {"city": "Rome"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_a", "content": "sunny",
                 "is_error": False},
                {"type": "tool_result", "tool_use_id": "call_b", "content": "no such city",
                 "is_error": True}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Paris is sunny; Rome failed."}]},
            {"role": "user", "content": [{"type": "text", "text": "Thanks!"}]}],
        "tools": [{"name": "get_weather", "description": "Current weather for a city.",
                   "input_schema": WEATHER.parameters, "strict": True}],
        "tool_choice": {"type": "any"}, "stop_sequences": ["STOP"]}


@pytest.mark.parametrize(("choice", "parallel", "wire"), [
    ("auto", None, {"type": "auto"}),
    ("required", None, {"type": "any"}),
    ("none", None, {"type": "none"}),
    (NamedToolChoice(name="get_weather"), None, {"type": "tool", "name": "get_weather"}),
    ("auto", False, {"type": "auto", "disable_parallel_tool_use": True}),
    (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
    (NamedToolChoice(name="get_weather"), False,
     {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}),
    (None, None, None),
])
async def test_anthropic_tool_choice_forms(choice: ToolChoice | None, parallel: bool | None,
                                           wire: Any) -> None:
    body = await anthropic_body(ChatRequestParameters(tools=(WEATHER,), tool_choice=choice,
                                                      parallel_tool_calls=parallel))

    assert body.get("tool_choice") == wire


async def test_anthropic_always_sends_max_tokens() -> None:
    assert (await anthropic_body(ChatRequestParameters()))["max_tokens"] == 4096
    body = await anthropic_body(ChatRequestParameters(), default_max_tokens=1234)
    assert body["max_tokens"] == 1234


async def test_anthropic_sampling_parameters_pass_through_when_set() -> None:
    # The installed SDK's types no longer list them; the real API still took them when
    # the llm-anthropic recordings were made, so a value the user set is sent as is.
    body = await anthropic_body(ChatRequestParameters(temperature=1.0, top_p=0.5))

    assert (body["temperature"], body["top_p"]) == (1.0, 0.5)


async def test_anthropic_custom_parameters_enable_thinking() -> None:
    thinking = {"type": "enabled", "budget_tokens": 2048}

    body = await anthropic_body(ChatRequestParameters(custom={"thinking": thinking}),
                                stream=True)

    assert body["thinking"] == thinking
    assert body["stream"] is True


async def test_anthropic_headers() -> None:
    replay = Replay([json_response(200, anthropic_message(text="ok"))])
    model = AnthropicChatModel(model="claude-sonnet-4-5", api_key="sk-ant-x",
                               extra_headers={"anthropic-beta": "tools-2025"},
                               transport=replay.transport)

    await model.chat(ChatRequest(messages=(UserMessage(text="hi"),)))

    request = replay.requests[0]
    assert str(request.url) == "https://api.anthropic.com/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant-x"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["anthropic-beta"] == "tools-2025"
    assert "authorization" not in request.headers


async def test_an_edited_tool_request_replaces_the_received_tool_use_block() -> None:
    received = AiMessage(
        tool_execution_requests=(ToolExecutionRequest(id="toolu_1", name="get_weather",
                                                      arguments='{"city": "Oslo"}'),),
        thinking="Need weather.",
        provider_blocks=({"type": "thinking", "thinking": "Need weather.", "signature": "sig"},
                         {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                          "input": {"city": "Olso"}, "caller": {"type": "direct"}}))

    body = await anthropic_body(ChatRequestParameters(), (
        UserMessage(text="Oslo?"), received,
        ToolExecutionResultMessage(id="toolu_1", tool_name="get_weather", text="cold")))

    assert body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "Need weather.", "signature": "sig"},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"},
         "caller": {"type": "direct"}}]


# -- Gemini ------------------------------------------------------------------------------


async def test_gemini_writes_a_documented_generate_content_request() -> None:
    replay = Replay([json_response(200, gemini_response(text="ok"))], validate_gemini_body)
    model = GeminiChatModel(model="gemini-2.5-pro", api_key="k", transport=replay.transport)

    await model.chat(ChatRequest(messages=CONVERSATION, parameters=FULL))

    body = replay.bodies[0]
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user", "model", "user"]
    assert body["contents"][2]["parts"] == [
        {"functionResponse": {"name": "get_weather", "response": {"output": "sunny"}}},
        {"functionResponse": {"name": "get_weather", "response": {"error": "no such city"}}}]
    assert body["contents"][4]["parts"] == [{"text": "Thanks!"}]
    assert body["systemInstruction"] == {"parts": [{"text": "You are terse."}]}
    assert body["generationConfig"] == {"temperature": 0.3, "topP": 0.8,
                                        "maxOutputTokens": 512, "stopSequences": ["STOP"]}
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}
