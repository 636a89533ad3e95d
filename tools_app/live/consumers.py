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
this one is sent again when it changes (`lineage`). What the socket reads, and how a
run's viewers share a reading, is reads.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from typing import Any

from asgiref.typing import WebSocketConnectEvent
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from tools_app.runs.loops.task_backend import remember_server_loop

from ..models import Run
from .fragments import PageStreams, render_fragment
from .lineage import MARK_MAX
from .notify import group_name
from .reads import (
    Freshness,
    current_viewer,
    read_lineage_update,
    updates_after,
    visible_run,
)
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


def channel_layer_unavailable(error: BaseException) -> bool:
    """Whether `error` is the channel layer's server being away (Redis restarting, a
    connection it closed or reset), not a fault of the socket's own."""
    return isinstance(error, RedisConnectionError | RedisTimeoutError | OSError)


def user_group(user_pk: Any) -> str:
    """The channel-layer group of one user's sockets: told when their rights change."""
    return f"user.{user_pk}"


def session_group(session_key: str) -> str:
    """The channel-layer group of one login session's sockets. The key is a credential:
    only a hash of it travels to the channel layer."""
    return "session." + hashlib.sha256(session_key.encode()).hexdigest()[:40]


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

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """A channel layer that fails is answered with 4013 (try again later), which the
        page retries with a growing delay. Before the handshake: the pub/sub layer
        subscribes the socket's channel before the handshake is even read (Channels makes
        the channel first), and with Redis down the browser got a 500. After it: the
        layer's read for the socket's messages fails when Redis restarts or drops a
        connection, which ended the socket with a server error and a traceback. Any
        other failure is Channels' to handle."""
        try:
            await super().__call__(scope, receive, send)
        except Exception as exc:
            if getattr(self, "channel_name", None) is None and self.channel_layer is not None:
                await self._refuse_without_a_channel(exc, receive, send)
            elif channel_layer_unavailable(exc):
                await self._close_after_the_layer_failed(exc, send)
            else:
                raise

    async def _refuse_without_a_channel(self, exc: Exception, receive: Any, send: Any) -> None:
        logger.warning("live socket's channel could not be made (%s: %s); closed %d, "
                       "the client retries", type(exc).__name__, exc, CLOSE_TRY_AGAIN)
        if (await receive())["type"] == "websocket.connect":
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.close", "code": CLOSE_TRY_AGAIN})

    async def _close_after_the_layer_failed(self, exc: Exception, send: Any) -> None:
        logger.warning("live socket's channel layer failed (%s: %s); closed %d, the client "
                       "retries", type(exc).__name__, exc, CLOSE_TRY_AGAIN)
        await self.disconnect(CLOSE_TRY_AGAIN)  # stops its poller, leaves what it can
        with contextlib.suppress(Exception):  # the client may be gone already
            await send({"type": "websocket.close", "code": CLOSE_TRY_AGAIN})

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
        self.run = await visible_run(self.scope["url_route"]["kwargs"]["run_id"], user)
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
        viewer = await current_viewer(self.scope)
        if viewer is None:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return True
        if self.run is not None and await visible_run(str(self.run.pk), viewer) is None:
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
            self.lineage_mark, html = await read_lineage_update(
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
