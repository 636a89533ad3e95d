"""The Redis channel layer as configured: a viewer's receive may wait in Redis longer
than redis-py's default socket timeout without failing."""

from __future__ import annotations

import asyncio
import time

import pytest
from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer

pytestmark = pytest.mark.scaleout


async def test_an_idle_receive_outlasts_a_blocking_pop_and_still_gets_the_next_message(
) -> None:
    """channels_redis blocks in BZPOPMIN for 5 s a try; redis-py's default socket
    timeout is 5 s too, and an idle viewer's receive failed with "Timeout reading"
    (the viewer then had no live updates). Bounded: about 6.5 s."""
    layer = get_channel_layer()
    assert isinstance(layer, RedisChannelLayer)
    channel = await layer.new_channel()
    receiving = asyncio.ensure_future(layer.receive(channel))
    started = time.monotonic()
    await asyncio.sleep(6.0)  # past one blocking pop and the default socket timeout
    assert not receiving.done(), receiving.exception() if receiving.done() else None
    await layer.send(channel, {"type": "run.event", "seq": 7})
    message = await asyncio.wait_for(receiving, 10)
    assert message == {"type": "run.event", "seq": 7}
    assert time.monotonic() - started >= 6.0
