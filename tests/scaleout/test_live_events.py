"""Live timeline events across processes (reliability plan E): a `db_worker` process
executes the run, publishes "seq N is stored" on the Redis channel layer, and the
WebSocket consumer in this (test) process relays the fragments it reads by seq.

The notification is only a nudge: each flush reads every event after the last seq the
client has, so notifications dropped by a full channel (channels_redis silently skips
channels over capacity) or never received at all (a client that connects late) still
end with the client holding the whole history.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from channels_redis.core import RedisChannelLayer
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.contrib.auth.models import AbstractUser

from tools_app.fake_llm import BackgroundServer
from tools_app.models import ErrorPolicy, Run, ToolRegistration

from .conftest import WorkerPool, fake_endpoint, start_run
from .sockets import (
    RECEIVE_TIMEOUT,
    open_socket,
    receive_until_done,
    seq_of,
    status_of,
    wait_terminal,
)

pytestmark = [pytest.mark.scaleout, pytest.mark.django_db(transaction=True)]

ROUND_RE = re.compile(r'<section id="(round-\d+)"')

THREE_ROUNDS = {"latency_ms": 300, "steps": [
    {"tool_calls": [{"name": "tally", "arguments": {"tag": "one"}}]},
    {"tool_calls": [{"name": "tally", "arguments": {"tag": "two"}}]},
    {"text": "All done: {last_result}"},
]}


# -- helpers ---------------------------------------------------------------------------


@pytest.fixture
async def sockets() -> AsyncIterator[list[WebsocketCommunicator]]:
    opened: list[WebsocketCommunicator] = []
    yield opened
    for comm in opened:
        await comm.disconnect(timeout=RECEIVE_TIMEOUT)


@pytest.fixture
def paused_channel(monkeypatch: pytest.MonkeyPatch, core_layer: None) -> asyncio.Event:
    """On the core layer, consumers in this process do not read their channel until the
    event is set.

    A consumer busy elsewhere, or a process stalled for a while: the worker's
    notifications pile up in Redis, and past the channel's capacity they are dropped.
    """
    reading = asyncio.Event()
    receive = RedisChannelLayer.receive

    async def paused_receive(self: RedisChannelLayer, channel: str) -> Any:
        await reading.wait()
        return await receive(self, channel)

    monkeypatch.setattr(RedisChannelLayer, "receive", paused_receive)
    return reading


@pytest.fixture
def watched_run(
    bob: AbstractUser, fake_llm: Callable[[dict[str, Any]], BackgroundServer],
    slow_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> Run:
    """bob's queued three-round run on the fake provider (300 ms per model turn)."""
    assert isinstance(get_channel_layer(), RedisPubSubChannelLayer | RedisChannelLayer)
    server = fake_llm({"scripts": {"live": THREE_ROUNDS}})
    return start_run(fake_endpoint(server, "live"), [slow_tools["tally"]], policy, user=bob)


# -- tests -----------------------------------------------------------------------------


@pytest.fixture(params=["core", "pubsub"])
def either_layer(request: pytest.FixtureRequest) -> None:
    request.getfixturevalue(f"{request.param}_layer")


async def test_a_socket_follows_a_run_executed_by_a_worker_process(
    either_layer: None, watched_run: Run, bob: AbstractUser, workers: WorkerPool,
    sockets: list[WebsocketCommunicator],
) -> None:
    run = watched_run
    comm = await open_socket(sockets, run, bob)
    first = await comm.receive_from(timeout=RECEIVE_TIMEOUT)
    assert (status_of(first), seq_of(first)) == ("queued", 1)

    workers.start("w-live")
    live = await receive_until_done(comm, run, workers)

    final = await Run.objects.aget(pk=run.pk)
    assert final.status == "succeeded"
    assert status_of(live[-1]) == "succeeded"
    assert seq_of(live[-1]) == final.last_seq
    seqs = [seq_of(b) for b in live]
    assert seqs == sorted(set(seqs)), "each flush sends only what is new"
    assert len(live) >= 3, "the events arrived live, in several batches"
    assert "running" in {status_of(b) for b in live}
    assert {r for b in live for r in ROUND_RE.findall(b)} == {"round-0", "round-1", "round-2"}

    # A client that connects after the end gets everything from the database.
    late = await open_socket(sockets, run, bob)
    replay = await receive_until_done(late, run, workers)
    assert status_of(replay[-1]) == "succeeded"
    assert seq_of(replay[-1]) == final.last_seq
    assert {r for b in replay for r in ROUND_RE.findall(b)} == {"round-0", "round-1", "round-2"}


async def test_dropped_notifications_still_end_in_the_final_state(
    watched_run: Run, bob: AbstractUser, workers: WorkerPool,
    sockets: list[WebsocketCommunicator], paused_channel: asyncio.Event, settings: Any,
) -> None:
    # The socket's own poll (every few seconds, for a channel layer that lost its
    # connection) must not read while the worker starts and runs: only notifications.
    settings.AGENTFORGE_LIVE_POLL_SECONDS = 600
    run = watched_run
    comm = await open_socket(sockets, run, bob)
    first = await comm.receive_from(timeout=RECEIVE_TIMEOUT)  # the resume reads the database
    assert seq_of(first) == 1

    # The worker's channel layer keeps at most one message per channel: while this
    # process does not read, every later notification of the run is dropped.
    worker = workers.start("w-drop", CHANNEL_CAPACITY="1")
    final = await wait_terminal(run, workers)
    assert final.status == "succeeded"
    assert final.last_seq > 10
    assert await comm.receive_nothing(timeout=0.2)
    paused_channel.set()

    batches = await receive_until_done(comm, run, workers)

    assert len(batches) == 1, "one notification survived; its flush read everything"
    assert status_of(batches[0]) == "succeeded"
    assert seq_of(batches[0]) == final.last_seq
    assert set(ROUND_RE.findall(batches[0])) == {"round-0", "round-1", "round-2"}
    assert f"channels over capacity in group run.{run.pk}" in worker.log()
    assert await comm.receive_nothing(timeout=0.5)
