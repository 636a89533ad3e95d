"""Which runs someone watches live, on channels_redis's core layer: a run's batches are
announced only to a run that has a viewer (on the pub/sub layer an announcement is one
PUBLISH, as cheap as the lookup, and is always sent).

Announcing every committed batch with `group_send` would cost channels_redis two
commands (it trims the group, then reads its members) before it finds nobody in it, for
most runs most of the time. So a viewer's socket marks its run watched
(a key with a time to live, `mark_watched`) before it reads the run's events, and renews
the mark at each of its polls; a worker asks whether the runs it has news of are marked
(`anyone_watches`) after their commit, and the runs asking in the same turn of the event
loop (a group's runs, settled together) share one MGET per Redis host.

Nothing is missed: a worker that finds no mark asked before the mark was set, so before
the viewer's first read, which is later than the commit and holds it. A mark outlives
its viewer by at most its time to live (a few extra notifications, which cost the
consumers nothing). A Redis that fails the lookup counts as "watched": the notification
is attempted. Other channel layers are always sent to (the in-memory one
checks its own groups: `notify.send_to_group`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import weakref
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings

if TYPE_CHECKING:
    from channels_redis.core import RedisChannelLayer

logger = logging.getLogger(__name__)

KEY_PREFIX = "agentforge:watched:"
# The mark lives through several of the viewer's polls, which renew it: one failed
# renewal (Redis restarting) does not make a watched run silent.
POLLS_A_MARK_OUTLIVES = 3
MIN_MARK_SECONDS = 30


def mark_key(run_id: str) -> str:
    return f"{KEY_PREFIX}{run_id}"


def mark_seconds() -> int:
    return max(MIN_MARK_SECONDS,
               math.ceil(POLLS_A_MARK_OUTLIVES * settings.AGENTFORGE_LIVE_POLL_SECONDS))


def _redis_layer() -> RedisChannelLayer | None:
    layer: Any = get_channel_layer()
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        return None  # the embedded default never imports channels_redis
    from channels_redis.core import RedisChannelLayer  # imported with the layer itself

    return layer if isinstance(layer, RedisChannelLayer) else None


async def mark_watched(run_id: str) -> None:
    """Someone watches `run_id` (for `mark_seconds`): its batches are announced. Raises
    what Redis raised (the caller decides whether that matters)."""
    layer = _redis_layer()
    if layer is None:
        return
    key = mark_key(run_id)
    await layer.connection(layer.consistent_hash(key)).set(key, b"1", ex=mark_seconds())


async def anyone_watches(run_id: str) -> bool:
    """Whether a viewer marked `run_id` watched (always true on a layer without marks)."""
    layer = _redis_layer()
    if layer is None:
        return True
    loop = asyncio.get_running_loop()
    waiting = _waiting.get(loop)
    if waiting is None:
        waiting = _waiting[loop] = defaultdict(list)
        task = loop.create_task(_answer(waiting, layer))
        _answering.add(task)  # kept until done: the loop holds its tasks weakly
        # Whatever ends the task (an answer, an error, its loop cancelling it before
        # it even started), everyone who asked gets an answer.
        task.add_done_callback(lambda done: _answered(waiting, done))
    future: asyncio.Future[bool] = loop.create_future()
    waiting[run_id].append(future)
    return await future


# The runs asked about in this turn of each loop, each with who waits for its answer.
Waiting = defaultdict[str, list[asyncio.Future[bool]]]
_waiting: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Waiting] = \
    weakref.WeakKeyDictionary()
_answering: set[asyncio.Task[set[str]]] = set()


async def _answer(waiting: Waiting, layer: RedisChannelLayer) -> set[str]:
    """The watched runs among those asked about."""
    # One turn of the loop first: the other runs settled with the first ask meanwhile.
    await asyncio.sleep(0)
    _close(waiting)  # later asks start a lookup of their own
    return await _marked(layer, list(waiting))


def _close(waiting: Waiting) -> None:
    loop = asyncio.get_running_loop()
    if _waiting.get(loop) is waiting:
        del _waiting[loop]


def _answered(waiting: Waiting, task: asyncio.Task[set[str]]) -> None:
    _answering.discard(task)
    _close(waiting)  # a task cancelled before it started did not
    if task.cancelled():
        watched = set(waiting)  # as if nobody kept marks: notify them all
    elif (error := task.exception()) is not None:
        logger.warning("could not read which runs are watched; notifying them all",
                       exc_info=error)
        watched = set(waiting)
    else:
        watched = task.result()
    for run_id, futures in waiting.items():
        for future in futures:
            if not future.done():
                future.set_result(run_id in watched)


async def _marked(layer: RedisChannelLayer, run_ids: list[str]) -> set[str]:
    """The runs among `run_ids` with a mark: one MGET per Redis host."""
    by_host: defaultdict[int, list[str]] = defaultdict(list)
    for run_id in run_ids:
        by_host[layer.consistent_hash(mark_key(run_id))].append(run_id)
    watched: set[str] = set()
    for host, ids in by_host.items():
        values = await layer.connection(host).mget([mark_key(run_id) for run_id in ids])
        watched.update(run_id for run_id, value in zip(ids, values, strict=True)
                       if value is not None)
    return watched
