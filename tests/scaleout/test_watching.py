"""Runs nobody watches are not announced on Redis's core layer (`live.watching`): a viewer's socket
marks its run watched before its first read and renews the mark at its polls; a worker's
notifications go to a run's group only while the run is marked, and the runs asking in
one turn of the loop share one MGET."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from channels_redis.core import RedisChannelLayer
from django.contrib.auth.models import AbstractUser

from tools_app.live import watching
from tools_app.live.notify import group_name
from tools_app.models import Run
from tools_app.runs.store.eventlog import notify

from .sockets import open_socket

pytestmark = pytest.mark.scaleout


@pytest.fixture(autouse=True)
def _on_the_core_layer(core_layer: None) -> None:
    """Marks gate the core layer's group sends, which cost it several commands each (the
    default, whatever the environment chose); on the pub/sub layer a send is one PUBLISH
    (tests/scaleout/test_channel_layer.py)."""


def new_run_id() -> str:
    return str(uuid.uuid4())


def redis_layer() -> RedisChannelLayer:
    layer = get_channel_layer()
    assert isinstance(layer, RedisChannelLayer)
    return layer


async def mark_of(run_id: str) -> tuple[bytes | None, int]:
    """The run's mark as stored, and its time to live (-2: no such key)."""
    layer = redis_layer()
    key = watching.mark_key(run_id)
    connection = layer.connection(layer.consistent_hash(key))
    return await connection.get(key), await connection.ttl(key)


@pytest.fixture
def group_sends(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """The layer's group sends (still sent to Redis)."""
    sent: list[tuple[str, dict[str, Any]]] = []
    send = RedisChannelLayer.group_send

    async def recorded(self: RedisChannelLayer, group: str, message: dict[str, Any]) -> None:
        sent.append((group, message))
        await send(self, group, message)

    monkeypatch.setattr(RedisChannelLayer, "group_send", recorded)
    return sent


@pytest.fixture
def mgets(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The keys of every MGET sent to Redis."""
    asked: list[list[str]] = []
    mget = redis.asyncio.Redis.mget

    async def recorded(self: redis.asyncio.Redis, keys: Any, *args: Any) -> Any:
        asked.append([k.decode() if isinstance(k, bytes) else k for k in keys])
        return await mget(self, keys, *args)

    monkeypatch.setattr(redis.asyncio.Redis, "mget", recorded)
    return asked


async def test_a_run_nobody_watches_is_not_announced(
        group_sends: list[tuple[str, dict[str, Any]]]) -> None:
    run_id = new_run_id()
    await notify(run_id, {"seq": 3})
    assert group_sends == []


async def test_a_marked_run_is_announced_to_its_group(
        group_sends: list[tuple[str, dict[str, Any]]]) -> None:
    layer = redis_layer()
    run_id = new_run_id()
    channel = await layer.new_channel()
    await layer.group_add(group_name(run_id), channel)
    await watching.mark_watched(run_id)

    await notify(run_id, {"seq": 4})

    assert group_sends == [(group_name(run_id), {"type": "run.event", "seq": 4})]
    received = await asyncio.wait_for(layer.receive(channel), 5)
    assert received == {"type": "run.event", "seq": 4}
    await layer.group_discard(group_name(run_id), channel)


async def test_a_mark_lives_a_few_polls(settings: Any) -> None:
    run_id = new_run_id()
    settings.AGENTFORGE_LIVE_POLL_SECONDS = 20.0
    await watching.mark_watched(run_id)
    value, ttl = await mark_of(run_id)
    assert value == b"1"
    assert 55 <= ttl <= 60  # three polls of 20 s

    settings.AGENTFORGE_LIVE_POLL_SECONDS = 1.0  # never less than half a minute
    await watching.mark_watched(run_id)
    assert 25 <= (await mark_of(run_id))[1] <= watching.MIN_MARK_SECONDS


async def test_the_runs_asking_in_one_turn_share_one_mget(mgets: list[list[str]]) -> None:
    watched, unwatched = [new_run_id() for _ in range(3)], [new_run_id() for _ in range(4)]
    for run_id in watched:
        await watching.mark_watched(run_id)
    asking = [*unwatched[:2], *watched, *unwatched[2:]]

    answers = await asyncio.gather(*(watching.anyone_watches(r) for r in asking))

    assert answers == [False, False, True, True, True, False, False]
    assert len(mgets) == 1
    assert sorted(mgets[0]) == sorted(watching.mark_key(r) for r in asking)
    # A later turn asks again (a mark set since is seen).
    await watching.mark_watched(unwatched[0])
    assert await watching.anyone_watches(unwatched[0]) is True
    assert len(mgets) == 2


async def test_a_run_asked_twice_in_one_turn_is_looked_up_once(
        mgets: list[list[str]]) -> None:
    run_id = new_run_id()
    await watching.mark_watched(run_id)
    assert await asyncio.gather(watching.anyone_watches(run_id),
                                watching.anyone_watches(run_id)) == [True, True]
    assert mgets == [[watching.mark_key(run_id)]]


async def test_a_lookup_redis_fails_counts_as_watched(
        monkeypatch: pytest.MonkeyPatch, group_sends: list[tuple[str, dict[str, Any]]],
) -> None:
    async def broken(self: redis.asyncio.Redis, keys: Any, *args: Any) -> Any:
        raise redis.ConnectionError("Redis is restarting")

    monkeypatch.setattr(redis.asyncio.Redis, "mget", broken)
    run_id = new_run_id()
    assert await watching.anyone_watches(run_id) is True
    await notify(run_id, {"seq": 5})  # attempted, as before marks existed
    assert group_sends == [(group_name(run_id), {"type": "run.event", "seq": 5})]


async def test_a_cancelled_lookup_leaves_nobody_waiting() -> None:
    """The lookup's task cancelled (its loop closing) answers "watched" to whoever
    asked, rather than leaving a run's writer waiting forever."""
    run_id = new_run_id()
    asking = asyncio.ensure_future(watching.anyone_watches(run_id))
    await asyncio.sleep(0)  # the ask is registered, its lookup task scheduled
    for task in list(watching._answering):
        task.cancel()
    assert await asyncio.wait_for(asking, 5) is True


async def test_after_a_cancelled_lookup_a_new_ask_is_answered() -> None:
    """A lookup cancelled before it started leaves no stale entry for later asks to
    join (they would wait for an answer that never comes)."""
    run_id = new_run_id()
    await watching.mark_watched(run_id)
    asking = asyncio.ensure_future(watching.anyone_watches(run_id))
    await asyncio.sleep(0)
    for task in list(watching._answering):
        task.cancel()
    await asyncio.wait_for(asking, 5)
    assert await asyncio.wait_for(watching.anyone_watches(run_id), 5) is True


@pytest.fixture
async def sockets() -> AsyncIterator[list[WebsocketCommunicator]]:
    opened: list[WebsocketCommunicator] = []
    yield opened
    for comm in opened:
        await comm.disconnect(timeout=10)


@pytest.mark.django_db(transaction=True)
async def test_a_viewers_socket_marks_its_run_and_renews_the_mark(
        bob: AbstractUser, sockets: list[WebsocketCommunicator], settings: Any) -> None:
    settings.AGENTFORGE_LIVE_POLL_SECONDS = 0.2
    run = await Run.objects.acreate(title="watched", status="queued", snapshot={},
                                    created_by=bob)
    assert (await mark_of(str(run.pk)))[0] is None

    await open_socket(sockets, run, bob)
    assert (await mark_of(str(run.pk)))[0] == b"1"  # before the socket's first read

    layer = redis_layer()
    key = watching.mark_key(str(run.pk))
    await layer.connection(layer.consistent_hash(key)).delete(key)  # as if it expired
    deadline = time.monotonic() + 5
    while (await mark_of(str(run.pk)))[0] is None:
        assert time.monotonic() < deadline, "the socket's polls did not renew the mark"
        await asyncio.sleep(0.05)
