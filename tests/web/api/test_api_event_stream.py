"""Live events for API clients: `GET /api/runs/<id>/events/stream` (Server-Sent Events)
and the long poll `GET /api/runs/<id>/events?after=N&wait=S`.

A real run of the scripted model executes on the test's event loop while Django's async
test client reads the answer. The heartbeat and the safety poll are set far beyond the
tests' bounds, so what wakes the stream is the channel-layer notification (the in-memory
layer here; Redis in the scale-out pass, where these run again on PostgreSQL).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import AbstractUser
from django.db import OperationalError
from django.test import AsyncClient

from tests.web.support import MISSING_RUN, Api, error_of, start_run
from tools_app.live import run_waits
from tools_app.live.run_waits import RunWaits, close_read_connections
from tools_app.models import (
    ApiToken,
    ErrorPolicy,
    ModelEndpoint,
    Run,
    RunEvent,
    ToolRegistration,
)
from tools_app.runs import tasks
from tools_app.runs.store.selectors import StoredEvent
from tools_app.web.api import event_stream
from tools_app.web.api.event_stream import STREAMS
from tools_app.web.api.tokens import create_token

pytestmark = [pytest.mark.both, pytest.mark.django_db(transaction=True)]

BOUND = 30.0  # an upper bound for each wait, never a measured duration


@pytest.fixture(autouse=True)
def _push_only(settings: Any) -> None:
    """No heartbeat and no safety poll within a test: only notifications wake a stream."""
    settings.AGENTFORGE_API_STREAM_HEARTBEAT_SECONDS = 600
    settings.AGENTFORGE_LIVE_POLL_SECONDS = 600


@pytest.fixture(autouse=True)
def _close_read_connections() -> Iterator[None]:
    """The streams' read thread keeps its connection: closed before the test database
    is flushed or dropped."""
    yield
    close_read_connections()


@pytest.fixture
def bob_token(bob: AbstractUser) -> str:
    return create_token(bob, "ci")[1]


@pytest.fixture
def bob_run(bob: AbstractUser, weather_endpoint: ModelEndpoint,
            demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> Run:
    """bob's queued run (its first event stored), not executing until a test says."""
    return start_run(bob, weather_endpoint, [demo_tools["get_weather"]], policy)


def auth(token: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} | headers


async def execute(run: Run) -> str | None:
    """The run's task, as a worker runs it, on this loop."""
    return await tasks.execute_run.acall(str(run.pk))


async def stored(run: Run) -> list[tuple[int, str]]:
    return [(seq, kind) async for seq, kind in
            RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", "kind")]


def parse_sse(raw: bytes) -> tuple[list[dict[str, Any]], list[str]]:
    """The messages (id, event, data parsed) and the comment lines of an SSE body."""
    messages, comments = [], []
    for block in raw.decode().split("\n\n"):
        fields: dict[str, Any] = {}
        for line in block.splitlines():
            if line.startswith(":"):
                comments.append(line)
            else:
                name, _, value = line.partition(": ")
                fields[name] = value
        if "data" in fields:
            fields["data"] = json.loads(fields["data"])
            messages.append(fields)
    return messages, comments


async def read_all(content: AsyncIterator[bytes]) -> bytes:
    """The whole streamed body: the stream must end by itself within BOUND."""
    async with asyncio.timeout(BOUND):
        return b"".join([chunk async for chunk in content])


# -- the stream ------------------------------------------------------------------------


async def test_a_stream_follows_a_run_from_start_to_end(bob_run: Run, bob_token: str) -> None:
    client = AsyncClient()
    response = await client.get(f"/api/runs/{bob_run.pk}/events/stream", headers=auth(bob_token))
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-store"
    content = aiter(response.streaming_content)

    # The stored history first: the queued run's status event.
    async with asyncio.timeout(BOUND):
        head = await anext(content)
        while b"data:" not in head:
            head += await anext(content)
    first, _ = parse_sse(head)
    assert [(m["id"], m["event"]) for m in first] == [("1", "run_status")]
    assert first[0]["data"]["payload"]["status"] == "queued"

    # Then the run executes; the stream ends by itself after its last event.
    worker = asyncio.ensure_future(execute(bob_run))
    rest = await read_all(content)
    assert await worker == "succeeded"

    messages = first + parse_sse(rest)[0]
    events = await stored(bob_run)
    assert [(int(m["id"]), m["event"]) for m in messages] == events
    assert [seq for seq, _ in events] == list(range(1, len(events) + 1))
    assert messages[-1]["event"] == "run_status"
    assert messages[-1]["data"]["payload"]["status"] == "succeeded"
    assert "tool_call_finished" in {m["event"] for m in messages}


async def test_each_message_carries_what_the_events_list_returns(
    bob_run: Run, bob_token: str,
) -> None:
    assert await execute(bob_run) == "succeeded"
    listed = await sync_to_async(Api(bob_token).get)(f"/api/runs/{bob_run.pk}/events")
    response = await AsyncClient().get(f"/api/runs/{bob_run.pk}/events/stream",
                                       headers=auth(bob_token))
    messages, _ = parse_sse(await read_all(response.streaming_content))
    assert [m["data"] for m in messages] == listed.json()["events"]


async def test_untrusted_text_in_a_payload_stays_on_its_data_line(
    bob_run: Run, bob_token: str,
) -> None:
    """The data line carries the payload's stored JSON text: line breaks, a forged
    `id:` line, quotes and markup in untrusted text stay escaped inside it."""
    assert await execute(bob_run) == "succeeded"
    last = (await stored(bob_run))[-1][0]
    text = 'one\ntwo\r\n\nid: 999\nevent: x\n"quoted" </script> <b>ünïcode</b>'
    await RunEvent.objects.acreate(run=bob_run, seq=last + 1, kind="tool_call_finished",
                                   payload={"result": text, "nested": [{"t": text}]})
    response = await AsyncClient().get(f"/api/runs/{bob_run.pk}/events/stream?after={last}",
                                       headers=auth(bob_token))
    raw = await read_all(response.streaming_content)
    assert raw.count(b"\nid: ") == 1
    assert raw.count(b"\ndata: ") == 1
    messages, _ = parse_sse(raw)
    listed = await sync_to_async(Api(bob_token).get)(
        f"/api/runs/{bob_run.pk}/events?after={last}")
    assert [m["data"] for m in messages] == listed.json()["events"]
    assert messages[0]["data"]["payload"]["result"] == text


def test_stored_json_with_line_breaks_is_sent_on_one_line() -> None:
    """JSON text as stored holds no line break outside its strings; text that did
    would end the data line, so it is encoded again."""
    event = StoredEvent(7, "note", '{\n  "a": "x\\ny",\r\n  "b": [1, 2]\n}',
                        datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    message = event_stream.sse_message(event)
    lines = message.decode().split("\n")
    assert lines[:2] == ["id: 7", "event: note"]
    assert lines[3:] == ["", ""]
    assert json.loads(lines[2].removeprefix("data: ")) == {
        "seq": 7, "kind": "note", "payload": {"a": "x\ny", "b": [1, 2]},
        "created_at": "2026-01-02T03:04:05+00:00"}


async def test_resuming_with_last_event_id_sends_only_later_events(
    bob_run: Run, bob_token: str,
) -> None:
    assert await execute(bob_run) == "succeeded"
    events = await stored(bob_run)
    assert len(events) > 4
    for headers, query in (({"Last-Event-ID": "3"}, ""), ({}, "?after=3"),
                           # The header wins: it is what a reconnecting EventSource sends.
                           ({"Last-Event-ID": "3"}, "?after=1")):
        response = await AsyncClient().get(f"/api/runs/{bob_run.pk}/events/stream{query}",
                                           headers=auth(bob_token, **headers))
        messages, _ = parse_sse(await read_all(response.streaming_content))
        assert [(int(m["id"]), m["event"]) for m in messages] == events[3:]


async def test_a_stream_resumed_at_the_end_of_an_ended_run_closes_at_once(
    bob_run: Run, bob_token: str,
) -> None:
    assert await execute(bob_run) == "succeeded"
    last = (await stored(bob_run))[-1][0]
    response = await AsyncClient().get(f"/api/runs/{bob_run.pk}/events/stream",
                                       headers=auth(bob_token, **{"Last-Event-ID": str(last)}))
    assert parse_sse(await read_all(response.streaming_content))[0] == []


async def test_a_stream_that_reads_the_terminal_event_ends_even_if_the_status_lagged(
    bob_run: Run, bob_token: str,
) -> None:
    """The run's end committed between the stream's read of its status and of its events:
    its notification may be behind the stream already, so the terminal event itself must
    end it. Staged by moving the stored status back (a test-only write)."""
    assert await execute(bob_run) == "succeeded"
    await Run.objects.filter(pk=bob_run.pk).aupdate(status="running")
    response = await AsyncClient().get(f"/api/runs/{bob_run.pk}/events/stream",
                                       headers=auth(bob_token, **{"Last-Event-ID": "3"}))
    messages, _ = parse_sse(await read_all(response.streaming_content))
    assert messages[-1]["data"]["payload"]["status"] == "succeeded"


async def test_without_a_channel_layer_a_stream_polls(
    bob_run: Run, bob_token: str, settings: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(run_waits, "get_channel_layer", lambda: None)
    settings.AGENTFORGE_LIVE_POLL_SECONDS = 0.05
    response = await AsyncClient().get(f"/api/runs/{bob_run.pk}/events/stream",
                                       headers=auth(bob_token))
    content = aiter(response.streaming_content)
    async with asyncio.timeout(BOUND):
        head = await anext(content)
        while b"data:" not in head:
            head += await anext(content)
    worker = asyncio.ensure_future(execute(bob_run))
    messages = parse_sse(head + await read_all(content))[0]
    assert await worker == "succeeded"
    assert [(int(m["id"]), m["event"]) for m in messages] == await stored(bob_run)


async def test_a_quiet_stream_sends_heartbeats(
    bob_run: Run, bob_token: str, settings: Any,
) -> None:
    settings.AGENTFORGE_API_STREAM_HEARTBEAT_SECONDS = 0.05
    response = await AsyncClient().get(f"/api/runs/{bob_run.pk}/events/stream",
                                       headers=auth(bob_token))
    content = aiter(response.streaming_content)
    seen = b""
    async with asyncio.timeout(BOUND):
        while seen.count(b": keepalive") < 2:
            seen += await anext(content)
    assert parse_sse(seen)[0][0]["id"] == "1"
    await content.aclose()  # type: ignore[attr-defined]


async def test_a_stream_ends_at_its_heartbeat_once_its_token_is_revoked(
    bob_run: Run, bob_token: str, settings: Any,
) -> None:
    settings.AGENTFORGE_API_STREAM_HEARTBEAT_SECONDS = 0.05
    response = await AsyncClient().get(f"/api/runs/{bob_run.pk}/events/stream",
                                       headers=auth(bob_token))
    content = aiter(response.streaming_content)
    seen = b""
    async with asyncio.timeout(BOUND):
        while b": keepalive" not in seen:
            seen += await anext(content)
    await ApiToken.objects.all().adelete()
    rest = await read_all(content)  # ends by itself, the run still queued
    assert parse_sse(rest)[0] == []
    assert (await Run.objects.aget(pk=bob_run.pk)).status == "queued"


async def test_a_database_error_ends_the_stream_and_the_long_poll_cleanly(
    bob_run: Run, bob_token: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    def failing(run_id: str, after: int) -> Any:
        raise OperationalError("the database went away")

    monkeypatch.setattr(event_stream, "read_after", failing)
    response = await AsyncClient().get(f"/api/runs/{bob_run.pk}/events/stream",
                                       headers=auth(bob_token))
    assert await read_all(response.streaming_content) == b"retry: 2000\n\n"
    status, answer = await long_poll(bob_run, bob_token, "?after=1&wait=5")
    assert (status, answer) == (200, {"events": [], "last_seq": 1})


def test_stream_without_a_valid_token_is_401_json(bob_run: Run) -> None:
    for headers in ({}, {"Authorization": "Bearer afw_not-a-real-token"}):
        response = Api(None).get(f"/api/runs/{bob_run.pk}/events/stream", **headers)
        assert error_of(response, 401)["code"] == "unauthorized"
        assert response["WWW-Authenticate"] == "Bearer"


def test_another_users_run_is_404_json(bob_run: Run, charlie: AbstractUser) -> None:
    charlie_api = Api(create_token(charlie, "ci")[1])
    for path in (f"/api/runs/{bob_run.pk}/events/stream",
                 f"/api/runs/{MISSING_RUN}/events/stream",
                 f"/api/runs/{bob_run.pk}/events?after=0&wait=5"):
        assert error_of(charlie_api.get(path), 404)["code"] == "not_found"


@pytest.mark.parametrize(("query", "headers", "field"), [
    ("?after=-1", {}, "after"),
    ("?after=x", {}, "after"),
    ("", {"Last-Event-ID": "abc"}, "Last-Event-ID"),
])
def test_a_bad_resume_point_is_400(
    bob_run: Run, bob_token: str, query: str, headers: dict[str, str], field: str,
) -> None:
    response = Api(bob_token).get(f"/api/runs/{bob_run.pk}/events/stream{query}", **headers)
    error = error_of(response, 400)
    assert (error["code"], error["field"]) == ("invalid_field", field)


async def test_streams_per_user_are_bounded(
    bob_run: Run, bob_token: str, settings: Any,
) -> None:
    settings.AGENTFORGE_API_STREAMS_PER_USER = 1
    path = f"/api/runs/{bob_run.pk}/events/stream"
    first = await AsyncClient().get(path, headers=auth(bob_token))
    assert first.status_code == 200
    second = await AsyncClient().get(path, headers=auth(bob_token))
    assert second.status_code == 429
    assert json.loads(second.content)["error"]["code"] == "too_many_streams"

    await sync_to_async(first.close)()  # the stream ends: its place is free again
    assert STREAMS.open((await Run.objects.aget(pk=bob_run.pk)).created_by_id) == 0
    third = await AsyncClient().get(path, headers=auth(bob_token))
    assert third.status_code == 200
    await sync_to_async(third.close)()


def test_the_stream_is_in_the_openapi_document(client: Any) -> None:
    document = client.get("/api/openapi.json").json()
    operation = document["paths"]["/api/runs/{run_id}/events/stream"]["get"]
    assert "text/event-stream" in operation["responses"]["200"]["content"]
    assert {"after", "wait"} <= {
        p["name"] for p in document["paths"]["/api/runs/{run_id}/events"]["get"]["parameters"]}


# -- the long poll ---------------------------------------------------------------------


async def long_poll(run: Run, token: str, query: str) -> tuple[int, Any]:
    response = await AsyncClient().get(f"/api/runs/{run.pk}/events{query}", headers=auth(token))
    if response.streaming:
        return response.status_code, json.loads(await read_all(response.streaming_content))
    return response.status_code, json.loads(response.content)


async def test_a_long_poll_answers_as_soon_as_an_event_is_stored(
    bob_run: Run, bob_token: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    waiting = asyncio.Event()
    wait = RunWaits.wait

    async def noted(self: RunWaits, after: int, timeout: float) -> bool:
        waiting.set()
        return await wait(self, after, timeout)

    monkeypatch.setattr(RunWaits, "wait", noted)
    response = await AsyncClient().get(f"/api/runs/{bob_run.pk}/events?after=1&wait=30",
                                       headers=auth(bob_token))
    assert response.streaming  # nothing after seq 1: the answer waits
    body = asyncio.ensure_future(read_all(response.streaming_content))
    async with asyncio.timeout(BOUND):
        await waiting.wait()  # subscribed, read, now waiting: only a notification wakes it
    worker = asyncio.ensure_future(execute(bob_run))
    answer = json.loads(await body)
    # Long before its 30 s (BOUND would fail it otherwise): the run's first batch.
    assert answer["events"][0]["seq"] == 2
    assert answer["last_seq"] == answer["events"][-1]["seq"]
    assert await worker == "succeeded"


async def test_a_long_poll_answers_empty_after_its_wait(bob_run: Run, bob_token: str) -> None:
    started = time.monotonic()
    status, answer = await long_poll(bob_run, bob_token, "?after=1&wait=0.2")
    assert time.monotonic() - started >= 0.2
    assert (status, answer) == (200, {"events": [], "last_seq": 1})


async def test_a_long_poll_on_an_ended_run_does_not_wait(bob_run: Run, bob_token: str) -> None:
    assert await execute(bob_run) == "succeeded"
    last = (await stored(bob_run))[-1][0]
    started = time.monotonic()
    status, answer = await long_poll(bob_run, bob_token, f"?after={last}&wait=30")
    assert time.monotonic() - started < 25
    assert (status, answer) == (200, {"events": [], "last_seq": last})


@pytest.mark.parametrize("wait", ["-1", "x", "nan", "inf", ""])
def test_a_bad_wait_is_400(bob_run: Run, bob_token: str, wait: str) -> None:
    response = Api(bob_token).get(f"/api/runs/{bob_run.pk}/events?after=1&wait={wait}")
    error = error_of(response, 400)
    assert (error["code"], error["field"]) == ("invalid_field", "wait")
