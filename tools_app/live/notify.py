"""Broadcasting to live viewers over the channel layer: the group of each run and of
each login session, and the receivers that relay the runs layer's
`run_event_committed` and `run_children_changed` to the run's group (connected in
ToolsAppConfig.ready)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.dispatch import receiver

from tools_app.runs.loops.task_backend import server_loop
from tools_app.runs.store.eventlog import run_children_changed, run_event_committed

from .watching import anyone_watches

logger = logging.getLogger(__name__)


def group_name(run_id: str) -> str:
    return f"run.{run_id}"


@receiver(run_event_committed, dispatch_uid="agentforge-broadcast-run-events")
async def broadcast_run_event(sender: Any, run_id: str, message: dict[str, Any],
                              **kwargs: Any) -> None:
    # On Redis, a run nobody watches is not announced (`watching`): most runs, most of
    # the time, and each announcement cost two Redis commands before it found nobody.
    if await anyone_watches(run_id):
        await send_to_group(group_name(run_id), {"type": "run.event", **message})


@receiver(run_children_changed, dispatch_uid="agentforge-broadcast-run-children")
async def broadcast_run_children(sender: Any, run_id: str, **kwargs: Any) -> None:
    """A run made from `run_id` was committed: its viewers read its children again."""
    if await anyone_watches(run_id):
        await send_to_group(group_name(run_id), {"type": "run.children"})


async def send_to_group(group: str, message: dict[str, Any]) -> None:
    """Best effort: a broken channel layer must never fail a run (or a logout)."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        if isinstance(layer, InMemoryChannelLayer):
            if not layer.groups.get(group):
                # Nobody in the group: sending would only cost a hop to the serving loop
                # (a run's every batch, watched or not). A viewer that joins later reads
                # what was committed before it joined.
                return
            # The in-memory layer is bound to the serving loop.
            await on_server_loop(layer.group_send(group, message))
        else:
            await layer.group_send(group, message)
    except Exception:
        logger.warning("could not send to group %s", group, exc_info=True)


async def on_server_loop(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run `coroutine` on the serving loop: awaited here if this is it; from another
    loop (the worker's) posted there and not waited for, so a run's next write never
    waits for a busy serving loop to get to the send (failures are logged)."""
    target = server_loop()
    if target is None or target is asyncio.get_running_loop():
        await coroutine
        return
    try:
        posted = asyncio.run_coroutine_threadsafe(coroutine, target)
    except RuntimeError:  # the serving loop closed meanwhile
        coroutine.close()
        raise
    posted.add_done_callback(_log_failure)


def _log_failure(posted: Future[None]) -> None:
    if not posted.cancelled() and (error := posted.exception()) is not None:
        logger.warning("could not send to a live group", exc_info=error)
