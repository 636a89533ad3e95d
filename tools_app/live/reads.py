"""What the live sockets read, on one kept database connection (`kept_connection`):
the run a user may watch, the socket's user as their session says now, the run's
lineage list, and each run's batches of events, read and rendered once and shared by
the run's viewers (`updates_after`).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from importlib import import_module
from types import SimpleNamespace
from typing import Any, NamedTuple

from asgiref.sync import SyncToAsync
from django.conf import settings

from tools_app.runs.store.db import drop_broken_connections
from tools_app.runs.store.selectors import event_marks_after, run_get_for_user

from ..models import Run
from .fragments import render_batch
from .lineage import lineage_update


class _KeptConnectionSyncToAsync[**P, R](SyncToAsync[P, R]):
    """database_sync_to_async for the consumers' reads, keeping the connection.

    Every viewer's reads run on one thread (asgiref's shared one: Channels creates no
    thread-sensitive context), so one kept connection serves them all; opening one per
    live message would be most of its cost. It is kept whatever
    `CONN_MAX_AGE` says (0 on PostgreSQL, whose pool the request threads borrow from and
    give back to at each request's end). A connection that failed and is no longer
    usable is closed, so the next read opens a fresh one.
    """

    def thread_handler(self, loop: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            # asgiref leaves thread_handler unannotated.
            return super().thread_handler(loop, *args, **kwargs)  # type: ignore[no-untyped-call]
        finally:
            drop_broken_connections()


def kept_connection[**P, R](function: Callable[P, R]) -> _KeptConnectionSyncToAsync[P, R]:
    return _KeptConnectionSyncToAsync(function, thread_sensitive=True)


@kept_connection
def visible_run(run_id: str, user: Any) -> Run | None:
    return run_get_for_user(run_id, user)


@kept_connection
def current_viewer(scope: Mapping[str, Any]) -> Any:
    """The socket's user as Django would authenticate its session now, or None: the
    user must still exist and be active, and the session's auth hash still match their
    password (a password change ends the other sessions). The session is read afresh:
    the one in the scope is the copy from the handshake."""
    from django.contrib.auth import get_user

    session = scope.get("session")
    if session is None or not session.session_key:
        return None
    store = import_module(settings.SESSION_ENGINE).SessionStore
    request = SimpleNamespace(session=store(session_key=session.session_key))
    user = get_user(request)  # type: ignore[arg-type]
    if not user.is_authenticated or user.pk != scope["user"].pk:
        return None
    return user


read_lineage_update = kept_connection(lineage_update)


BATCH = 500  # events per message at most (a long history arrives in several)
SHARE_SECONDS = 1.0  # how long one rendering of a batch serves the run's other viewers
SHARED_MAX = 256  # runs with a shared rendering kept at most


class Batch(NamedTuple):
    after: int  # the seq the batch starts after
    last: int  # the last seq it covers
    complete: bool  # it was everything committed when it was read
    html: str
    read_at: float  # time.monotonic() just before the read began
    streams: Mapping[int, bool] = {}  # fragments.LiveBatch.streams (never mutated)


# Viewers of one run get the same notifications, so they ask for the same batch (after
# the same seq) at about the same time: one reads and renders it, the others reuse it,
# without a database-thread hop. Nothing in a batch depends on the viewer (the Cancel
# button's CSRF token lives in the page, outside the swapped header).
#
# A batch read earlier can still be shown: run, rounds and calls change only together
# with an event (one transaction), so a rendering made after seq `last` committed shows
# them as they were at `last` or later. What a viewer must not take is a batch that
# ends too early for it: "complete" means complete when it was read. So a viewer takes
# one only if it was read after the viewer subscribed (on resume: events committed before
# that brought it no notification), or if it covers the seq the viewer was notified of
# (`Freshness`); otherwise it reads again. The one thing that ages is the bar of a call
# still running, drawn up to the time of rendering: SHARE_SECONDS bounds that, and the
# memory held. Only the serving loop's coroutines touch these two maps.
_shared: OrderedDict[str, Batch] = OrderedDict()
_rendering: dict[tuple[str, int], asyncio.Task[Batch]] = {}


class Freshness(NamedTuple):
    """What a batch must satisfy for one viewer: read at or after `read_since`, or
    covering seq `covering` (when the viewer was notified of it)."""

    read_since: float
    covering: int | None = None

    def accepts(self, batch: Batch) -> bool:
        return batch.read_at >= self.read_since or (
            self.covering is not None and batch.last >= self.covering)


def _reusable(run_id: str, after: int, fresh: Freshness) -> Batch | None:
    batch = _shared.get(run_id)
    if (batch is None or batch.after != after or not fresh.accepts(batch)
            or time.monotonic() - batch.read_at > SHARE_SECONDS):
        return None
    return batch


def _remember(run_id: str, batch: Batch) -> None:
    current = _shared.get(run_id)
    if current is not None and current.read_at > batch.read_at:
        return  # a later read finished first
    _shared[run_id] = batch
    _shared.move_to_end(run_id)
    # Oldest first: drop what is too old to be reused, and beyond the cap.
    while _shared and (len(_shared) > SHARED_MAX
                       or batch.read_at - next(iter(_shared.values())).read_at > SHARE_SECONDS):
        _shared.popitem(last=False)


@kept_connection
def _read_and_render(run_id: str, after: int) -> Batch:
    read_at = time.monotonic()
    events = event_marks_after(run_id, after, limit=BATCH)
    if not events:
        return Batch(after, after, True, "", read_at)
    rendered = render_batch(run_id, events)
    return Batch(after, events[-1].seq, len(events) < BATCH, rendered.html, read_at,
                 rendered.streams)


async def updates_after(run_id: str, after: int, fresh: Freshness) -> Batch:
    """The batch after `after` that `fresh` accepts: reused, joined while another viewer
    reads it, or read now."""
    batch = _reusable(run_id, after, fresh)
    if batch is not None:
        return batch
    key = (run_id, after)
    task = _rendering.get(key)
    if task is not None and task.get_loop() is asyncio.get_running_loop():
        batch = await asyncio.shield(task)
        if fresh.accepts(batch):
            return batch
    return await asyncio.shield(_start_read(key))


def _start_read(key: tuple[str, int]) -> asyncio.Task[Batch]:
    # A task of its own, so a viewer that disconnects (and is cancelled) while it runs
    # does not cancel it for the others waiting on it. Begun now, it is read after
    # whatever the caller needs.
    task = asyncio.ensure_future(_read_and_render(*key))
    _rendering[key] = task
    task.add_done_callback(lambda done: _finished(key, done))
    return task


def _finished(key: tuple[str, int], task: asyncio.Task[Batch]) -> None:
    if _rendering.get(key) is task:
        del _rendering[key]
    if task.cancelled() or task.exception() is not None:
        return  # every waiter sees the error; nothing to share
    batch = task.result()
    if batch.html:
        _remember(key[0], batch)
