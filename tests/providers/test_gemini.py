"""GeminiChatModel against responses built from the documented generateContent shapes
(no public recording of the native Gemini API is in the fixtures)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tools_app.engine import (
    AiMessage,
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
from tools_app.engine.providers.gemini import GeminiChatModel

from .support import (
    Replay,
    captured_events,
    json_response,
    of_kind,
    sse_response,
    validate_gemini_body,
)
from .wire import gemini_response, gemini_sse

WEATHER = ToolSpecification(
    name="get_weather", description="Weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}},
                "required": ["city"], "additionalProperties": False})
QUESTION = (SystemMessage(text="Be brief."), UserMessage(text="Weather in Paris and Rome?"))


def model(replay: Replay, **overrides: Any) -> GeminiChatModel:
    return GeminiChatModel(model="gemini-2.5-flash", api_key="AIza-test",
                           transport=replay.transport, **overrides)


def two_calls(**kwargs: Any) -> dict[str, Any]:
    return gemini_response(calls=[("get_weather", {"city": "Paris"}),
                                  ("get_weather", {"city": "Rome"})],
                           response_id="resp-42", signature="c2lnbmF0dXJl", **kwargs)


async def test_it_posts_to_generate_content_with_the_key_in_a_header() -> None:
    replay = Replay([json_response(200, gemini_response(text="Hi"))], validate_gemini_body)

    await model(replay).chat(ChatRequest(messages=QUESTION))

    request = replay.requests[0]
    assert str(request.url) == ("https://generativelanguage.googleapis.com/v1beta/models/"
                                "gemini-2.5-flash:generateContent")
    assert request.headers["x-goog-api-key"] == "AIza-test"
    assert "key=" not in str(request.url)
    assert "authorization" not in request.headers


async def test_it_streams_from_stream_generate_content_with_alt_sse() -> None:
    replay = Replay([sse_response(gemini_sse(text="Sunny everywhere."))], validate_gemini_body)

    response = await model(replay, stream=True).chat(ChatRequest(messages=QUESTION))

    assert replay.requests[0].url.path.endswith("models/gemini-2.5-flash:streamGenerateContent")
    assert replay.requests[0].url.params["alt"] == "sse"
    assert response.ai_message.text == "Sunny everywhere."
    assert response.finish_reason is FinishReason.STOP


async def test_the_request_has_system_instruction_tools_and_generation_config() -> None:
    replay = Replay([json_response(200, gemini_response(text="Hi"))], validate_gemini_body)
    parameters = ChatRequestParameters(tools=(WEATHER,), tool_choice="required",
                                       temperature=0.2, top_p=0.9, max_output_tokens=256,
                                       stop_sequences=("END",))

    await model(replay).chat(ChatRequest(messages=QUESTION, parameters=parameters))

    assert replay.bodies[0] == {
        "contents": [{"role": "user", "parts": [{"text": "Weather in Paris and Rome?"}]}],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "tools": [{"functionDeclarations": [{
            "name": "get_weather", "description": "Weather for a city.",
            "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}},
                           "required": ["city"]}}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
        "generationConfig": {"temperature": 0.2, "topP": 0.9, "maxOutputTokens": 256,
                             "stopSequences": ["END"]},
    }


@pytest.mark.parametrize(("choice", "config"), [
    ("auto", {"mode": "AUTO"}),
    ("required", {"mode": "ANY"}),
    ("none", {"mode": "NONE"}),
    (NamedToolChoice(name="get_weather"), {"mode": "ANY",
                                          "allowedFunctionNames": ["get_weather"]}),
])
async def test_tool_choice_maps_to_function_calling_config(choice: ToolChoice,
                                                           config: dict[str, Any]) -> None:
    replay = Replay([json_response(200, gemini_response(text="ok"))], validate_gemini_body)
    parameters = ChatRequestParameters(tools=(WEATHER,), tool_choice=choice)

    await model(replay).chat(ChatRequest(messages=QUESTION, parameters=parameters))

    assert replay.bodies[0]["toolConfig"] == {"functionCallingConfig": config}


async def test_function_calls_get_stable_ids_from_the_response_id() -> None:
    replay = Replay([json_response(200, two_calls()), json_response(200, two_calls())])

    first = await model(replay).chat(ChatRequest(messages=QUESTION))
    again = await model(replay).chat(ChatRequest(messages=QUESTION))

    assert [(r.id, r.name, r.arguments) for r in first.ai_message.tool_execution_requests] == [
        ("call_resp-42_0", "get_weather", '{"city":"Paris"}'),
        ("call_resp-42_1", "get_weather", '{"city":"Rome"}')]
    assert first.ai_message.tool_execution_requests == again.ai_message.tool_execution_requests
    assert first.finish_reason is FinishReason.TOOL_EXECUTION
    assert first.usage == TokenUsage(input_tokens=10, output_tokens=5, total_tokens=15)
    assert (first.model_name, first.response_id) == ("gemini-test", "resp-42")


async def test_results_go_back_as_one_user_turn_with_the_parts_sent_back_verbatim() -> None:
    replay = Replay([json_response(200, two_calls()),
                     json_response(200, gemini_response(text="Sunny, rainy."))],
                    validate_gemini_body)
    gemini = model(replay)
    first = await gemini.chat(ChatRequest(messages=QUESTION))
    paris, rome = first.ai_message.tool_execution_requests

    await gemini.chat(ChatRequest(messages=(
        *QUESTION, first.ai_message,
        ToolExecutionResultMessage(id=paris.id, tool_name=paris.name, text="sunny"),
        ToolExecutionResultMessage(id=rome.id, tool_name=rome.name, text="boom", is_error=True),
    )))

    contents = replay.bodies[1]["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    assert contents[1]["parts"] == two_calls()["candidates"][0]["content"]["parts"]
    assert contents[1]["parts"][0]["thoughtSignature"] == "c2lnbmF0dXJl"
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "get_weather", "response": {"output": "sunny"}}},
        {"functionResponse": {"name": "get_weather", "response": {"error": "boom"}}}]


async def test_an_id_gemini_sent_is_kept_and_echoed_in_the_function_response() -> None:
    body = gemini_response(calls=[("get_weather", {"city": "Oslo"})])
    body["candidates"][0]["content"]["parts"][0]["functionCall"]["id"] = "fc-native-1"
    replay = Replay([json_response(200, body), json_response(200, gemini_response(text="ok"))],
                    validate_gemini_body)
    gemini = model(replay)

    first = await gemini.chat(ChatRequest(messages=QUESTION))
    call = first.ai_message.tool_execution_requests[0]
    await gemini.chat(ChatRequest(messages=(*QUESTION, first.ai_message,
                                            ToolExecutionResultMessage(
                                                id=call.id, tool_name=call.name, text="cold"))))

    assert call.id == "fc-native-1"
    response_part = replay.bodies[1]["contents"][2]["parts"][0]["functionResponse"]
    assert response_part["id"] == "fc-native-1"


async def test_a_streamed_response_is_folded_into_one_answer() -> None:
    sse = gemini_sse(text="Checking both cities.",
                     calls=[("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})],
                     usage=(20, 8), response_id="resp-s")
    replay = Replay([sse_response(sse)], validate_gemini_body)

    with captured_events() as events:
        response = await model(replay, stream=True).chat(ChatRequest(messages=QUESTION))

    assert response.ai_message.text == "Checking both cities."
    assert [(r.id, r.arguments) for r in response.ai_message.tool_execution_requests] == [
        ("call_resp-s_0", '{"city":"Paris"}'), ("call_resp-s_1", '{"city":"Rome"}')]
    assert response.usage == TokenUsage(input_tokens=20, output_tokens=8, total_tokens=28)
    assert response.ai_message.provider_blocks == (
        {"text": "Checking both cities."},
        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
        {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}})
    assert "".join(e.delta for e in of_kind(events, "partial_text")) == "Checking both cities."
    assert [e.name for e in of_kind(events, "partial_tool_call")] == ["get_weather"] * 2


async def test_thoughts_are_kept_apart_from_the_answer() -> None:
    body = gemini_response(text="Answer.")
    body["candidates"][0]["content"]["parts"].insert(0, {"text": "Let me think.",
                                                         "thought": True})
    body["usageMetadata"]["thoughtsTokenCount"] = 7
    replay = Replay([json_response(200, body)])

    response = await model(replay).chat(ChatRequest(messages=QUESTION))

    assert (response.ai_message.text, response.ai_message.thinking) == ("Answer.",
                                                                        "Let me think.")
    assert response.usage == TokenUsage(input_tokens=10, output_tokens=12, total_tokens=15)


@pytest.mark.parametrize(("reason", "expected"), [
    ("STOP", FinishReason.STOP), ("MAX_TOKENS", FinishReason.LENGTH),
    ("SAFETY", FinishReason.CONTENT_FILTER), ("RECITATION", FinishReason.CONTENT_FILTER),
    ("PROHIBITED_CONTENT", FinishReason.CONTENT_FILTER),
    ("MALFORMED_FUNCTION_CALL", FinishReason.OTHER), ("OTHER", FinishReason.OTHER),
])
async def test_finish_reasons_are_mapped(reason: str, expected: FinishReason) -> None:
    replay = Replay([json_response(200, gemini_response(text="x", finish=reason))])

    response = await model(replay).chat(ChatRequest(messages=QUESTION))

    assert response.finish_reason is expected


async def test_a_blocked_prompt_is_a_content_filter_answer_without_text() -> None:
    replay = Replay([json_response(200, {"promptFeedback": {"blockReason": "SAFETY"},
                                         "usageMetadata": {"promptTokenCount": 4,
                                                           "totalTokenCount": 4}})])

    response = await model(replay).chat(ChatRequest(messages=QUESTION))

    assert response.finish_reason is FinishReason.CONTENT_FILTER
    assert response.ai_message.text is None
    assert not response.ai_message.tool_execution_requests


async def test_function_calls_cut_at_max_tokens_are_refused() -> None:
    replay = Replay([json_response(200, two_calls(finish="MAX_TOKENS"))])

    with pytest.raises(ProviderError) as caught:
        await model(replay).chat(ChatRequest(messages=QUESTION))

    assert "finishReason MAX_TOKENS" in str(caught.value)
    assert "not executed" in str(caught.value)


async def test_an_error_body_maps_to_provider_error() -> None:
    error = {"error": {"code": 400, "message": "Invalid JSON payload received.",
                       "status": "INVALID_ARGUMENT"}}
    replay = Replay([json_response(400, error)])

    with pytest.raises(ProviderError) as caught:
        await model(replay).chat(ChatRequest(messages=QUESTION))

    assert (caught.value.status, caught.value.error_type, caught.value.code) == (
        400, "INVALID_ARGUMENT", "400")
    assert str(caught.value) == (
        "gemini: HTTP 400 INVALID_ARGUMENT: Invalid JSON payload received. (code 400)")


def test_messages_from_another_provider_are_rebuilt_as_gemini_parts() -> None:
    from tools_app.engine.providers.gemini import map_contents

    scripted = AiMessage(text="On it.", tool_execution_requests=(
        ToolExecutionRequest(id="call_0_0", name="get_weather", arguments='{"city": "Oslo"}'),))

    assert map_contents([UserMessage(text="Oslo?"), scripted]) == [
        {"role": "user", "parts": [{"text": "Oslo?"}]},
        {"role": "model", "parts": [{"text": "On it."},
                                    {"functionCall": {"name": "get_weather",
                                                      "args": {"city": "Oslo"}}}]}]
    assert json.loads(scripted.tool_execution_requests[0].arguments) == {"city": "Oslo"}
