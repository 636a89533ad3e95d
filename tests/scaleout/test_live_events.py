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
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from channels_redis.core import RedisChannelLayer
from django.contrib.auth.models import AbstractUser
from django.test import Client

from agentforge_web.asgi import application
from tools_app.fake_llm import BackgroundServer
from tools_app.models import TERMINAL_STATUSES, ErrorPolicy, Run, ToolRegistration

from .conftest import RUN_TIMEOUT, WorkerPool, fake_endpoint, start_run

pytestmark = [pytest.mark.scaleout, pytest.mark.django_db(transaction=True)]

ORIGIN = b"http://127.0.0.1:8000"
RECEIVE_TIMEOUT = 30.0  # one message; covers a worker process starting up
TERMINAL = {str(s) for s in TERMINAL_STATUSES}
SEQ_RE = re.compile(r'<span id="run-seq" data-seq="(\d+)"')
STATUS_RE = re.compile(r'<section id="run-header".*?data-status="([a-z_]+)"', re.DOTALL)
ROUND_RE = re.compile(r'<section id="(round-\d+)"')

THREE_ROUNDS = {"latency_ms": 300, "steps": [
    {"tool_calls": [{"name": "tally", "arguments": {"tag": "one"}}]},
    {"tool_calls": [{"name": "tally", "arguments": {"tag": "two"}}]},
    {"text": "All done: {last_result}"},
]}


# -- helpers ---------------------------------------------------------------------------


@sync_to_async
def session_cookie(user: AbstractUser) -> str:
    client = Client()
    client.force_login(user)
    return str(client.cookies["sessionid"].value)


@pytest.fixture
async def sockets() -> AsyncIterator[list[WebsocketCommunicator]]:
    opened: list[WebsocketCommunicator] = []
    yield opened
    for comm in opened:
        await comm.disconnect(timeout=RECEIVE_TIMEOUT)


async def open_socket(sockets: list[WebsocketCommunicator], run: Run,
                      user: AbstractUser) -> WebsocketCommunicator:
    headers = [(b"host", b"127.0.0.1:8000"), (b"origin", ORIGIN),
               (b"cookie", f"sessionid={await session_cookie(user)}".encode())]
    comm = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/", headers=headers)
    sockets.append(comm)
    connected, code = await comm.connect(timeout=RECEIVE_TIMEOUT)
    assert connected, f"refused with {code}"
    await comm.send_json_to({"type": "resume", "after": 0})
    return comm


def seq_of(batch: str) -> int:
    found = SEQ_RE.findall(batch)
    assert len(found) == 1, batch[:500]
    return int(found[0])


def status_of(batch: str) -> str:
    found = STATUS_RE.findall(batch)
    assert len(found) == 1, batch[:500]
    return str(found[0])


async def last_seq(run: Run) -> int:
    return (await Run.objects.aget(pk=run.pk)).last_seq


async def receive_until_done(comm: WebsocketCommunicator, run: Run, pool: WorkerPool,
                             deadline: float = RUN_TIMEOUT) -> list[str]:
    """Batches until the header is terminal and the client holds Run.last_seq (bounded)."""
    batches: list[str] = []
    give_up = time.monotonic() + deadline
    while time.monotonic() < give_up:
        try:
            batches.append(await comm.receive_from(timeout=RECEIVE_TIMEOUT))
        except TimeoutError:
            break
        if status_of(batches[-1]) in TERMINAL and seq_of(batches[-1]) == await last_seq(run):
            return batches
    raise AssertionError(f"no terminal state after {len(batches)} batches "
                         f"(last seq {[seq_of(b) for b in batches][-1:]})\n{pool.logs()}")


async def wait_terminal(run: Run, pool: WorkerPool, timeout: float = RUN_TIMEOUT) -> Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = await Run.objects.aget(pk=run.pk)
        if current.status in TERMINAL:
            return current
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run.pk} did not finish within {timeout} s\n{pool.logs()}")


@pytest.fixture
def paused_channel(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Consumers in this process do not read their channel until the event is set.

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
    assert isinstance(get_channel_layer(), RedisChannelLayer)
    server = fake_llm({"scripts": {"live": THREE_ROUNDS}})
    return start_run(fake_endpoint(server, "live"), [slow_tools["tally"]], policy, user=bob)


# -- tests -----------------------------------------------------------------------------


async def test_a_socket_follows_a_run_executed_by_a_worker_process(
    watched_run: Run, bob: AbstractUser, workers: WorkerPool,
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
