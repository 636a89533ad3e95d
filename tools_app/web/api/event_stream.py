"""A run's events as they are stored, for API clients: the body of
`GET /api/runs/<id>/events/stream` (Server-Sent Events) and of the long poll
`GET /api/runs/<id>/events?after=N&wait=S`.

Both are async iterators handed to a StreamingHttpResponse: the view (sync, behind the
bearer auth like every operation) checks the request and the run, and the body is then
produced on the serving event loop; the ASGI handler gives the request's thread back
when such a response starts (agentforge_web/handler.py). They wake on the run's
channel-layer notifications (live.run_waits) and read by seq from the database.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.http import StreamingHttpResponse

from tools_app.live.run_waits import RunWaits, read_on_stream_thread
from tools_app.models import TERMINAL_STATUSES, RunEvent
from tools_app.runs.store import selectors
from tools_app.runs.store.selectors import StoredEvent
from tools_app.web.api.base import ApiError
from tools_app.web.api.tokens import user_for_token

logger = logging.getLogger(__name__)

BATCH = 500  # events per read (selectors.events_after's default)
MAX_WAIT_SECONDS = 30.0  # the long poll's cap on ?wait


def event_json(event: RunEvent) -> dict[str, Any]:
    """One event as `GET /api/runs/<id>/events` lists it (and the stream's data line)."""
    return {"seq": event.seq, "kind": event.kind, "payload": event.payload,
            "created_at": event.created_at.isoformat()}


def read_after(run_id: str, after: int) -> tuple[list[StoredEvent], bool]:
    """The events after seq `after` (up to BATCH) and whether the run has ended with
    them. The status is read first: its end is committed with its last event, so a run
    read as ended has all its events stored. The end may also commit between the two
    reads: then the events hold it (and its notification may already be behind us)."""
    status = selectors.run_status(run_id)
    events = selectors.event_texts_after(run_id, after, BATCH)
    ended = status is None or status in TERMINAL_STATUSES or any(map(ends_run, events))
    return events, ended


def ends_run(event: StoredEvent) -> bool:
    if event.kind != "run_status":
        return False
    payload = json.loads(event.payload_json)
    return isinstance(payload, dict) and payload.get("status") in TERMINAL_STATUSES


def event_text(event: StoredEvent) -> str:
    """`event_json(event)` as JSON text on one line, its payload the stored text itself
    (stored JSON holds no line break outside its strings; one that did is re-encoded)."""
    payload = event.payload_json
    if "\n" in payload or "\r" in payload:
        payload = json.dumps(json.loads(payload), separators=(",", ":"))
    return (f'{{"seq":{event.seq},"kind":{json.dumps(event.kind)},"payload":{payload},'
            f'"created_at":{json.dumps(event.created_at.isoformat())}}}')


# -- the SSE stream --------------------------------------------------------------------


def sse_message(event: StoredEvent) -> bytes:
    """`id:` the seq (what a reconnecting client sends back as Last-Event-ID), `event:`
    the kind, `data:` the event's JSON on one line."""
    return f"id: {event.seq}\nevent: {event.kind}\ndata: {event_text(event)}\n\n".encode()


HEARTBEAT = b": keepalive\n\n"


def still_allowed(token: str, run_id: str) -> bool:
    """Whether the stream's token still lets its user see the run (not revoked, the
    user still active and still allowed): checked once a heartbeat's time."""
    user = user_for_token(token)
    return user is not None and selectors.run_for_api(run_id, user) is not None


async def sse_events(run_id: str, after: int, token: str) -> AsyncIterator[bytes]:
    """Every event after `after`, in seq order, as they are stored, until the run has
    ended and all its events are sent. A comment line every heartbeat of silence; the
    run is read again then too (a lost notification), and every few seconds without a
    channel layer. Once a heartbeat's time the token must still let its user see the run,
    else the stream ends (a reconnect then gets the API's 401 or 404)."""
    # Tell the client how long to wait before reconnecting (ms), then flush the headers.
    yield b"retry: 2000\n\n"
    try:
        async for chunk in _sse_events(run_id, after, token):
            yield chunk
    except DatabaseError as exc:
        # The headers are sent: end the stream; the client reconnects with Last-Event-ID.
        logger.warning("event stream of run %s ended: %s: %s", run_id, type(exc).__name__, exc)


async def _sse_events(run_id: str, after: int, token: str) -> AsyncIterator[bytes]:
    heartbeat = settings.AGENTFORGE_API_STREAM_HEARTBEAT_SECONDS
    async with RunWaits(run_id) as waits:
        sent_at = checked_at = time.monotonic()
        while True:
            events, ended = await read_on_stream_thread(read_after, run_id, after)
            if events:
                yield b"".join(sse_message(event) for event in events)
                after, sent_at = events[-1].seq, time.monotonic()
            if len(events) == BATCH:
                continue  # more stored: read on at once
            if ended:
                return
            if time.monotonic() - checked_at >= heartbeat:
                if not await read_on_stream_thread(still_allowed, token, run_id):
                    return
                checked_at = time.monotonic()
            quiet = heartbeat - (time.monotonic() - sent_at)
            if quiet <= 0:
                yield HEARTBEAT
                sent_at, quiet = time.monotonic(), heartbeat
            if not waits.pushed:
                quiet = min(quiet, settings.AGENTFORGE_LIVE_POLL_SECONDS)
            await waits.wait(after, quiet)


class EventStreamResponse(StreamingHttpResponse):
    """text/event-stream, uncached, unbuffered; `on_close` runs at the response's close
    (Django's handlers close every response, however its stream ended)."""

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], None]) -> None:
        super().__init__(content, content_type="text/event-stream")
        self.on_close = on_close
        self["Cache-Control"] = "no-store"
        self["X-Accel-Buffering"] = "no"  # nginx: pass each message on at once

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.on_close()


# -- the long poll ---------------------------------------------------------------------


async def long_poll(run_id: str, after: int, wait: float) -> AsyncIterator[bytes]:
    """`{"events", "last_seq"}` as soon as an event after `after` is stored, the run has
    ended, or `wait` seconds have passed (then with no events)."""
    deadline = time.monotonic() + wait
    events: list[StoredEvent] = []
    try:
        async with RunWaits(run_id) as waits:
            while True:
                events, ended = await read_on_stream_thread(read_after, run_id, after)
                left = deadline - time.monotonic()
                if events or ended or left <= 0:
                    break
                if not waits.pushed:
                    left = min(left, settings.AGENTFORGE_LIVE_POLL_SECONDS)
                await waits.wait(after, left)
    except DatabaseError as exc:
        # The 200 is sent: answer "nothing yet", which the client polls again after.
        logger.warning("long poll of run %s ended: %s: %s", run_id, type(exc).__name__, exc)
    texts = ",".join(map(event_text, events))
    yield f'{{"events":[{texts}],"last_seq":{events[-1].seq if events else after}}}'.encode()


def wait_seconds(raw: str) -> float:
    """?wait=S: a number of seconds, capped at MAX_WAIT_SECONDS."""
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):  # also refuses NaN
        raise ApiError(400, "invalid_field", "wait must be a number of seconds (0 to 30)",
                       field="wait")
    return min(seconds, MAX_WAIT_SECONDS)


# -- streams per user ------------------------------------------------------------------


class StreamCounts:
    """Open streams per user in this process, bounded by AGENTFORGE_API_STREAMS_PER_USER.
    Taken in the view (a request thread), given back by the response's close (Django
    calls it however the stream ended, even if it never started)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[Any, int] = {}

    def take(self, user_pk: Any) -> Callable[[], None]:
        with self._lock:
            count = self._open.get(user_pk, 0)
            if count >= settings.AGENTFORGE_API_STREAMS_PER_USER:
                raise ApiError(429, "too_many_streams",
                               f"At most {settings.AGENTFORGE_API_STREAMS_PER_USER} event "
                               "streams at once per user: close one first")
            self._open[user_pk] = count + 1
        released = False

        def give_back() -> None:
            nonlocal released
            with self._lock:
                if released:
                    return
                released = True
                left = self._open.get(user_pk, 1) - 1
                if left > 0:
                    self._open[user_pk] = left
                else:
                    self._open.pop(user_pk, None)
        return give_back

    def open(self, user_pk: Any) -> int:
        with self._lock:
            return self._open.get(user_pk, 0)


STREAMS = StreamCounts()
