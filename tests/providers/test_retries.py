"""The one retry loop, with the SDKs' policy, for every adapter: what is retried, how
long it waits (through the injected sleep), and what the final error says."""

from __future__ import annotations

import email.utils
from typing import Any

import httpx
import pytest

from tools_app.engine import ChatRequest, ModelTimeout, ProviderError, UserMessage
from tools_app.engine.providers.http.clients import DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT

from .harness import HARNESSES, Harness
from .support import Replay, Sleeps, captured_events, json_response, of_kind, policy

REQUEST = ChatRequest(messages=(UserMessage(text="Hello"),))
NOW = 1_700_000_000.0

pytestmark = pytest.mark.parametrize("harness", HARNESSES, ids=str)


async def call(harness: Harness, replies: list[Any], *, jitter: float = 0.0,
               **overrides: Any) -> tuple[Replay, Sleeps, list[Any], Any]:
    """One chat() call; returns the replay, the waits, the events and the response or
    the ProviderError it raised."""
    sleeps = Sleeps()
    replay = Replay(replies, harness.validate)
    model = harness.model(replay, retry=policy(sleeps, jitter=jitter, now=NOW), **overrides)
    with captured_events() as events:
        try:
            outcome: Any = await model.chat(REQUEST)
        except ProviderError as error:
            outcome = error
    return replay, sleeps, events, outcome


async def test_429_with_retry_after_waits_that_long_then_succeeds(harness: Harness) -> None:
    replies = [harness.error(429, "rate_limit_error", "Slow down", {"retry-after": "1"}),
               harness.ok()]

    replay, sleeps, events, response = await call(harness, replies)

    assert response.ai_message.text == "ok"
    assert len(replay.requests) == 2
    assert sleeps.waits == [1.0]
    [attempt] = of_kind(events, "provider_attempt")
    assert (attempt.attempt, attempt.status, attempt.retryable, attempt.wait_s) == (
        1, 429, True, 1.0)
    assert "Slow down" in attempt.error


async def test_retry_after_ms_wins_over_retry_after(harness: Harness) -> None:
    headers = {"retry-after-ms": "200", "retry-after": "5"}
    replies = [harness.error(429, "rate_limit_error", "Slow down", headers), harness.ok()]

    _, sleeps, _, _ = await call(harness, replies)

    assert sleeps.waits == [0.2]


async def test_retry_after_as_an_http_date_is_honoured(harness: Harness) -> None:
    date = email.utils.formatdate(NOW + 30, usegmt=True)
    replies = [harness.error(503, "overloaded", "Busy", {"retry-after": date}), harness.ok()]

    _, sleeps, _, _ = await call(harness, replies)

    assert sleeps.waits == [30.0]


async def test_retry_after_above_60_s_is_not_retried_and_says_how_long(harness: Harness) -> None:
    replies = [harness.error(429, "rate_limit_error", "Quota exhausted",
                             {"retry-after": "3600"})]

    replay, sleeps, events, error = await call(harness, replies)

    assert len(replay.requests) == 1
    assert sleeps.waits == []
    assert "asked to retry after 3600 s" in str(error)
    assert "more than the 60 s" in str(error)
    assert "Quota exhausted" in str(error)
    assert (error.status, error.retry_after) == (429, 3600.0)
    assert of_kind(events, "provider_attempt")[0].wait_s is None


@pytest.mark.parametrize(("status", "kind"), [(500, "api_error"), (502, "bad_gateway"),
                                              (503, "unavailable"), (529, "overloaded_error")])
async def test_server_errors_are_retried_twice_with_backoff_then_fail(
    harness: Harness, status: int, kind: str
) -> None:
    replies = [harness.error(status, kind, "Overloaded") for _ in range(3)]

    replay, sleeps, events, error = await call(harness, replies, jitter=1.0)

    assert len(replay.requests) == 3
    assert sleeps.waits == [0.375, 0.75]  # 0.5 and 1.0 s, times the lowest jitter (0.75)
    assert str(error).startswith(
        f"{harness.name}: provider unavailable after 3 attempts (last: HTTP {status} ")
    assert "Overloaded" in str(error)
    assert error.status == status
    assert error.retryable
    assert [(a.attempt, a.wait_s) for a in of_kind(events, "provider_attempt")] == [
        (1, 0.375), (2, 0.75), (3, None)]


async def test_the_backoff_doubles_up_to_eight_seconds(harness: Harness) -> None:
    replies = [harness.error(500, "api_error", "Boom") for _ in range(6)] + [harness.ok()]

    replay, sleeps, _, response = await call(harness, replies, max_retries=6)

    assert response.ai_message.text == "ok"
    assert len(replay.requests) == 7
    assert sleeps.waits == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]


async def test_max_retries_zero_means_a_single_attempt(harness: Harness) -> None:
    replay, sleeps, _, error = await call(harness, [harness.error(500, "api_error", "Boom")],
                                          max_retries=0)

    assert len(replay.requests) == 1
    assert sleeps.waits == []
    assert str(error).startswith(f"{harness.name}: HTTP 500")


@pytest.mark.parametrize("status", [408, 409])
async def test_timeout_and_conflict_statuses_are_retried(harness: Harness, status: int) -> None:
    replies = [harness.error(status, "conflict", "Try again"), harness.ok()]

    replay, _, _, response = await call(harness, replies)

    assert len(replay.requests) == 2
    assert response.ai_message.text == "ok"


@pytest.mark.parametrize(("status", "kind", "message"), [
    (400, "invalid_request_error", "messages: field required"),
    (404, "not_found_error", "model: nope"),
    (422, "unprocessable", "bad schema"),
])
async def test_client_errors_are_not_retried_and_carry_the_providers_message(
    harness: Harness, status: int, kind: str, message: str
) -> None:
    replay, sleeps, events, error = await call(harness, [harness.error(status, kind, message)])

    assert len(replay.requests) == 1
    assert sleeps.waits == []
    assert error.status == status
    assert error.retryable is False
    assert error.error_type == kind
    assert message in str(error)
    assert [a.retryable for a in of_kind(events, "provider_attempt")] == [False]


async def test_a_401_points_at_the_key(harness: Harness) -> None:
    replay, _, _, error = await call(harness, [harness.error(401, "authentication_error",
                                                             "invalid x-api-key")])

    assert len(replay.requests) == 1
    assert f"check the API key and permissions for provider {harness.name}" in str(error)


async def test_x_should_retry_overrides_the_status_rule(harness: Harness) -> None:
    replies = [harness.error(500, "api_error", "final", {"x-should-retry": "false"})]
    replay, _, _, error = await call(harness, replies)
    assert len(replay.requests) == 1
    assert error.retryable is False

    replies = [harness.error(400, "busy", "again", {"x-should-retry": "true"}), harness.ok()]
    replay, _, _, response = await call(harness, replies)
    assert len(replay.requests) == 2
    assert response.ai_message.text == "ok"


async def test_a_connection_reset_is_retried_up_to_the_limit(harness: Harness) -> None:
    reset = [httpx.ReadError("[Errno 104] Connection reset by peer") for _ in range(3)]

    replay, sleeps, events, error = await call(harness, reset)

    assert len(replay.requests) == 3
    assert len(sleeps.waits) == 2
    assert str(error) == (f"{harness.name}: provider unavailable after 3 attempts (last: "
                          "connection failed (ReadError: [Errno 104] Connection reset by peer))")
    assert error.status is None
    assert error.retryable
    assert [a.status for a in of_kind(events, "provider_attempt")] == [None, None, None]


async def test_a_refused_connection_then_success(harness: Harness) -> None:
    replies = [httpx.ConnectError("[Errno 111] Connection refused"), harness.ok()]

    replay, sleeps, _, response = await call(harness, replies)

    assert len(replay.requests) == 2
    assert sleeps.waits == [0.5]
    assert response.ai_message.text == "ok"


async def test_timeouts_are_retried_and_named_with_their_limit(harness: Harness) -> None:
    replies: list[Any] = [httpx.ReadTimeout("timed out") for _ in range(3)]

    replay, _, events, error = await call(harness, replies, read_timeout=0.5)

    assert len(replay.requests) == 3
    assert str(error) == (f"{harness.name}: provider unavailable after 3 attempts (last: "
                          "timed out after 0.5 s waiting for data (ReadTimeout))")
    assert isinstance(error, ModelTimeout)  # a timeout still, after its retries
    assert [a.timed_out for a in of_kind(events, "provider_attempt")] == [True] * 3

    replay, _, _, error = await call(harness, [httpx.ConnectTimeout("slow")] * 3,
                                     connect_timeout=0.25, max_retries=0)
    assert str(error) == f"{harness.name}: timed out after 0.25 s connecting (ConnectTimeout)"


async def test_a_200_with_garbage_is_an_invalid_response_and_not_retried(
    harness: Harness
) -> None:
    page = "<html><body><h1>502 Bad Gateway</h1>" + "x" * 2000 + "</body></html>"
    replies = [httpx.Response(200, headers={"content-type": "text/html"}, content=page)]

    replay, _, events, error = await call(harness, replies)

    assert len(replay.requests) == 1
    [attempt] = of_kind(events, "provider_attempt")
    assert (attempt.status, attempt.retryable, attempt.wait_s) == (200, False, None)
    assert str(error).startswith(f"{harness.name}: invalid provider response (the body is not "
                                 "JSON); body starts: <html><body><h1>502 Bad Gateway</h1>")
    assert "more bytes]" in str(error)
    assert len(str(error)) < 700
    assert error.retryable is False


async def test_a_200_with_json_of_the_wrong_shape_is_an_invalid_response(
    harness: Harness
) -> None:
    replay, _, _, error = await call(harness, [json_response(200, {"unexpected": True})])

    assert len(replay.requests) == 1
    assert "invalid provider response" in str(error)
    assert '{"unexpected": true}' in str(error)


async def test_a_200_carrying_an_error_object_is_reported(harness: Harness) -> None:
    body = harness.error_body("server_error", "Upstream failed")

    replay, _, _, error = await call(harness, [json_response(200, body)])

    assert len(replay.requests) == 1
    assert str(error).startswith(f"{harness.name}: the provider answered HTTP 200 with an "
                                 "error: server_error: Upstream failed")
    assert (error.status, error.error_type, error.retryable) == (200, "server_error", False)


async def test_the_default_timeouts_suit_llms(harness: Harness) -> None:
    model = harness.model(Replay([]))

    assert (DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT) == (5.0, 120.0)
    assert (model.http.timeouts.connect, model.http.timeouts.read) == (5.0, 120.0)
    assert model.http.retry.max_retries == 2


async def test_a_streamed_call_is_retried_before_its_first_byte(harness: Harness) -> None:
    replies = [harness.error(529, "overloaded_error", "Overloaded"), harness.ok_stream()]

    replay, sleeps, _, response = await call(harness, replies, stream=True)

    assert len(replay.requests) == 2
    assert sleeps.waits == [0.5]
    assert response.ai_message.text == "ok"


async def test_retries_happen_once_not_nested(harness: Harness) -> None:
    replay, _, _, _ = await call(harness, [harness.error(503, "unavailable", "down")] * 3)

    # One loop: 1 + max_retries requests, never (1 + n) squared.
    assert len(replay.requests) == 3
