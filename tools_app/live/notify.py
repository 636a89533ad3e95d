"""Broadcasting to live viewers over the channel layer: the group of each run and of
each login session, and the receivers that relay the runs layer's
`run_event_committed` and `run_children_changed` to the run's group (connected in
ToolsAppConfig.ready)."""

from __future__ import annotations

import logging
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.dispatch import receiver

from tools_app.runs.loops.task_backend import on_server_loop
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
