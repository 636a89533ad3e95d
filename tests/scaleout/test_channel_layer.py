"""The Redis channel layers as configured: a viewer's receive may wait in Redis longer
than redis-py's default socket timeout without failing."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer
from channels_redis.pubsub import RedisPubSubChannelLayer

from tools_app.live import watching
from tools_app.live.notify import group_name
from tools_app.runs.store.eventlog import notify

pytestmark = pytest.mark.scaleout


@pytest.fixture(params=["core", "pubsub"])
def layer_kind(request: pytest.FixtureRequest) -> str:
    request.getfixturevalue(f"{request.param}_layer")
    return str(request.param)


async def test_an_idle_receive_outlasts_a_blocking_pop_and_still_gets_the_next_message(
    layer_kind: str, settings: Any,
) -> None:
    """The core layer blocks in BZPOPMIN for 5 s a try; redis-py's default socket
    timeout is 5 s too, and an idle viewer's receive failed with "Timeout reading"
    (the viewer then had no live updates). The pub/sub layer's subscription must stay
    as quietly alive. Bounded: about 6.5 s."""
    layer = get_channel_layer()
    assert isinstance(layer, {"pubsub": RedisPubSubChannelLayer,
                              "core": RedisChannelLayer}[layer_kind])
    assert layer_kind == settings.AGENTFORGE_CHANNEL_LAYER
    channel = await layer.new_channel()
    receiving = asyncio.ensure_future(layer.receive(channel))
    started = time.monotonic()
    await asyncio.sleep(6.0)  # past one blocking pop and the default socket timeout
    assert not receiving.done(), receiving.exception() if receiving.done() else None
    await layer.send(channel, {"type": "run.event", "seq": 7})
    message = await asyncio.wait_for(receiving, 10)
    assert message == {"type": "run.event", "seq": 7}
    assert time.monotonic() - started >= 6.0


async def test_on_pubsub_every_batch_is_announced_without_a_lookup(
    monkeypatch: pytest.MonkeyPatch, pubsub_layer: None,
) -> None:
    """On the pub/sub layer a group send is one PUBLISH, as cheap as asking whether
    anyone watches: nothing is looked up, and a subscribed viewer gets the notice."""
    layer = get_channel_layer()
    assert isinstance(layer, RedisPubSubChannelLayer)

    async def no_lookup(*args: Any) -> set[str]:
        raise AssertionError("watch marks looked up on the pub/sub layer")

    monkeypatch.setattr(watching, "_marked", no_lookup)
    run_id = str(uuid.uuid4())
    channel = await layer.new_channel()
    await layer.group_add(group_name(run_id), channel)
    assert await watching.anyone_watches(run_id) is True

    await notify(run_id, {"seq": 4})

    assert await asyncio.wait_for(layer.receive(channel), 5) == {"type": "run.event", "seq": 4}
    await layer.group_discard(group_name(run_id), channel)
