"""Each wire format, JSON and streaming, shaped like the real APIs' recorded traffic."""

from __future__ import annotations

import json

import httpx

from .support import (
    anthropic_body,
    gemini_body,
    openai_body,
    set_script,
    sse_events,
    sse_json,
)

TWO_CITIES = {"steps": [
    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}},
                    {"name": "get_weather", "arguments": {"city": "Lima"}}]},
    {"text": "Paris: {last_result} / all: {last_results}"},
]}


# -- OpenAI Chat Completions -------------------------------------------------------------


def test_openai_json_tool_call_without_script(fake: httpx.Client) -> None:
    response = fake.post("/v1/chat/completions", json=openai_body(),
                         headers={"authorization": "Bearer sk-test"})

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-request-id"].startswith("req_")
    body = response.json()
    assert body["id"].startswith("chatcmpl-")
    assert body["object"] == "chat.completion"
    assert body["model"] == "gpt-fake"
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["id"].startswith("call_")
    assert call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "city 1"}
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_openai_json_answers_tool_results_with_text(fake: httpx.Client) -> None:
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21C"},
    ]

    body = fake.post("/v1/chat/completions", json=openai_body(messages)).json()

    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert "tool_calls" not in choice["message"]
    assert "Sunny, 21C" in choice["message"]["content"]


def test_openai_stream_with_usage_chunk_and_done(fake: httpx.Client) -> None:
    set_script(fake, TWO_CITIES)
    body = openai_body(stream=True, stream_options={"include_usage": True})

    response = fake.post("/v1/chat/completions", json=body)

    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert events[-1] == (None, "[DONE]")
    chunks = sse_json(response.text)
    assert {c["id"] for c in chunks} == {chunks[0]["id"]}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    *content, finish, usage = chunks
    assert finish["choices"][0]["finish_reason"] == "tool_calls"
    assert usage["choices"] == []
    assert usage["usage"]["total_tokens"] > 0
    assert all(c["usage"] is None for c in [*content, finish])
    calls = _assemble_openai_calls(content)
    assert [json.loads(c["arguments"]) for c in calls] == [{"city": "Paris"}, {"city": "Lima"}]
    assert len({c["id"] for c in calls}) == 2
    assert all(c["id"].startswith("call_") for c in calls)


def test_openai_stream_without_include_usage_has_no_usage(fake: httpx.Client) -> None:
    response = fake.post("/v1/chat/completions", json=openai_body(stream=True))

    chunks = sse_json(response.text)
    assert all("usage" not in c for c in chunks)
    assert all(c["choices"] for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_openai_stream_text_reassembles(fake: httpx.Client) -> None:
    set_script(fake, {"steps": [{"text": "A fairly long answer, streamed in small pieces."}],
                      "chunk_size": 5})

    response = fake.post("/v1/chat/completions", json=openai_body(stream=True))

    chunks = sse_json(response.text)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == "A fairly long answer, streamed in small pieces."
    assert len(chunks) > 5
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_openai_parallel_calls_json(fake: httpx.Client) -> None:
    set_script(fake, TWO_CITIES)

    message = fake.post("/v1/chat/completions", json=openai_body()).json()["choices"][0]["message"]

    names = [c["function"]["name"] for c in message["tool_calls"]]
    arguments = [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]]
    assert names == ["get_weather", "get_weather"]
    assert arguments == [{"city": "Paris"}, {"city": "Lima"}]


def test_openai_text_template_quotes_results(fake: httpx.Client) -> None:
    set_script(fake, TWO_CITIES)
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "a", "content": "Sunny"},
        {"role": "tool", "tool_call_id": "b", "content": "Rain"},
    ]

    body = fake.post("/v1/chat/completions", json=openai_body(messages)).json()

    assert body["choices"][0]["message"]["content"] == "Paris: Sunny / all: Sunny\nRain"


# -- Anthropic Messages ------------------------------------------------------------------


def test_anthropic_json_tool_use(fake: httpx.Client) -> None:
    set_script(fake, TWO_CITIES)

    response = fake.post("/v1/messages", json=anthropic_body())

    assert response.headers["request-id"].startswith("req_")
    body = response.json()
    assert body["id"].startswith("msg_")
    assert (body["type"], body["role"], body["model"]) == ("message", "assistant", "claude-fake")
    assert body["stop_reason"] == "tool_use"
    assert body["stop_sequence"] is None
    blocks = body["content"]
    assert [b["type"] for b in blocks] == ["tool_use", "tool_use"]
    assert [b["input"] for b in blocks] == [{"city": "Paris"}, {"city": "Lima"}]
    assert all(b["id"].startswith("toolu_") for b in blocks)
    assert body["usage"]["input_tokens"] > 0
    assert body["usage"]["output_tokens"] > 0


def test_anthropic_json_text_after_tool_results(fake: httpx.Client) -> None:
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 21C"}]},
    ]

    body = fake.post("/v1/messages", json=anthropic_body(messages)).json()

    assert body["stop_reason"] == "end_turn"
    assert body["content"][0]["type"] == "text"
    assert "Sunny, 21C" in body["content"][0]["text"]


def test_anthropic_stream_event_sequence(fake: httpx.Client) -> None:
    set_script(fake, {"steps": [{"text": "Let me check.", "tool_calls": [
        {"name": "get_weather", "arguments": {"city": "Paris"}},
        {"name": "get_weather", "arguments": {"city": "Lima"}}]}]})

    response = fake.post("/v1/messages", json=anthropic_body(stream=True))

    events = sse_events(response.text)
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    datas = [json.loads(data) for _, data in events]
    assert all(d["type"] == name for (name, _), d in zip(events, datas, strict=True))
    assert datas[0]["message"]["id"].startswith("msg_")
    starts = [d["content_block"] for d in datas if d["type"] == "content_block_start"]
    assert [s["type"] for s in starts] == ["text", "tool_use", "tool_use"]
    assert all(s["id"].startswith("toolu_") for s in starts[1:])
    assert names.count("content_block_stop") == 3
    text = "".join(d["delta"]["text"] for d in datas
                   if d["type"] == "content_block_delta" and d["delta"]["type"] == "text_delta")
    assert text == "Let me check."
    arguments = {i: "".join(d["delta"]["partial_json"] for d in datas
                            if d["type"] == "content_block_delta" and d["index"] == i)
                 for i in (1, 2)}
    assert [json.loads(a) for a in arguments.values()] == [{"city": "Paris"}, {"city": "Lima"}]
    assert datas[-2]["delta"]["stop_reason"] == "tool_use"
    assert datas[-2]["usage"]["output_tokens"] > 0


def test_anthropic_missing_max_tokens_is_a_provider_shaped_400(fake: httpx.Client) -> None:
    body = anthropic_body()
    del body["max_tokens"]

    response = fake.post("/v1/messages", json=body)

    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in error["error"]["message"]


# -- Gemini ------------------------------------------------------------------------------


def test_gemini_json_function_call(fake: httpx.Client) -> None:
    set_script(fake, TWO_CITIES)

    response = fake.post("/v1beta/models/gemini-fake:generateContent", json=gemini_body())

    body = response.json()
    candidate = body["candidates"][0]
    assert candidate["finishReason"] == "STOP"
    assert candidate["content"]["role"] == "model"
    calls = [p["functionCall"] for p in candidate["content"]["parts"]]
    assert calls == [{"name": "get_weather", "args": {"city": "Paris"}},
                     {"name": "get_weather", "args": {"city": "Lima"}}]
    usage = body["usageMetadata"]
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"]
    assert body["modelVersion"] == "gemini-fake"
    assert body["responseId"]


def test_gemini_sse_stream(fake: httpx.Client) -> None:
    set_script(fake, {"steps": [{"text": "Twelve characters of text, then more."}],
                      "chunk_size": 12})

    response = fake.post("/v1beta/models/gemini-fake:streamGenerateContent",
                         params={"alt": "sse"}, json=gemini_body())

    assert response.headers["content-type"].startswith("text/event-stream")
    assert "\r\n\r\n" in response.text
    chunks = sse_json(response.text)
    assert len(chunks) == 4
    text = "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks)
    assert text == "Twelve characters of text, then more."
    assert "finishReason" not in chunks[0]["candidates"][0]
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert "candidatesTokenCount" in chunks[-1]["usageMetadata"]
    assert {c["responseId"] for c in chunks} == {chunks[0]["responseId"]}


def test_gemini_stream_without_alt_sse_is_a_json_array(fake: httpx.Client) -> None:
    response = fake.post("/v1beta/models/gemini-fake:streamGenerateContent", json=gemini_body())

    chunks = response.json()
    assert isinstance(chunks, list)
    assert chunks[-1]["candidates"][0]["content"]["parts"][0]["functionCall"]["name"] == (
        "get_weather")


def test_gemini_function_response_gets_text_answer(fake: httpx.Client) -> None:
    contents = [
        {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {}}}]},
        {"role": "user", "parts": [{"function_response": {
            "name": "get_weather", "response": {"result": "Sunny, 21C"}}}]},
    ]

    body = fake.post("/v1beta/models/gemini-fake:generateContent",
                     json=gemini_body(contents)).json()

    part = body["candidates"][0]["content"]["parts"][0]
    assert "Sunny, 21C" in part["text"]


def test_gemini_errors_use_google_status_names(fake: httpx.Client) -> None:
    response = fake.post("/v1beta/models/gemini-fake:generateContent", json={"contents": []})

    assert response.status_code == 400
    assert response.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert response.json()["error"]["code"] == 400


# -- tool_choice and the default (no script) mode ---------------------------------------


def test_named_tool_choice_is_obeyed_by_every_wire(fake: httpx.Client) -> None:
    openai = fake.post("/v1/chat/completions", json=openai_body(
        tool_choice={"type": "function", "function": {"name": "get_time"}})).json()
    anthropic = fake.post("/v1/messages", json=anthropic_body(
        tool_choice={"type": "tool", "name": "get_time"})).json()
    gemini = fake.post("/v1beta/models/g:generateContent", json=gemini_body(toolConfig={
        "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_time"]}})).json()

    call = openai["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "get_time"
    assert json.loads(call["arguments"]) == {"zone": "UTC"}
    assert anthropic["content"][0]["name"] == "get_time"
    assert gemini["candidates"][0]["content"]["parts"][0]["functionCall"]["name"] == "get_time"


def test_tool_choice_none_and_no_tools_answer_with_text(fake: httpx.Client) -> None:
    none = fake.post("/v1/chat/completions", json=openai_body(tool_choice="none")).json()
    no_tools = fake.post("/v1/messages", json=anthropic_body(tools=False)).json()

    assert none["choices"][0]["finish_reason"] == "stop"
    assert "Weather in Paris?" in none["choices"][0]["message"]["content"]
    assert no_tools["stop_reason"] == "end_turn"
    assert no_tools["content"][0]["type"] == "text"


def test_model_name_encodes_rounds_and_parallel_calls(fake: httpx.Client) -> None:
    messages: list[dict[str, object]] = [{"role": "user", "content": "go"}]
    shapes = []
    for _ in range(3):
        message = fake.post("/v1/chat/completions",
                            json=openai_body(messages, model="fake-k2-p3")).json()["choices"][0][
            "message"]
        calls = message.get("tool_calls") or []
        shapes.append(len(calls))
        messages.append({"role": "assistant", "content": message["content"], "tool_calls": calls}
                        if calls else {"role": "assistant", "content": message["content"]})
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls]

    assert shapes == [3, 3, 0]
    assert messages[-1]["content"] == 'The tools returned: "ok"; "ok"; "ok".'


def test_parallel_tool_calls_false_limits_to_one_call(fake: httpx.Client) -> None:
    body = openai_body(model="fake-k1-p4", parallel_tool_calls=False)

    message = fake.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]

    assert len(message["tool_calls"]) == 1


def test_required_tool_choice_keeps_calling_after_results(fake: httpx.Client) -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": {
            "name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "ok"},
    ]

    body = fake.post("/v1/chat/completions",
                     json=openai_body(messages, tool_choice="required")).json()

    assert body["choices"][0]["finish_reason"] == "tool_calls"


def _assemble_openai_calls(chunks: list[dict[str, object]]) -> list[dict[str, str]]:
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        choices = chunk["choices"]
        assert isinstance(choices, list)
        for fragment in choices[0]["delta"].get("tool_calls", []):
            call = calls.setdefault(fragment["index"], {"id": "", "arguments": ""})
            call["id"] = fragment.get("id", call["id"])
            call["arguments"] += fragment["function"].get("arguments", "")
    return [calls[i] for i in sorted(calls)]
