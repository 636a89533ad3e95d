"""Every fault kind, observed from a real HTTP client on a loopback connection."""

from __future__ import annotations

import json

import httpx
import pytest

from .support import anthropic_body, gemini_body, openai_body, recorded, set_script, sse_events

REPLY = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}


def _one_step(*faults: dict[str, object], **reply: object) -> dict[str, object]:
    return {"steps": [{**(reply or REPLY), "faults": list(faults)}]}


@pytest.mark.parametrize(
    ("path", "body", "error_path", "expected_type"),
    [
        ("/v1/chat/completions", openai_body(), ("error", "code"), "rate_limit_exceeded"),
        ("/v1/messages", anthropic_body(), ("error", "type"), "rate_limit_error"),
        ("/v1beta/models/g:generateContent", gemini_body(), ("error", "status"),
         "RESOURCE_EXHAUSTED"),
    ],
)
def test_status_fault_has_retry_headers_and_provider_error_body(
    fake: httpx.Client, path: str, body: dict[str, object], error_path: tuple[str, str],
    expected_type: str,
) -> None:
    set_script(fake, _one_step({"kind": "status", "status": 429, "retry_after": 2,
                                "retry_after_ms": 1500, "message": "slow down",
                                "times": None}))

    response = fake.post(path, json=body)

    assert response.status_code == 429
    assert response.headers["retry-after"] == "2"
    assert response.headers["retry-after-ms"] == "1500"
    error = response.json()
    outer, inner = error_path
    assert error[outer][inner] == expected_type
    assert error[outer]["message"] == "slow down"


def test_status_fault_with_verbatim_body_and_extra_headers(fake: httpx.Client) -> None:
    set_script(fake, _one_step({"kind": "status", "status": 503, "body": "upstream down",
                                "retry_after": "Wed, 21 Oct 2015 07:28:00 GMT",
                                "headers": {"X-Should-Retry": "true"}}))

    response = fake.post("/v1/chat/completions", json=openai_body())

    assert response.status_code == 503
    assert response.text == "upstream down"
    assert response.headers["content-type"].startswith("text/plain")
    assert response.headers["retry-after"] == "Wed, 21 Oct 2015 07:28:00 GMT"
    assert response.headers["x-should-retry"] == "true"


def test_faults_play_on_the_first_attempts_then_the_reply(fake: httpx.Client) -> None:
    set_script(fake, _one_step({"kind": "status", "status": 500, "times": 2},
                               {"kind": "status", "status": 529}))
    body = anthropic_body()

    statuses = [fake.post("/v1/messages", json=body).status_code for _ in range(4)]

    assert statuses == [500, 500, 529, 200]
    assert [r["attempt"] for r in recorded(fake)] == [1, 2, 3, 4]
    assert [r["outcome"] for r in recorded(fake)] == [
        "fault:status", "fault:status", "fault:status", "reply"]


def test_attempts_are_counted_per_conversation(fake: httpx.Client) -> None:
    set_script(fake, _one_step({"kind": "status", "status": 429}))
    body = openai_body()

    first_a = fake.post("/v1/chat/completions", json=body, headers={"x-fake-conversation": "a"})
    first_b = fake.post("/v1/chat/completions", json=body, headers={"x-fake-conversation": "b"})
    second_a = fake.post("/v1/chat/completions", json=body, headers={"x-fake-conversation": "a"})
    other_body = fake.post("/v1/chat/completions",
                           json=openai_body([{"role": "user", "content": "something else"}]))

    assert [first_a.status_code, first_b.status_code, second_a.status_code] == [429, 429, 200]
    assert other_body.status_code == 429


def test_explicit_attempt_header_is_stateless(fake: httpx.Client) -> None:
    set_script(fake, _one_step({"kind": "status", "status": 429}))

    first = fake.post("/v1/chat/completions", json=openai_body(), headers={"x-fake-attempt": "2"})
    again = fake.post("/v1/chat/completions", json=openai_body(), headers={"x-fake-attempt": "1"})

    assert (first.status_code, again.status_code) == (200, 429)


def test_reset_fault_raises_a_transport_error(fake: httpx.Client) -> None:
    set_script(fake, _one_step({"kind": "reset", "times": None}))

    with pytest.raises(httpx.TransportError):
        fake.post("/v1/chat/completions", json=openai_body())
    with pytest.raises(httpx.TransportError):
        fake.post("/v1/messages", json=anthropic_body(stream=True))

    assert fake.get("/_fake/health").json()["ok"] is True
    assert [r["outcome"] for r in recorded(fake)] == ["fault:reset", "fault:reset"]


def test_hang_fault_accepts_and_never_answers_then_the_reply(fake: httpx.Client) -> None:
    set_script(fake, _one_step({"kind": "hang", "times": 1}))

    with pytest.raises(httpx.ReadTimeout):  # nothing came: not a status, not a byte
        fake.post("/v1/chat/completions", json=openai_body(), timeout=0.3)
    response = fake.post("/v1/chat/completions", json=openai_body())

    assert response.status_code == 200
    assert [r["outcome"] for r in recorded(fake)] == ["fault:hang", "reply"]


def test_graceful_reset_closes_without_a_response(fake: httpx.Client) -> None:
    set_script(fake, _one_step({"kind": "reset", "graceful": True}))

    with pytest.raises(httpx.RemoteProtocolError):
        fake.post("/v1/chat/completions", json=openai_body())


def test_cut_stream_leaves_an_incomplete_stream(fake: httpx.Client) -> None:
    set_script(fake, _one_step({"kind": "cut", "after_bytes": 120, "times": None}))
    received, statuses = bytearray(), []

    def read_all() -> None:
        with fake.stream("POST", "/v1/chat/completions", json=openai_body(stream=True)) as response:
            statuses.append(response.status_code)
            for chunk in response.iter_raw():
                received.extend(chunk)

    with pytest.raises(httpx.RemoteProtocolError):
        read_all()

    assert statuses == [200]
    assert len(received) == 120
    assert received.startswith(b"data: {")
    assert b"[DONE]" not in received


def test_cut_json_body_is_shorter_than_announced(fake: httpx.Client) -> None:
    set_script(fake, _one_step({"kind": "cut", "after_bytes": 10}))

    with pytest.raises(httpx.RemoteProtocolError):
        fake.post("/v1/messages", json=anthropic_body())


def test_openai_stream_error_chunk(fake: httpx.Client) -> None:
    set_script(fake, _one_step({"kind": "stream_error", "after_events": 2,
                                "message": "The server had an error"}))

    response = fake.post("/v1/chat/completions", json=openai_body(stream=True))

    events = sse_events(response.text)
    assert len(events) == 3
    assert all(name is None for name, _ in events)
    assert "choices" in json.loads(events[1][1])
    error = json.loads(events[2][1])["error"]
    assert error["message"] == "The server had an error"
    assert error["type"] == "server_error"
    assert "[DONE]" not in response.text


def test_anthropic_error_event(fake: httpx.Client) -> None:
    set_script(fake, _one_step({"kind": "stream_error", "after_events": 3,
                                "error_type": "overloaded_error", "message": "Overloaded"}))

    response = fake.post("/v1/messages", json=anthropic_body(stream=True))

    events = sse_events(response.text)
    assert [name for name, _ in events] == [
        "message_start", "content_block_start", "ping", "error"]
    assert json.loads(events[-1][1]) == {
        "type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def test_gemini_stream_error_object(fake: httpx.Client) -> None:
    set_script(fake, _one_step({"kind": "stream_error", "after_events": 0, "status": 503}))

    response = fake.post("/v1beta/models/g:streamGenerateContent", params={"alt": "sse"},
                         json=gemini_body())

    (event,) = sse_events(response.text)
    assert json.loads(event[1])["error"]["status"] == "UNAVAILABLE"


def test_stream_error_on_a_json_request_is_an_error_status(fake: httpx.Client) -> None:
    set_script(fake, _one_step({"kind": "stream_error", "status": 502}))

    response = fake.post("/v1/chat/completions", json=openai_body())

    assert response.status_code == 502
    assert response.json()["error"]["type"] == "server_error"


def test_garbage_body(fake: httpx.Client) -> None:
    set_script(fake, _one_step({"kind": "garbage", "body": "<html>oops"}))

    response = fake.post("/v1/chat/completions", json=openai_body())

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    with pytest.raises(json.JSONDecodeError):
        response.json()


def test_fault_then_auto_reply_when_the_step_has_no_reply(fake: httpx.Client) -> None:
    set_script(fake, {"steps": [{"faults": [{"kind": "status", "status": 500}]}]})

    failed = fake.post("/v1/chat/completions", json=openai_body())
    answered = fake.post("/v1/chat/completions", json=openai_body())

    assert failed.status_code == 500
    assert answered.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == (
        "get_weather")


def test_latency_and_chunk_delay_still_deliver_the_whole_stream(fake: httpx.Client) -> None:
    set_script(fake, {"steps": [{"text": "slow but complete", "latency_ms": 5}],
                      "chunk_size": 4, "chunk_delay_ms": 1})

    response = fake.post("/v1/messages", json=anthropic_body(stream=True))

    names = [name for name, _ in sse_events(response.text)]
    assert names[-1] == "message_stop"
    assert names.count("content_block_delta") == 5
