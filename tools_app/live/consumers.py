"""The live timeline socket. It relays; it never runs the loop.

On connect it checks who may watch; the client then says which seq it has seen, and
the consumer sends every later event's fragments, read from the database by seq.
Notifications from the channel layer only say "something new" (or carry an ephemeral
streaming fragment), so a dropped notification or a reconnect never leaves a gap.

Bursts coalesce: a notification for a seq already sent costs nothing, and viewers of one
run share one reading and rendering of each batch.

Streamed pieces go where the page has their target (`fragments.PageStreams`): a batch
read after the round was answered removes its stream, and pieces still queued behind
that batch would then have nothing to go into. The page's list of the runs made from
this one is sent again when it changes (`lineage`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from importlib import import_module
from types import SimpleNamespace
from typing import Any, NamedTuple

from asgiref.sync import SyncToAsync
from asgiref.typing import WebSocketConnectEvent
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from tools_app.runs.loops.task_backend import remember_server_loop
from tools_app.runs.store.db import drop_broken_connections
from tools_app.runs.store.selectors import event_marks_after, run_get_for_user

from ..models import Run
from .fragments import PageStreams, render_batch, render_fragment
from .lineage import MARK_MAX, lineage_update
from .notify import group_name
from .watching import mark_watched

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_BAD_MESSAGE = 4400
# "Try again later" in the private-use range: daphne (autobahn) closes an accepted socket
# only with 1000 or 3000-4999 (1013 and 1011 raise there, and the client gets 1011 and the
# server a traceback); closing before accepting is an HTTP 403. The page reconnects on
# it with backoff, unlike the other 4xxx codes (static/js/timeline.js).
CLOSE_TRY_AGAIN = 4013
MAX_SEQ = 2**31 - 1  # the range of a PositiveIntegerField on every database backend
MAX_CLIENT_MESSAGE = 256  # characters: '{"type": "resume", "after": 2147483647}' is 40


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


def _kept_connection[**P, R](function: Callable[P, R]) -> _KeptConnectionSyncToAsync[P, R]:
    return _KeptConnectionSyncToAsync(function, thread_sensitive=True)


@_kept_connection
def _visible_run(run_id: str, user: Any) -> Run | None:
    return run_get_for_user(run_id, user)


def user_group(user_pk: Any) -> str:
    """The channel-layer group of one user's sockets: told when their rights change."""
    return f"user.{user_pk}"


@_kept_connection
def _current_viewer(scope: Mapping[str, Any]) -> Any:
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


def session_group(session_key: str) -> str:
    """The channel-layer group of one login session's sockets. The key is a credential:
    only a hash of it travels to the channel layer."""
    return "session." + hashlib.sha256(session_key.encode()).hexdigest()[:40]


_lineage_update = _kept_connection(lineage_update)


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


@_kept_connection
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


class RunConsumer(AsyncWebsocketConsumer):
    run: Run | None = None
    sent_seq: int | None = None
    subscribed_at = 0.0  # time.monotonic() once notifications for the run reach us
    session_group_name = ""
    user_group_name = ""
    poller: asyncio.Future[None] | None = None
    lineage_mark: str | None = None  # the page's list of children (live/lineage.py)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.flushing = asyncio.Lock()
        self.streams = PageStreams()

    async def websocket_connect(self, message: WebSocketConnectEvent) -> None:
        """A channel layer that fails during the handshake (Redis restarting, a stale
        connection) must not answer 500: the socket is accepted and closed with 4013
        (try again later), which the page retries with a growing delay. One log line,
        no traceback: an outage would otherwise log one per reconnecting page."""
        try:
            await super().websocket_connect(message)
        except Exception as exc:
            logger.warning("live socket handshake failed (%s: %s); closed %d, the client "
                           "retries", type(exc).__name__, exc, CLOSE_TRY_AGAIN)
            await self.accept()
            await self.close(code=CLOSE_TRY_AGAIN)

    async def connect(self) -> None:
        remember_server_loop(asyncio.get_running_loop())
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.refuse(CLOSE_UNAUTHENTICATED)
            return
        # Listen for changes to the user's rights before checking them, so a change
        # committed during the handshake is either seen here or heard of later.
        self.user_group_name = user_group(user.pk)
        await self.channel_layer.group_add(self.user_group_name, self.channel_name)
        self.run = await _visible_run(self.scope["url_route"]["kwargs"]["run_id"], user)
        if self.run is None:
            await self.refuse(CLOSE_FORBIDDEN)
            return
        self.group = group_name(str(self.run.pk))
        await self.channel_layer.group_add(self.group, self.channel_name)
        # In the group, then marked watched, then (at resume) the first read: a worker
        # that finds no mark committed before that read (watching.py).
        await mark_watched(str(self.run.pk))
        self.subscribed_at = time.monotonic()
        session_key = getattr(self.scope.get("session"), "session_key", None)
        if session_key:
            # Logging out ends this socket too (sessions.close_the_sessions_sockets).
            self.session_group_name = session_group(session_key)
            await self.channel_layer.group_add(self.session_group_name, self.channel_name)
        await self.accept()

    async def refuse(self, code: int) -> None:
        """Accept, then close with `code`: a close before the handshake is an HTTP 403
        to the browser, which then sees only 1006 (and the ws extension retries forever);
        the 4xxx code is what tells the page to stop reconnecting."""
        await self.accept()
        await self.close(code=code)

    async def disconnect(self, code: int) -> None:
        if self.poller is not None:
            self.poller.cancel()
        try:
            await self._leave_groups()
        except Exception as exc:  # a channel layer that is down: its groups expire
            logger.warning("could not leave the live groups (%s: %s)",
                           type(exc).__name__, exc)

    async def _leave_groups(self) -> None:
        if self.run is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)
        if self.session_group_name:
            await self.channel_layer.group_discard(self.session_group_name, self.channel_name)
        if self.user_group_name:
            await self.channel_layer.group_discard(self.user_group_name, self.channel_name)

    async def session_ended(self, message: dict[str, Any]) -> None:
        """The viewer logged out (maybe in another tab): nothing more reaches them."""
        await self.close(code=CLOSE_UNAUTHENTICATED)

    async def user_changed(self, message: dict[str, Any]) -> None:
        """The viewer's account changed (deactivated, new password, staff rights taken
        away, deleted): the socket lives on only if its session would still let the user
        in and they may still see the run."""
        await self.close_unless_still_allowed()

    async def close_unless_still_allowed(self) -> bool:
        """Close the socket (4401 / 4403) if its session would no longer let the user in
        or they may no longer see the run; whether it was closed."""
        viewer = await _current_viewer(self.scope)
        if viewer is None:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return True
        if self.run is not None and await _visible_run(str(self.run.pk), viewer) is None:
            await self.close(code=CLOSE_FORBIDDEN)
            return True
        return False

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # The client says one thing, once: where it is. Anything else (a second resume,
        # which would make us read everything again; an oversized frame) ends the socket.
        if self.sent_seq is not None or len(text_data or "") > MAX_CLIENT_MESSAGE:
            await self.close(code=CLOSE_BAD_MESSAGE)
            return
        try:
            message = json.loads(text_data or "")
            after = int(message["after"]) if message.get("type") == "resume" else None
            mark = message.get("lineage")  # the page's list of children (optional)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
            after = None  # OverflowError: "after": Infinity
        if (after is None or not 0 <= after <= MAX_SEQ
                or not isinstance(mark, str | None) or len(mark or "") > MARK_MAX):
            await self.close(code=CLOSE_BAD_MESSAGE)
            return
        self.sent_seq, self.lineage_mark = after, mark
        # Events committed before we subscribed brought us no notification: only a read
        # begun after that is sure to hold them. So for children made since the page was
        # served.
        await self.flush(Freshness(read_since=self.subscribed_at))
        await self.refresh_lineage()
        self.poller = asyncio.ensure_future(self.poll())

    async def dispatch(self, message: dict[str, Any]) -> None:
        if message.get("type") == "run.event":
            # Channels runs close_old_connections() before every handler, as a hop to the
            # one thread that also does every viewer's database reads: one queued hop per
            # notification per viewer, most of which then need no database at all. The
            # reads that do happen look after their connection themselves
            # (_KeptConnectionSyncToAsync).
            await self.run_event(message)
            return
        await super().dispatch(message)

    async def run_event(self, message: dict[str, Any]) -> None:
        if self.sent_seq is None:
            return  # the client has not said where it is yet; resume will cover this
        if "fragment" in message:
            # After any batch being sent (the poll's): it may remove the piece's target.
            async with self.flushing:
                fragment = message["fragment"]
                html = render_fragment(fragment)
                if html and self.streams.admits(fragment):
                    await self.send(text_data=html)
            return
        seq = message.get("seq")
        if isinstance(seq, int) and seq <= self.sent_seq:
            # Already sent: a flush that ran while this notification waited in the queue
            # read it. Seqs commit in order (allocated under the run row's lock), so
            # nothing at or below the seq we sent can still appear. Skipping here saves
            # a database round trip per notification, which is what makes a burst of
            # events coalesce into one message.
            return
        # The event was committed before its notification was sent: a read begun now
        # holds it, and so does any batch that reaches its seq.
        await self.flush(Freshness(read_since=time.monotonic(),
                                   covering=seq if isinstance(seq, int) else None))

    async def run_children(self, message: dict[str, Any]) -> None:
        """A run made from this one was committed (notify.broadcast_run_children)."""
        await self.refresh_lineage()

    async def refresh_lineage(self) -> None:
        """Send the run's lineage section again if its list of children changed."""
        if self.run is None or self.sent_seq is None:
            return
        async with self.flushing:
            self.lineage_mark, html = await _lineage_update(
                self.run, self.scope["user"], self.lineage_mark)
            if html:
                await self.send(text_data=html)

    async def flush(self, fresh: Freshness) -> None:
        """Send everything after the last seq sent, in batches, until caught up.

        A batch shorter than BATCH was everything committed when it was read, and `fresh`
        makes sure it was read late enough; whatever commits later brings its own
        notification, so no confirming empty read follows.
        """
        if self.run is None or self.sent_seq is None:
            return
        async with self.flushing:  # the poll and a notification may want it at once
            while True:
                batch = await updates_after(str(self.run.pk), self.sent_seq, fresh)
                if batch.html:
                    await self.send(text_data=batch.html)
                    self.sent_seq = batch.last
                    self.streams.rendered(batch.streams)
                if batch.complete:
                    return

    async def _renew_mark(self) -> None:
        """Still watching: the run stays marked (its mark outlives a few polls)."""
        try:
            if self.run is not None:
                await mark_watched(str(self.run.pk))
        except Exception:  # Redis restarting: the next poll tries again
            logger.warning("could not renew the watch of run %s", self.run and self.run.pk,
                           exc_info=True)

    async def _rights_withdrawn(self) -> bool:
        """Whether the socket was closed because the user may no longer watch. Checked at
        every poll as well as on notice: a change made where no notice reaches this
        process (another process on the in-memory channel layer, `manage.py shell`)
        ends the socket within a poll."""
        try:
            return await self.close_unless_still_allowed()
        except Exception as exc:  # a database hiccup: the next poll checks again
            logger.warning("live socket of run %s could not check its viewer (%s: %s)",
                           self.run and self.run.pk, type(exc).__name__, exc)
            return False

    async def poll(self) -> None:
        """Read on every few seconds whatever notifications say: a channel layer that
        lost its connection (Redis restarted) delivers nothing for a while, and the
        viewer must still see the run go on and end. The database is the truth."""
        interval = settings.AGENTFORGE_LIVE_POLL_SECONDS
        while True:
            await asyncio.sleep(interval)
            if await self._rights_withdrawn():
                return
            await self._renew_mark()
            try:
                await self.flush(Freshness(read_since=time.monotonic()))
                await self.refresh_lineage()  # a child's status moved on, a lost notice
            except Exception:  # a database hiccup: the next round tries again
                logger.warning("live poll of run %s failed", self.run and self.run.pk,
                               exc_info=True)
