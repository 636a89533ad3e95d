"""Notifications on the embedded (in-memory) channel layer: a group nobody is in costs
nothing, a watched one is sent to on the serving loop."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

from tools_app.live import notify


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
