"""The fake provider's Responses API (POST /v1/responses) read by the official openai SDK:
its replies parse as the SDK's Response and stream events, the SDK's own streaming helper
and OpenAIResponsesModel assemble the same calls from the same stream, and strict mode
refuses what the real API refuses (with its messages), reasoning items included."""

from __future__ import annotations

import json
from typing import Any

import httpx
import httpx2
import openai
import pytest
from openai.types.responses import (
    EasyInputMessageParam,
    FunctionToolParam,
    Response,
    ResponseStreamEvent,
)
from pydantic import TypeAdapter

from tools_app.engine import ChatRequest, ChatRequestParameters, UserMessage
from tools_app.engine.providers.openai_responses import OpenAIResponsesModel
from tools_app.fake_llm import BackgroundServer

from .support import TIME_SCHEMA, WEATHER_SCHEMA, set_script, sse_events

PATH = "/v1/responses"
TOOLS: list[FunctionToolParam] = [
    {"type": "function", "name": "get_weather", "parameters": WEATHER_SCHEMA, "strict": False},
    {"type": "function", "name": "get_time", "parameters": TIME_SCHEMA, "strict": False}]
PARALLEL = {"steps": [
    {"text": "Checking both.",
     "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_p"},
                    {"name": "get_time", "arguments": {"zone": "CET"}, "id": "call_t"}]},
    {"text": "Done: {last_results}"},
]}
USER: EasyInputMessageParam = {"role": "user", "content": "Weather in Paris and the time?"}
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def body(**extra: Any) -> dict[str, Any]:
    return {"model": "gpt-5-mini", "input": [USER], "tools": TOOLS, "store": False,
            "include": ["reasoning.encrypted_content"]} | extra


def sdk_client(server: BackgroundServer, transport: httpx2.BaseTransport | None = None,
               ) -> openai.OpenAI:
    """The SDK's client (on httpx2, the HTTP library it is built on)."""
    return openai.OpenAI(base_url=server.base_urls()["openai_responses"], api_key="sk-test",
                         max_retries=0,
                         http_client=httpx2.Client(transport=transport) if transport else None)


def calls_of(output: Any) -> list[tuple[str, str, str]]:
    return [(i.call_id, i.name, i.arguments) for i in output if i.type == "function_call"]


# -- replies as the SDK reads them ------------------------------------------------------


def test_a_json_reply_is_an_sdk_response(fake: httpx.Client,
                                         shared_server: BackgroundServer) -> None:
    set_script(fake, PARALLEL)
    raw = fake.post(PATH, json=body()).json()

    response = sdk_client(shared_server).responses.create(
        model="gpt-5-mini", input=[USER], tools=TOOLS, store=False,
        include=["reasoning.encrypted_content"])

    parsed = Response.model_validate(raw)
    assert [i.type for i in parsed.output] == ["reasoning", "message", "function_call",
                                               "function_call"]
    assert calls_of(response.output) == [
        ("call_p", "get_weather", '{"city": "Paris"}'), ("call_t", "get_time",
                                                         '{"zone": "CET"}')]
    assert response.output_text == "Checking both."
    reasoning = response.output[0]
    assert reasoning.type == "reasoning"
    assert reasoning.encrypted_content


REPLIES: dict[str, dict[str, Any]] = {
    "text": {"steps": [{"text": "Hello there."}]},
    "one call": {"steps": [{"tool_calls": [{"name": "get_time", "arguments": {"zone": "UTC"}}]}]},
    "cut off": {"steps": [{"text": "The weather in", "finish_reason": "length"}]},
    "no script": {"steps": []},
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("reply", sorted(REPLIES))
def test_every_kind_of_reply_parses_as_the_sdk_types(fake: httpx.Client, reply: str,
                                                     stream: bool) -> None:
    set_script(fake, REPLIES[reply])

    answer = fake.post(PATH, json=body(stream=stream))

    if stream:
        events = [EVENTS.validate_python(json.loads(d)) for _, d in sse_events(answer.text)]
        final = events[-1].response
        assert events[-1].type == ("response.incomplete" if reply == "cut off"
                                   else "response.completed")
    else:
        final = Response.model_validate(answer.json())
    assert final.status == ("incomplete" if reply == "cut off" else "completed")
    assert final.output[0].type == "reasoning"
    assert final.usage is not None


def test_every_streamed_event_is_an_sdk_event(fake: httpx.Client) -> None:
    set_script(fake, PARALLEL)

    text = fake.post(PATH, json=body(stream=True)).text

    events = [EVENTS.validate_python(json.loads(data)) for _, data in sse_events(text)]
    names = [name for name, _ in sse_events(text)]
    assert names == [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert names[0] == "response.created"
    assert names[-1] == "response.completed"
    assert {"response.output_item.added", "response.function_call_arguments.delta",
            "response.function_call_arguments.done", "response.output_text.delta",
            "response.output_item.done"} <= set(names)


async def test_the_sdk_stream_helper_and_the_adapter_assemble_the_same_calls(
    fake: httpx.Client, shared_server: BackgroundServer,
) -> None:
    set_script(fake, PARALLEL)
    stream_bytes = fake.post(PATH, json=body(stream=True)).content

    def replay(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"},
                               content=stream_bytes)

    client = sdk_client(shared_server, httpx2.MockTransport(replay))
    with client.responses.stream(model="gpt-5-mini", input=[USER],
                                 tools=TOOLS) as stream:
        final = stream.get_final_response()
    adapter = OpenAIResponsesModel(base_url="http://fake.invalid/v1", model="gpt-5-mini",
                                   stream=True, transport=_AsyncReplay(stream_bytes))
    ours = await adapter.chat(ChatRequest(messages=(UserMessage(text="Weather?"),)))

    assert [(r.id, r.name, r.arguments) for r in ours.ai_message.tool_execution_requests] == \
        calls_of(final.output)
    assert ours.ai_message.text == final.output_text == "Checking both."
    assert [b["id"] for b in ours.ai_message.provider_blocks] == [
        *(getattr(i, "id", None) for i in final.output), final.id]


def test_the_sdk_streams_from_the_server_itself(fake: httpx.Client,
                                                shared_server: BackgroundServer) -> None:
    set_script(fake, PARALLEL)

    with sdk_client(shared_server).responses.stream(
            model="gpt-5-mini", input=[USER], tools=TOOLS,
            store=False, include=["reasoning.encrypted_content"]) as stream:
        deltas = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()

    assert "".join(deltas) == '{"city": "Paris"}{"zone": "CET"}'
    assert calls_of(final.output) == [("call_p", "get_weather", '{"city": "Paris"}'),
                                      ("call_t", "get_time", '{"zone": "CET"}')]


class _AsyncReplay(httpx.AsyncBaseTransport):
    def __init__(self, content: bytes) -> None:
        self.content = content

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              content=self.content)


# -- reasoning items round trip ----------------------------------------------------------


def first_turn(fake: httpx.Client) -> list[dict[str, Any]]:
    set_script(fake, PARALLEL)
    output: list[dict[str, Any]] = fake.post(PATH, json=body()).json()["output"]
    return output


def outputs(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "function_call_output", "call_id": i["call_id"], "output": "ok"}
            for i in output if i["type"] == "function_call"]


def test_a_follow_up_with_the_reasoning_item_is_answered(fake: httpx.Client) -> None:
    output = first_turn(fake)

    reply = fake.post(PATH, json=body(input=[USER, *output, *outputs(output)]))

    assert reply.status_code == 200, reply.text
    assert reply.json()["output"][-1]["content"][0]["text"] == "Done: ok\nok"


def test_a_follow_up_that_drops_the_reasoning_item_is_refused(fake: httpx.Client) -> None:
    output = first_turn(fake)
    reasoning, *rest = output

    reply = fake.post(PATH, json=body(input=[USER, *rest, *outputs(output)]))

    assert reply.status_code == 400
    call = next(i for i in rest if i["type"] == "function_call")
    assert reply.json() == {"error": {
        "message": f"Item '{call['id']}' of type 'function_call' was provided without its "
                   f"required 'reasoning' item: '{reasoning['id']}'.",
        "type": "invalid_request_error", "param": "input", "code": None}}


def test_unstored_reasoning_without_encrypted_content_is_not_found(fake: httpx.Client) -> None:
    output = first_turn(fake)
    bare = {k: v for k, v in output[0].items() if k != "encrypted_content"}

    reply = fake.post(PATH, json=body(input=[USER, bare, *output[1:], *outputs(output)]))

    assert reply.status_code == 404
    assert reply.json()["error"]["message"].startswith(
        f"Item with id '{bare['id']}' not found. Items are not persisted when `store` is "
        "set to false.")


def test_calls_sent_back_without_their_ids_need_no_reasoning(fake: httpx.Client) -> None:
    output = first_turn(fake)
    calls = [{k: v for k, v in i.items() if k != "id"} for i in output
             if i["type"] == "function_call"]

    reply = fake.post(PATH, json=body(input=[USER, *calls, *outputs(output)]))

    assert reply.status_code == 200, reply.text


# -- stored responses continued ------------------------------------------------------------


def test_a_stored_response_is_continued_with_only_the_new_items(fake: httpx.Client) -> None:
    set_script(fake, PARALLEL)
    first = fake.post(PATH, json=body(store=True, include=[])).json()

    reply = fake.post(PATH, json=body(store=True, include=[], previous_response_id=first["id"],
                                      input=outputs(first["output"])))

    assert first["store"] is True
    assert reply.status_code == 200, reply.text
    assert reply.json()["output"][-1]["content"][0]["text"] == "Done: ok\nok"


@pytest.mark.parametrize("store", [False, True], ids=["unstored", "unknown"])
def test_a_response_that_was_not_stored_cannot_be_continued(fake: httpx.Client,
                                                            store: bool) -> None:
    set_script(fake, PARALLEL)
    first = fake.post(PATH, json=body(store=store)).json()
    previous = first["id"] if not store else "resp_never_made"

    reply = fake.post(PATH, json=body(previous_response_id=previous,
                                      input=outputs(first["output"])))

    assert reply.status_code == 400
    assert reply.json()["error"] == {
        "message": f"Previous response with id '{previous}' not found.",
        "type": "invalid_request_error", "param": "previous_response_id",
        "code": "previous_response_not_found"}


# -- what strict mode refuses ------------------------------------------------------------


CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather",
        "arguments": '{"city":"Oslo"}'}
REFUSED: dict[str, tuple[dict[str, Any], int, str, str | None]] = {
    "unknown field": (body(messages=[]), 400, "Unknown parameter: 'messages'.", "messages"),
    "no model": ({"input": [USER]}, 400, "Missing required parameter: 'model'.", "model"),
    "too few output tokens": (body(max_output_tokens=10), 400,
                              "Invalid 'max_output_tokens': integer below minimum value. "
                              "Expected a value >= 16, but got 10 instead.",
                              "max_output_tokens"),
    "strict by default": (body(tools=[{"type": "function", "name": "get_weather",
                                       "parameters": WEATHER_SCHEMA}]), 400,
                          "Invalid schema for function 'get_weather': In context=(), "
                          "'additionalProperties' is required to be supplied and to be false.",
                          "tools[0].parameters"),
    "strict without every key required": (
        body(tools=[{"type": "function", "name": "get_weather", "strict": True, "parameters": {
            **WEATHER_SCHEMA, "additionalProperties": False, "required": [],
        }}]), 400, "Invalid schema for function 'get_weather': In context=(), 'required' is "
        "required to be supplied and to be an array including every key in properties. "
        "Missing 'city'.", "tools[0].parameters"),
    "unknown item type": (body(input=[USER, {"type": "tool_result", "call_id": "x"}]), 400,
                          "Invalid value: 'tool_result'. Supported values are: 'message', ",
                          "input[1]"),
    "call without call_id": (body(input=[USER, {k: v for k, v in CALL.items()
                                                if k != "call_id"}]), 400,
                             "Missing required parameter: 'input[1].call_id'.",
                             "input[1].call_id"),
    "output of no call": (body(input=[USER, {"type": "function_call_output",
                                             "call_id": "call_9", "output": "x"}]), 400,
                          "No tool call found for function call output with call_id call_9.",
                          "input"),
    "call without output": (body(input=[USER, CALL]), 400,
                            "No tool output found for function call call_1.", "input"),
    "reasoning last": (body(input=[USER, {"type": "reasoning", "id": "rs_1", "summary": [],
                                          "encrypted_content": "gAAAA"}]), 400,
                       "Item 'rs_1' of type 'reasoning' was provided without its required "
                       "following item.", "input"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_strict_mode_refuses_what_the_real_api_refuses(fake: httpx.Client, case: str) -> None:
    sent, status, message, param = REFUSED[case]

    reply = fake.post(PATH, json=sent)

    assert reply.status_code == status
    error = reply.json()["error"]
    assert error["message"].startswith(message)
    assert (error["type"], error["param"]) == ("invalid_request_error", param)


def test_the_sdk_raises_its_own_error_for_a_refusal(shared_server: BackgroundServer,
                                                    fake: httpx.Client) -> None:
    with pytest.raises(openai.BadRequestError, match="No tool output found"):
        sdk_client(shared_server).responses.create(
            model="gpt-5-mini", input=[USER, CALL])  # type: ignore[list-item]


async def test_the_adapter_run_against_the_server_passes_strict_mode(
    fake: httpx.Client, shared_server: BackgroundServer,
) -> None:
    set_script(fake, {"steps": [{"text": "Hello"}]})
    model = OpenAIResponsesModel(base_url=shared_server.base_urls()["openai_responses"],
                                 model="gpt-5-mini", api_key="sk-test")
    try:
        response = await model.chat(ChatRequest(
            messages=(UserMessage(text="hi"),),
            parameters=ChatRequestParameters(max_output_tokens=64)))
    finally:
        await model.aclose()

    assert response.ai_message.text == "Hello"
    assert fake.get("/_fake/requests").json()["requests"][0]["outcome"] == "reply"
