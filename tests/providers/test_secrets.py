"""A canary API key must never appear in an exception, an event, or a log line, whatever
goes wrong (including a server or a transport that echoes it back)."""

from __future__ import annotations

import logging
import traceback
from typing import Any

import httpx
import pytest

from tools_app.engine import ChatRequest, ProviderError, UserMessage
from tools_app.engine.providers.openai import OpenAICompatibleChatModel

from .harness import HARNESSES, Harness
from .support import (
    CANARY_KEY,
    Replay,
    Sleeps,
    captured_events,
    cut_sse_response,
    json_response,
    policy,
    sse_response,
)

REQUEST = ChatRequest(messages=(UserMessage(text="Hello"),))


def echo_key_in_error(status: int) -> Any:
    def reply(request: httpx.Request) -> httpx.Response:
        sent = " ".join(v for k, v in request.headers.items()
                        if k in ("authorization", "x-api-key", "x-goog-api-key", "x-proxy-token"))
        return json_response(status, {"error": {"message": f"Incorrect API key: {sent}",
                                                "type": "invalid_api_key", "code": sent}})
    return reply


def transport_error_with_key(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError(f"proxy refused {dict(request.headers)!r}")


def garbage_with_key(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=f"<html>key={CANARY_KEY}</html>".encode(),
                          headers={"content-type": "text/html"})


def stream_error_with_key(request: httpx.Request) -> httpx.Response:
    return sse_response(f'data: {{"error": {{"message": "bad key {CANARY_KEY}", '
                        f'"type": "auth"}}}}\n\nevent: error\ndata: {{"type": "error", '
                        f'"error": {{"type": "auth", "message": "bad key {CANARY_KEY}"}}}}\n\n')


SCENARIOS: dict[str, tuple[list[Any], bool]] = {
    "401 echoing the key": ([echo_key_in_error(401)], False),
    "500 echoing the key, retried": ([echo_key_in_error(500)] * 3, False),
    "transport error quoting the headers": ([transport_error_with_key] * 3, False),
    "timeout": ([httpx.ReadTimeout("timed out")] * 3, False),
    "garbage 200 echoing the key": ([garbage_with_key], False),
    "stream error event echoing the key": ([stream_error_with_key], True),
    "stream cut": ([lambda request: cut_sse_response(
        'data: {"x": 1}\n\n', 5, httpx.ReadError(f"reset {CANARY_KEY}"))], True),
}


@pytest.mark.parametrize("harness", HARNESSES, ids=str)
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_the_key_never_leaks(harness: Harness, scenario: str,
                                   caplog: pytest.LogCaptureFixture) -> None:
    replies, stream = SCENARIOS[scenario]
    replay = Replay(list(replies))
    model = harness.model(replay, api_key=CANARY_KEY, stream=stream, retry=policy(Sleeps()))
    caplog.set_level(logging.DEBUG)

    with captured_events() as events, pytest.raises(ProviderError) as caught:
        await model.chat(REQUEST)

    assert CANARY_KEY in " ".join(replay.requests[0].headers.values())  # it was sent
    texts = [str(caught.value), repr(caught.value), "".join(traceback.format_exception(
        caught.value)), caplog.text, repr(model), *(e.model_dump_json() for e in events),
        str(vars(caught.value))]
    assert not [t for t in texts if CANARY_KEY in t]
    assert not [t for t in texts if CANARY_KEY[8:24] in t]  # nor the bare token part


@pytest.mark.parametrize("harness", HARNESSES, ids=str)
async def test_a_successful_call_reports_no_key_either(harness: Harness,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    replay = Replay([harness.ok()])
    caplog.set_level(logging.DEBUG)

    with captured_events() as events:
        await harness.model(replay, api_key=CANARY_KEY).chat(REQUEST)

    assert events
    assert all(CANARY_KEY not in e.model_dump_json() for e in events)
    assert CANARY_KEY not in caplog.text


async def test_secret_looking_extra_headers_are_scrubbed_too() -> None:
    token = "proxy-token-0123456789abcdef"
    replay = Replay([echo_key_in_error(401)])
    model = OpenAICompatibleChatModel(base_url="http://127.0.0.1:4000/v1", model="llama3",
                                      extra_headers={"X-Proxy-Token": token, "X-Team": "blue"},
                                      transport=replay.transport)

    with pytest.raises(ProviderError) as caught:
        await model.chat(REQUEST)

    assert replay.requests[0].headers["x-proxy-token"] == token
    assert replay.requests[0].headers["x-team"] == "blue"
    assert "authorization" not in replay.requests[0].headers
    assert token not in str(caught.value)
