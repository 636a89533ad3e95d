"""Waiting for a run's next events outside a WebSocket: the API's event stream (SSE) and
its long poll subscribe a channel of their own to the run's channel-layer group, the one
`notify` sends "seq N is stored" to and the live sockets listen on, so they wake on push
rather than polling the database.

A notification only says "read again": the reader always reads by seq from the
database, so a dropped one (a full channel, Redis restarting) costs a delay, never a
gap. Without a usable channel layer `wait` just sleeps (a slow poll): the caller reads
again when it returns, whatever it returns.

The reads run on one thread of their own (`read_on_stream_thread`) with one kept
connection, as the sockets' reads do: a stream holds no request thread while it waits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any

from asgiref.sync import SyncToAsync
from channels.layers import BaseChannelLayer, get_channel_layer
from django.db import connections

from tools_app.runs.loops.task_backend import remember_server_loop
from tools_app.runs.store.db import drop_broken_connections

from .notify import group_name
from .watching import mark_watched

logger = logging.getLogger(__name__)

# Every stream's and long poll's reads, one at a time, on one connection (each read is
# one or two indexed queries).
_READS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentforge-stream-reads")


def _keeping_connection[**P, R](function: Callable[P, R]) -> Callable[P, R]:
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return function(*args, **kwargs)
        finally:
            drop_broken_connections()  # a failed connection is not kept for the next read
    return call


async def read_on_stream_thread[**P, R](function: Callable[P, R], *args: P.args,
                                        **kwargs: P.kwargs) -> R:
    """`function(*args)` on the streams' read thread."""
    call = SyncToAsync(_keeping_connection(function), thread_sensitive=False, executor=_READS)
    return await call(*args, **kwargs)


def close_read_connections() -> None:
    """Close the read thread's kept connections (after it has read what it was given):
    for a process, or a test, that is done with streams."""
    _READS.submit(connections.close_all).result()


class RunWaits:
    """`async with RunWaits(run_id) as waits:` subscribed to the run's group (before the
    caller's first read, so nothing committed after that read goes unannounced); then
    `await waits.wait(after, timeout)` returns when a notification of a seq beyond
    `after` arrives or `timeout` passes."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.group = group_name(run_id)
        self.layer: BaseChannelLayer | None = None
        self.channel = ""
        self.marked_at = -1e9

    @property
    def pushed(self) -> bool:
        """Whether notifications reach us (else `wait` is a plain sleep)."""
        return self.layer is not None

    async def __aenter__(self) -> RunWaits:
        # This is the serving loop: the in-memory layer's sends hop onto it (notify).
        remember_server_loop(asyncio.get_running_loop())
        layer = get_channel_layer()
        if layer is None:
            return self
        try:
            self.channel = await layer.new_channel()
            await layer.group_add(self.group, self.channel)
            await mark_watched(self.run_id)  # Redis: the run's batches are announced
            self.marked_at = time.monotonic()
            self.layer = layer
        except Exception:
            logger.warning("no live notifications for run %s; polling", self.run_id,
                           exc_info=True)
            await self._leave(layer)
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        if self.layer is not None:
            await self._leave(self.layer)
            self.layer = None

    async def _leave(self, layer: BaseChannelLayer) -> None:
        if not self.channel:
            return
        try:
            await layer.group_discard(self.group, self.channel)
        except Exception:
            logger.warning("could not leave group %s", self.group, exc_info=True)
        self.channel = ""

    async def wait(self, after: int, timeout: float) -> bool:
        """Whether a notification of a seq beyond `after` (or of no seq) came within
        `timeout` seconds. Notifications of seqs already read, and the streamed
        fragments the group also carries, are skipped."""
        deadline = time.monotonic() + max(0.0, timeout)
        if self.layer is None:
            await asyncio.sleep(max(0.0, timeout))
            return False
        await self._renew_mark()
        while (left := deadline - time.monotonic()) > 0:
            try:
                message: dict[str, Any] = await asyncio.wait_for(
                    self.layer.receive(self.channel), left)
            except TimeoutError:
                return False
            except Exception:  # the layer broke (Redis gone): sleep out the rest
                logger.warning("live notifications of run %s failed; polling", self.run_id,
                               exc_info=True)
                self.layer = None
                await asyncio.sleep(max(0.0, deadline - time.monotonic()))
                return False
            if message.get("type") != "run.event" or "fragment" in message:
                continue
            seq = message.get("seq")
            if not isinstance(seq, int) or seq > after:
                return True
        return False

    async def _renew_mark(self) -> None:
        """Renewed as a socket does, well within the mark's life (watching.mark_seconds)."""
        from django.conf import settings

        if time.monotonic() - self.marked_at < settings.AGENTFORGE_LIVE_POLL_SECONDS:
            return
        try:
            await mark_watched(self.run_id)
            self.marked_at = time.monotonic()
        except Exception:  # Redis restarting: the next wait tries again
            logger.warning("could not renew the watch of run %s", self.run_id, exc_info=True)
