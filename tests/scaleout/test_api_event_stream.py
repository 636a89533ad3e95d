"""The API's event stream (SSE) and long poll across processes: a `db_worker` process
executes the run and announces its batches on the Redis channel layer; the stream served
in this (test) process wakes on them and reads the events from PostgreSQL.

The stream's heartbeat and safety poll are set beyond the test's bounds, so the events
arriving before the run ends prove the push path (the run is marked watched, the worker
announces to the run's group, the stream's channel receives)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer
from django.contrib.auth.models import AbstractUser
from django.test import AsyncClient

from tools_app.fake_llm import BackgroundServer
from tools_app.live.run_waits import close_read_connections
from tools_app.models import ErrorPolicy, Run, RunEvent, ToolRegistration
from tools_app.web.api.tokens import create_token

from .conftest import RUN_TIMEOUT, WorkerPool, fake_endpoint, start_run

pytestmark = [pytest.mark.scaleout, pytest.mark.django_db(transaction=True)]

THREE_ROUNDS = {"latency_ms": 300, "steps": [
    {"tool_calls": [{"name": "tally", "arguments": {"tag": "one"}}]},
    {"tool_calls": [{"name": "tally", "arguments": {"tag": "two"}}]},
    {"text": "All done: {last_result}"},
]}


@pytest.fixture(autouse=True)
def _push_only(settings: Any) -> Iterator[None]:
    settings.AGENTFORGE_API_STREAM_HEARTBEAT_SECONDS = 600
    settings.AGENTFORGE_LIVE_POLL_SECONDS = 600
    yield
    close_read_connections()  # before the test database is flushed


@pytest.fixture
def streamed_run(
    bob: AbstractUser, fake_llm: Callable[[dict[str, Any]], BackgroundServer],
    slow_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> Run:
    assert isinstance(get_channel_layer(), RedisChannelLayer)  # the default
    server = fake_llm({"scripts": {"live": THREE_ROUNDS}})
    return start_run(fake_endpoint(server, "live"), [slow_tools["tally"]], policy, user=bob)


def messages_of(raw: bytes) -> list[dict[str, Any]]:
    found = []
    for block in raw.decode().split("\n\n"):
        fields = dict(line.partition(": ")[::2] for line in block.splitlines()
                      if not line.startswith(":"))
        if "data" in fields:
            found.append({**fields, "data": json.loads(fields["data"])})
    return found


async def test_a_stream_follows_a_run_executed_by_a_worker_process(
    streamed_run: Run, bob: AbstractUser, workers: WorkerPool,
) -> None:
    run = streamed_run
    _, token = await sync_to_async(create_token)(bob, "ci")
    response = await AsyncClient().get(f"/api/runs/{run.pk}/events/stream",
                                       headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    content = aiter(response.streaming_content)
    chunks: list[bytes] = []
    async with asyncio.timeout(RUN_TIMEOUT):
        while b"data:" not in b"".join(chunks):  # subscribed, the history read
            chunks.append(await anext(content))
        workers.start("w-sse")
        chunks.extend([chunk async for chunk in content])  # ends with the run

    messages = messages_of(b"".join(chunks))
    stored = [(seq, kind) async for seq, kind in RunEvent.objects.filter(run=run)
              .order_by("seq").values_list("seq", "kind")]
    assert [(int(m["id"]), m["event"]) for m in messages] == stored
    assert messages[-1]["data"]["payload"]["status"] == "succeeded"
    assert len(chunks) > 3, "the events arrived live, in several chunks"


async def test_a_long_poll_answers_when_a_worker_process_stores_an_event(
    streamed_run: Run, bob: AbstractUser, workers: WorkerPool,
) -> None:
    run = streamed_run
    _, token = await sync_to_async(create_token)(bob, "ci")
    response = await AsyncClient().get(f"/api/runs/{run.pk}/events?after=1&wait=30",
                                       headers={"Authorization": f"Bearer {token}"})
    assert response.streaming  # nothing after seq 1 yet: the answer waits
    async with asyncio.timeout(RUN_TIMEOUT):
        workers.start("w-poll")
        body = b"".join([chunk async for chunk in response.streaming_content])
    answer = json.loads(body)
    assert answer["events"][0]["seq"] == 2
    assert answer["last_seq"] == answer["events"][-1]["seq"]
