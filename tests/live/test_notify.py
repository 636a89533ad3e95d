"""Notifications on the embedded (in-memory) channel layer: a group nobody is in costs
nothing, a watched one is sent to on the serving loop, without the sender waiting for
that loop."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

from tools_app.live import notify
from tools_app.runs.loops import task_backend


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sends that hopped to the serving loop."""
    seen: list[str] = []

    async def on_server_loop(coroutine: Any) -> Any:
        seen.append("hop")
        return await coroutine

    monkeypatch.setattr(notify, "on_server_loop", on_server_loop)
    return seen


def test_a_group_nobody_is_in_is_not_sent_to(hops: list[str]) -> None:
    layer = get_channel_layer()
    assert isinstance(layer, InMemoryChannelLayer)

    async def scenario() -> None:
        await notify.send_to_group("run.nobody", {"type": "run.event", "seq": 1})

    async_to_sync(scenario)()
    assert hops == []


def test_a_watched_group_gets_the_message(hops: list[str]) -> None:
    layer = get_channel_layer()
    assert isinstance(layer, InMemoryChannelLayer)

    async def scenario() -> dict[str, Any]:
        channel = await layer.new_channel()
        await layer.group_add("run.watched", channel)
        try:
            await notify.send_to_group("run.watched", {"type": "run.event", "seq": 7})
            return dict(await layer.receive(channel))
        finally:
            await layer.group_discard("run.watched", channel)

    assert async_to_sync(scenario)() == {"type": "run.event", "seq": 7}
    assert hops == ["hop"]


@pytest.fixture
def serving_loop(monkeypatch: pytest.MonkeyPatch) -> Iterator[asyncio.AbstractEventLoop]:
    """A serving loop of its own, on a thread, as daphne's is beside the worker's."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(task_backend, "_server_loop", loop)
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def test_a_sender_on_another_loop_does_not_wait_for_a_busy_serving_loop(
    serving_loop: asyncio.AbstractEventLoop,
) -> None:
    layer = get_channel_layer()
    assert isinstance(layer, InMemoryChannelLayer)

    def on_serving[T](coroutine: Any) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, serving_loop).result(timeout=10)

    channel: str = on_serving(layer.new_channel())
    on_serving(layer.group_add("run.busy", channel))
    release = threading.Event()
    serving_loop.call_soon_threadsafe(release.wait, 20)  # busy until released
    try:
        started = time.monotonic()
        asyncio.run(notify.send_to_group("run.busy", {"type": "run.event", "seq": 3}))
        # The sender's loop went on long before the serving loop was free again.
        assert time.monotonic() - started < 10
    finally:
        release.set()
    try:
        # Delivered once the serving loop got to it.
        assert on_serving(layer.receive(channel)) == {"type": "run.event", "seq": 3}
    finally:
        on_serving(layer.group_discard("run.busy", channel))

