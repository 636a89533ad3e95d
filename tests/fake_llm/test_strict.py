"""Strict mode (the default): the requests the real APIs refuse get each provider's 400.

One test per refused case per wire (status, error shape, message), the lenient switch
letting every one of them through, the refusal in the request log and in the engine as
a non-retryable ProviderError, and the recorded real traffic accepted as it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tools_app.engine import ChatRequest, ProviderError, UserMessage
from tools_app.engine.messages import AiMessage, ToolExecutionRequest, ToolExecutionResultMessage
from tools_app.engine.providers import chat_model_class
from tools_app.engine.providers.http.retry import RetryPolicy
from tools_app.fake_llm import BackgroundServer
from tools_app.fake_llm.wires.anthropic import check_request as anthropic_check
from tools_app.fake_llm.wires.openai import check_request as openai_check
from tools_app.fake_llm.wires.responses_check import check_request as responses_check

from .support import anthropic_body, gemini_body, openai_body, recorded, set_script, sse_json

TRAFFIC = Path(__file__).resolve().parents[1] / "fixtures" / "provider-traffic" / "normalized"
OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"
GEMINI_PATH = "/v1beta/models/gemini-fake:generateContent"

USER = {"role": "user", "content": "Weather in Paris?"}
OPENAI_CALLS = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_a", "type": "function",
     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
    {"id": "call_b", "type": "function",
     "function": {"name": "get_weather", "arguments": '{"city": "Lima"}'}}]}
ANTHROPIC_USES = {"role": "assistant", "content": [
    {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"city": "Paris"}},
    {"type": "tool_use", "id": "toolu_b", "name": "get_weather", "input": {"city": "Lima"}}]}
GEMINI_USER = {"role": "user", "parts": [{"text": "Weather in Paris?"}]}
GEMINI_CALLS = {"role": "model", "parts": [
    {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
    {"functionCall": {"name": "get_weather", "args": {"city": "Lima"}}}]}


def _tool(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "Sunny"}


def _result(use_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": use_id, "content": "Sunny"}


def _response(name: str = "get_weather") -> dict[str, Any]:
    return {"functionResponse": {"name": name, "response": {"output": "Sunny"}}}


# (path, body, expected message, extra expected fields of the error object)
OPENAI_CASES: dict[str, tuple[dict[str, Any], str, dict[str, Any]]] = {
    "tool_without_call": (
        openai_body([USER, _tool("call_a")]),
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
        "message with 'tool_calls'.",
        {"param": "messages.[1].role", "code": None}),
    "tool_id_matches_no_call": (
        openai_body([USER, OPENAI_CALLS, _tool("call_a"), _tool("call_x")]),
        "Invalid parameter: 'tool_call_id' of 'call_x' not found in 'tool_calls' of previous "
        "message.",
        {"param": "messages.[3].tool_call_id", "code": None}),
    "calls_unanswered_before_user": (
        openai_body([USER, OPENAI_CALLS, _tool("call_a"), USER]),
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        "call_b",
        {"param": "messages.[1].role", "code": None}),
    "calls_unanswered_at_the_end": (
        openai_body([USER, OPENAI_CALLS]),
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        "call_a, call_b",
        {"param": "messages.[1].role", "code": None}),
    "unknown_field": (
        openai_body(foo=1),
        "Unrecognized request argument supplied: foo",
        {"param": None, "code": None}),
    "empty_content_array": (
        openai_body([{"role": "user", "content": []}]),
        "Invalid 'messages[0].content': empty array. Expected an array with minimum length 1, "
        "but got an empty array instead.",
        {"param": "messages[0].content", "code": "empty_array"}),
    "null_user_content": (
        openai_body([{"role": "user", "content": None}]),
        "Invalid value for 'content': expected a string, got null.",
        {"param": "messages.[0].content", "code": None}),
}

ANTHROPIC_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "result_without_tool_use": (
        anthropic_body([USER, {"role": "assistant", "content": "Hi"},
                        {"role": "user", "content": [_result("toolu_x")]}]),
        "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
        "toolu_x. Each `tool_result` block must have a corresponding `tool_use` block in the "
        "previous message."),
    "result_id_matches_no_tool_use": (
        anthropic_body([USER, ANTHROPIC_USES,
                        {"role": "user", "content": [_result("toolu_a"), _result("toolu_b"),
                                                     _result("toolu_x")]}]),
        "messages.2.content.2: unexpected `tool_use_id` found in `tool_result` blocks: "
        "toolu_x. Each `tool_result` block must have a corresponding `tool_use` block in the "
        "previous message."),
    "tool_use_unanswered": (
        anthropic_body([USER, ANTHROPIC_USES,
                        {"role": "user", "content": [_result("toolu_a"),
                                                     {"type": "text", "text": "and?"}]}]),
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
        "toolu_b. Each `tool_use` block must have a corresponding `tool_result` block in the "
        "next message."),
    "unknown_field": (
        anthropic_body(foo=1),
        "foo: Extra inputs are not permitted"),
    "empty_text_block": (
        anthropic_body([{"role": "user", "content": [{"type": "text", "text": ""}]}]),
        "messages.0.content.0.text: text content blocks must be non-empty"),
    "empty_content": (
        anthropic_body([{"role": "user", "content": ""}]),
        "messages.0: all messages must have non-empty content except for the optional final "
        "assistant message"),
}

GEMINI_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "response_without_call": (
        gemini_body([GEMINI_USER, {"role": "model", "parts": [{"text": "Hi"}]},
                     {"role": "user", "parts": [_response()]}]),
        "Please ensure that function response turn comes immediately after a function call "
        "turn."),
    "responses_match_no_call": (
        gemini_body([GEMINI_USER, GEMINI_CALLS,
                     {"role": "user", "parts": [_response(), _response(), _response()]}]),
        "Please ensure that the number of function response parts is equal to the number of "
        "function call parts of the function call turn."),
    "calls_unanswered_before_user": (
        gemini_body([GEMINI_USER, GEMINI_CALLS, GEMINI_USER]),
        "Please ensure that the number of function response parts is equal to the number of "
        "function call parts of the function call turn."),
    "call_turn_first": (
        gemini_body([GEMINI_CALLS, {"role": "user", "parts": [_response(), _response()]}]),
        "Please ensure that function call turn comes immediately after a user turn or after a "
        "function response turn."),
    "unknown_field": (
        gemini_body(foo=1),
        'Invalid JSON payload received. Unknown name "foo": Cannot find field.'),
    "empty_parts": (
        gemini_body([{"role": "user", "parts": []}]),
        "* GenerateContentRequest.contents[0].parts: contents.parts must not be empty.\n"),
    "empty_text_part": (
        gemini_body([GEMINI_USER, {"role": "model", "parts": [{"text": ""}]}, GEMINI_USER]),
        "* GenerateContentRequest.contents[1].parts[0].data: required oneof field 'data' must "
        "have one initialized field\n"),
}

ALL_CASES = ([(OPENAI_PATH, body) for body, _, _ in OPENAI_CASES.values()]
             + [(ANTHROPIC_PATH, body) for body, _ in ANTHROPIC_CASES.values()]
             + [(GEMINI_PATH, body) for body, _ in GEMINI_CASES.values()])


@pytest.mark.parametrize("case", OPENAI_CASES)
def test_openai_refusals(fake: httpx.Client, case: str) -> None:
    body, message, fields = OPENAI_CASES[case]

    response = fake.post(OPENAI_PATH, json=body)

    assert response.status_code == 400
    assert response.headers["x-request-id"].startswith("req_")
    assert response.json() == {"error": {"message": message, "type": "invalid_request_error",
                                         **fields}}


@pytest.mark.parametrize("case", ANTHROPIC_CASES)
def test_anthropic_refusals(fake: httpx.Client, case: str) -> None:
    body, message = ANTHROPIC_CASES[case]

    response = fake.post(ANTHROPIC_PATH, json=body)

    assert response.status_code == 400
    error = response.json()
    assert error["request_id"].startswith("req_")
    assert error == {"type": "error", "request_id": error["request_id"],
                     "error": {"type": "invalid_request_error", "message": message}}


@pytest.mark.parametrize("case", GEMINI_CASES)
def test_gemini_refusals(fake: httpx.Client, case: str) -> None:
    body, message = GEMINI_CASES[case]

    response = fake.post(GEMINI_PATH, json=body)

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["message"], error["status"]) == (400, message,
                                                                  "INVALID_ARGUMENT")
    if case == "unknown_field":
        assert error["details"] == [{"@type": "type.googleapis.com/google.rpc.BadRequest",
                                     "fieldViolations": [{"description": message}]}]
    else:
        assert set(error) == {"code", "message", "status"}


ACCEPTED: dict[str, tuple[str, dict[str, Any]]] = {
    "openai_answered_round_with_null_content": (OPENAI_PATH, openai_body(
        [{"role": "system", "content": "Be brief."}, USER, OPENAI_CALLS, _tool("call_b"),
         _tool("call_a"), {"role": "assistant", "content": "Sunny."}, USER],
        tool_choice="auto", parallel_tool_calls=True, stream_options={"include_usage": True},
        max_completion_tokens=50, temperature=0.2)),
    "openai_empty_string_content": (OPENAI_PATH, openai_body(
        [{"role": "user", "content": ""}])),
    "anthropic_answered_round_then_text": (ANTHROPIC_PATH, anthropic_body(
        [USER, ANTHROPIC_USES,
         {"role": "user", "content": [_result("toolu_b"), _result("toolu_a"),
                                      {"type": "text", "text": "and?"}]}],
        system="Be brief.", temperature=0.2, top_k=5, tool_choice={"type": "auto"},
        thinking={"type": "disabled"})),
    "anthropic_whitespace_text_and_prefill": (ANTHROPIC_PATH, anthropic_body(
        [USER, {"role": "assistant", "content": [{"type": "text", "text": " "}]}, USER,
         {"role": "assistant", "content": ""}])),
    "gemini_answered_round_snake_case": (GEMINI_PATH, gemini_body(
        [GEMINI_USER, GEMINI_CALLS, {"role": "user", "parts": [_response(), _response()]},
         {"role": "model", "parts": [{"text": "", "thoughtSignature": "c2ln"},
                                     {"text": "Sunny."}]}, GEMINI_USER],
        system_instruction={"parts": [{"text": "Be brief."}]},
        generation_config={"temperature": 0.2},
        tool_config={"function_calling_config": {"mode": "AUTO"}})),
}


@pytest.mark.parametrize("case", ACCEPTED)
def test_valid_requests_are_accepted_in_strict_mode(fake: httpx.Client, case: str) -> None:
    path, body = ACCEPTED[case]

    response = fake.post(path, json=body)

    assert response.status_code == 200, response.text


def test_the_refusal_is_in_the_request_log(fake: httpx.Client) -> None:
    body, message, _ = OPENAI_CASES["tool_without_call"]

    fake.post(OPENAI_PATH, json=body, headers={"authorization": "Bearer sk-secret"})

    (record,) = recorded(fake)
    assert (record["outcome"], record["error"], record["model"]) == ("rejected", message,
                                                                     "gpt-fake")
    assert record["body"] == body
    assert record["headers"]["authorization"] == "[redacted]"
    assert recorded(fake, model="gpt-fake") == [record]


def test_an_accepted_request_has_no_error_in_the_log(fake: httpx.Client) -> None:
    fake.post(OPENAI_PATH, json=openai_body()).raise_for_status()

    (record,) = recorded(fake)
    assert (record["outcome"], record["error"]) == ("reply", None)


@pytest.mark.parametrize(("path", "body"), ALL_CASES)
def test_lenient_accepts_every_refused_request(fake: httpx.Client, path: str,
                                               body: dict[str, Any]) -> None:
    switched = fake.post("/_fake/settings", json={"strict": False})

    response = fake.post(path, json=body)

    assert switched.json() == {"strict": False}
    assert response.status_code == 200, response.text
    assert recorded(fake)[0]["outcome"] == "reply"


def test_settings_are_read_validated_and_reset(fake: httpx.Client) -> None:
    assert fake.get("/_fake/settings").json() == {"strict": True}
    assert fake.post("/_fake/settings", json={"strict": "no"}).status_code == 400
    assert fake.post("/_fake/settings", json={"strict": False, "x": 1}).status_code == 400
    fake.post("/_fake/settings", json={"strict": False}).raise_for_status()
    assert fake.get("/_fake/health").json()["strict"] is False

    fake.post("/_fake/reset").raise_for_status()

    assert fake.get("/_fake/settings").json() == {"strict": True}


def test_a_server_started_lenient_stays_lenient_after_reset() -> None:
    from tools_app.fake_llm import FakeLLMApp

    with BackgroundServer(FakeLLMApp(strict=False)) as server, \
            httpx.Client(base_url=server.url, timeout=10) as client:
        client.post("/_fake/reset").raise_for_status()
        response = client.post(OPENAI_PATH, json=OPENAI_CASES["tool_without_call"][0])

    assert response.status_code == 200


@pytest.mark.parametrize("provider", ["openai", "openai_responses", "anthropic", "gemini"])
async def test_the_engine_sees_a_non_retryable_provider_error(
    fake: httpx.Client, shared_server: BackgroundServer, provider: str,
) -> None:
    # A result whose call is not in the conversation: every wire refuses it.
    orphan = ToolExecutionResultMessage(id="call_orphan", tool_name="get_weather", text="x")
    model = chat_model_class(provider)(
        base_url=shared_server.base_urls()[provider], model="strict", api_key="sk-test",
        stream=False, retry=RetryPolicy(max_retries=2, initial_delay=0.001, max_delay=0.001))

    try:
        with pytest.raises(ProviderError) as raised:
            await model.chat(ChatRequest(messages=(UserMessage(text="hi"), orphan)))
    finally:
        await model.aclose()

    assert (raised.value.status, raised.value.retryable) == (400, False)
    assert [r["outcome"] for r in recorded(fake)] == ["rejected"]


@pytest.mark.parametrize("provider", ["openai", "openai_responses", "anthropic", "gemini"])
async def test_the_adapters_pair_calls_and_results_as_strict_mode_wants(
    fake: httpx.Client, shared_server: BackgroundServer, provider: str,
) -> None:
    call = ToolExecutionRequest(id="call_1", name="get_weather", arguments='{"city": "Oslo"}')
    messages = (UserMessage(text="hi"), AiMessage(tool_execution_requests=(call,)),
                ToolExecutionResultMessage(id="call_1", tool_name="get_weather", text="Sunny"))
    model = chat_model_class(provider)(
        base_url=shared_server.base_urls()[provider], model="strict", api_key="sk-test")

    try:
        response = await model.chat(ChatRequest(messages=messages))
    finally:
        await model.aclose()

    assert response.ai_message.text
    assert [r["outcome"] for r in recorded(fake)] == ["reply"]


# -- recorded real traffic is accepted -------------------------------------------------


def _recorded_requests(provider: str) -> list[tuple[str, dict[str, Any]]]:
    requests = []
    for path in sorted((TRAFFIC / "cassettes" / provider).glob("*.json")):
        for interaction in json.loads(path.read_text())["interactions"] or ():
            body = (interaction.get("request") or {}).get("json")
            if isinstance(body, dict) and interaction["response"]["status"] == 200:
                requests.append((f"{path.stem}#{len(requests)}", body))
    return requests


@pytest.mark.parametrize(("name", "body"), _recorded_requests("openai"))
def test_recorded_openai_requests_pass_the_strict_check(name: str, body: dict[str, Any]) -> None:
    openai_check(body)


@pytest.mark.parametrize(("name", "body"), _recorded_requests("openai-responses"))
def test_recorded_responses_api_requests_pass_the_strict_check(
        name: str, body: dict[str, Any]) -> None:
    responses_check(body)


@pytest.mark.parametrize(("name", "body"), _recorded_requests("anthropic"))
def test_recorded_anthropic_requests_pass_the_strict_check(name: str,
                                                           body: dict[str, Any]) -> None:
    anthropic_check(body)


# -- Anthropic tool_use.input is always an object --------------------------------------


@pytest.mark.parametrize("arguments", ["{not json", "[1, 2]", '"text"'])
def test_anthropic_tool_input_is_an_object_even_for_non_object_arguments(
    fake: httpx.Client, arguments: str,
) -> None:
    set_script(fake, {"steps": [{"tool_calls": [{"name": "get_weather",
                                                 "arguments": arguments}]}]})

    plain = fake.post(ANTHROPIC_PATH, json=anthropic_body()).json()
    streamed = sse_json(fake.post(ANTHROPIC_PATH, json=anthropic_body(stream=True)).text)

    (block,) = [b for b in plain["content"] if b["type"] == "tool_use"]
    assert block["input"] == {"INVALID_JSON": arguments}
    fragments = "".join(e["delta"]["partial_json"] for e in streamed
                        if e["type"] == "content_block_delta"
                        and e["delta"]["type"] == "input_json_delta")
    assert json.loads(fragments) == {"INVALID_JSON": arguments}


def test_anthropic_streamed_object_arguments_are_sent_as_scripted(fake: httpx.Client) -> None:
    set_script(fake, {"steps": [{"tool_calls": [{"name": "get_weather",
                                                 "arguments": '{"city":  "Paris"}'}]}]})

    streamed = sse_json(fake.post(ANTHROPIC_PATH, json=anthropic_body(stream=True)).text)

    fragments = "".join(e["delta"]["partial_json"] for e in streamed
                        if e["type"] == "content_block_delta"
                        and e["delta"]["type"] == "input_json_delta")
    assert fragments == '{"city":  "Paris"}'
