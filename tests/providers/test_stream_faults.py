"""Streams that go wrong after the first byte: never retried, never a partial call."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tools_app.engine import (
    ChatRequest,
    ModelTimeout,
    ProviderError,
    ToolService,
    ToolSpecification,
    UserMessage,
)
from tools_app.engine.providers.http.wire_errors import ProviderStreamError

from .harness import HARNESSES, Harness, inside_arguments
from .support import (
    Replay,
    Sleeps,
    captured_events,
    cut_sse_response,
    of_kind,
    policy,
    sse_response,
)
from .wire import anthropic_sse, gemini_sse, openai_sse

REQUEST = ChatRequest(messages=(UserMessage(text="Write the file"),))

pytestmark = pytest.mark.parametrize("harness", HARNESSES, ids=str)


async def stream_call(harness: Harness, replies: list[Any]
                      ) -> tuple[Replay, Sleeps, list[Any], ProviderError]:
    sleeps = Sleeps()
    replay = Replay(replies, harness.validate)
    model = harness.model(replay, stream=True, retry=policy(sleeps))
    with captured_events() as events, pytest.raises(ProviderError) as caught:
        await model.chat(REQUEST)
    return replay, sleeps, events, caught.value


async def test_a_stream_that_breaks_inside_a_tool_call_is_not_retried(harness: Harness) -> None:
    sse = harness.call_sse()
    reset = httpx.ReadError("[Errno 104] Connection reset by peer")

    replay, sleeps, events, error = await stream_call(
        harness, [cut_sse_response(sse, inside_arguments(sse), reset), harness.ok_stream()])

    assert isinstance(error, ProviderStreamError)
    assert len(replay.requests) == 1
    assert sleeps.waits == []
    assert "the response stream broke" in str(error)
    assert "ReadError" in str(error)
    assert "no tool call from it was executed" in str(error)
    assert error.retryable is False
    assert error.status == 200
    assert of_kind(events, "provider_wire_response") == []
    [attempt] = of_kind(events, "provider_attempt")  # reported, and not retried
    assert (attempt.attempt, attempt.status, attempt.retryable, attempt.wait_s) == (
        1, 200, False, None)
    assert attempt.error == str(error)


async def test_a_stream_that_goes_silent_is_a_timeout_not_retried(harness: Harness) -> None:
    sse = harness.call_sse()
    silence = httpx.ReadTimeout("timed out")

    replay, sleeps, events, error = await stream_call(
        harness, [cut_sse_response(sse, inside_arguments(sse), silence), harness.ok_stream()])

    assert isinstance(error, ProviderStreamError)
    assert isinstance(error, ModelTimeout)
    assert "timed out after 120 s waiting for data" in str(error)
    assert (len(replay.requests), sleeps.waits) == (1, [])
    [attempt] = of_kind(events, "provider_attempt")
    assert (attempt.timed_out, attempt.retryable) == (True, False)


async def test_a_stream_that_just_stops_is_refused(harness: Harness) -> None:
    sse = harness.call_sse()

    replay, _, _, error = await stream_call(
        harness, [cut_sse_response(sse, inside_arguments(sse), None)])

    assert isinstance(error, ProviderStreamError)
    assert len(replay.requests) == 1
    assert "not valid JSON" in str(error) or "ended before" in str(error)


async def test_a_stream_that_stops_between_events_is_refused(harness: Harness) -> None:
    sse = harness.call_sse()
    cut = sse.index("\n\n", inside_arguments(sse)) + 2  # after the event holding arguments

    _, _, _, error = await stream_call(harness, [cut_sse_response(sse, cut, None)])

    assert isinstance(error, ProviderStreamError)
    assert "ended before" in str(error)


async def test_an_error_event_in_the_middle_is_raised_not_retried(harness: Harness) -> None:
    replay, sleeps, events, error = await stream_call(
        harness, [sse_response(harness.error_event_sse()), harness.ok_stream()])

    assert isinstance(error, ProviderStreamError)
    assert len(replay.requests) == 1
    assert sleeps.waits == []
    assert "the stream carried an error" in str(error)
    assert error.error_type in ("server_error", "overloaded_error", "UNAVAILABLE")
    assert "".join(e.delta for e in of_kind(events, "partial_text")).startswith("Working")


async def test_html_instead_of_an_event_stream_is_an_invalid_response(harness: Harness) -> None:
    page = httpx.Response(200, headers={"content-type": "text/html"},
                          content=b"<html>Bad Gateway</html>")

    _, _, _, error = await stream_call(harness, [page])

    assert "invalid provider response (expected an event stream, got text/html)" in str(error)
    assert "<html>Bad Gateway</html>" in str(error)


async def test_no_tool_ever_runs_from_a_broken_stream(harness: Harness) -> None:
    sse = harness.call_sse()
    written: list[str] = []
    service = ToolService().tool(ToolSpecification(name="write_file"),
                                 lambda request: written.append(request.arguments))
    replay = Replay([cut_sse_response(sse, inside_arguments(sse),
                                      httpx.RemoteProtocolError("peer closed connection"))])

    events: list[Any] = []
    with pytest.raises(ProviderStreamError):
        await service.chat(harness.model(replay, stream=True), [UserMessage(text="Write")],
                           observers=[events.append])

    assert written == []
    assert of_kind(events, "tool_call_proposed") == []
    # OpenAI and Anthropic stream argument fragments (the UI saw some, nothing ran);
    # Gemini sends each call whole, so a cut call was never even reported.
    assert bool(of_kind(events, "partial_tool_call")) is (harness.name != "gemini")


TRUNCATED = {
    "openai": lambda: openai_sse(calls=[("call_1", "write_file", {"path": "a"})],
                                 finish="length").replace('\\"a\\"}', '\\"a'),
    "anthropic": lambda: anthropic_sse(calls=[("toolu_1", "write_file", {"path": "a"})],
                                       stop_reason="max_tokens"),
    "gemini": lambda: gemini_sse(calls=[("write_file", {"path": "a"})], finish="MAX_TOKENS"),
}


async def test_a_tool_call_cut_at_the_token_limit_is_refused(harness: Harness) -> None:
    replay, _, _, error = await stream_call(harness, [sse_response(TRUNCATED[harness.name]())])

    assert len(replay.requests) == 1
    assert "cut off" in str(error)
    assert "'write_file'" in str(error)
    assert "not executed" in str(error)
    assert error.error_type == "truncated_tool_call"
