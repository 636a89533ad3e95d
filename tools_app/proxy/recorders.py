"""Who records the proxy's exchanges: `recorder()`, as AGENTFORGE_PROXY_RECORDER says.

"process" (a server's default): a recorder process the serving process starts at its
first exchange, so building runs never takes the serving process's CPU or its GIL from
the event loop that relays requests. One feeder thread of the serving process hands it
what queued (up to `recording.MAX_BATCH` exchanges, recorded as one `recording.Batch`,
in order: one consumer) and waits for its answer before handing it the next, so the
server always knows what the child holds. The child sets Django up on the same settings
and database, records through the same run builder (`tools_app.ingest`), taking the
same write turns as the server's writers on SQLite (`runs.store.db.write_turn`), and
answers with the runs it changed, whose live viewers the serving process then tells (an
in-memory channel layer is per process). The queue is bounded (`recording.CAPACITY`,
counted in `dropped` and logged past it; the client never waits). A child that dies
is started again at the next batch; what it held is counted in `lost` and logged. It
exits when the server's end of its pipe closes (the server gone, however it went) or
at `close()`, called at the server's exit: that records what is queued first, waiting
`STOP_SECONDS` at most; what is still queued then is counted in `lost` and logged.
It ignores SIGINT and SIGTERM (sent to the whole process group at a Ctrl-C or a
service stop): the server's exit ends it.

"thread": `recording.Recorder`, a thread of the serving process (tests that reach into
the recording in process use it).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Protocol

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connections

from tools_app.proxy import recorder_child
from tools_app.proxy.exchanges import Exchange, Handed
from tools_app.proxy.recording import CAPACITY, MAX_BATCH, Recorder
from tools_app.runs.store.eventlog import notify

logger = logging.getLogger(__name__)

STOP_SECONDS = 10.0  # how long close() waits for the queue and the child before killing it
LOOK_SECONDS = 0.5  # an exchange queued without waking the feeder waits at most this


class ExchangeRecorder(Protocol):
    dropped: int

    def submit(self, exchange: Exchange, *, wake: bool = True) -> bool: ...

    def wake(self) -> None: ...

    def drain(self) -> None: ...

    def release_connections(self) -> None: ...


_RECORDERS: dict[str, ExchangeRecorder] = {}
_CHOOSING = threading.Lock()


def recorder() -> ExchangeRecorder:
    """This process's recorder of the configured kind (made at first use)."""
    kind = settings.AGENTFORGE_PROXY_RECORDER
    found = _RECORDERS.get(kind)
    if found is None:
        with _CHOOSING:
            found = _RECORDERS.get(kind)
            if found is None:
                found = _RECORDERS[kind] = (ProcessRecorder() if kind == "process"
                                            else Recorder())
    return found


def made() -> list[ExchangeRecorder]:
    """The recorders this process has made so far."""
    return list(_RECORDERS.values())


@dataclass
class _Child:
    process: Any  # multiprocessing's SpawnProcess
    connection: Connection


@dataclass
class ProcessRecorder:
    """The serving process's side: a bounded queue, the feeder thread, the child."""

    capacity: int = CAPACITY
    dropped: int = 0
    """Exchanges not recorded because the queue was full."""
    lost: int = 0
    """Exchanges not recorded because a recorder process died holding them, or still
    queued when `close()` stopped waiting for them."""
    started: int = 0
    """Recorder processes started (the first, then one per restart)."""
    _pending: deque[Handed] = field(default_factory=deque)
    _in_flight: int = 0
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _talking: threading.Lock = field(default_factory=threading.Lock)
    _feeder: threading.Thread | None = None
    _child: _Child | None = None
    _closed: bool = False
    """No more exchanges taken (`close()` began)."""
    _stopped: bool = False
    """The feeder hands nothing more over (`close()` stopped waiting for the queue)."""

    def submit(self, exchange: Exchange, *, wake: bool = True) -> bool:
        """Queue the exchange, in order; False (counted, logged) if the queue is full.
        Never waits. `wake=False`: the feeder is woken later (`wake()`, once the answer
        is written) or by its next look at the queue (`LOOK_SECONDS`)."""
        handed = exchange.handed()
        with self._changed:
            full = self._closed or len(self._pending) >= self.capacity
            if full:
                self.dropped += 1
                dropped = self.dropped
            else:
                self._pending.append(handed)
                if wake:
                    self._changed.notify_all()
        if full:
            logger.warning("recording queue full (%d waiting): an exchange with endpoint "
                           "%s not recorded (%d dropped so far)", self.capacity,
                           handed.endpoint_name, dropped)
            return False
        self._start_feeder()
        return True

    def wake(self) -> None:
        """Have the feeder take what is queued now."""
        with self._changed:
            self._changed.notify_all()

    def drain(self) -> None:
        """Wait until every exchange handed over so far is recorded (or lost)."""
        with self._changed:
            self._changed.wait_for(lambda: not self._pending and not self._in_flight)

    def release_connections(self) -> None:
        """Once what is queued is recorded, the child closes its database connections
        (a test database is dropped only when no one is connected)."""
        self.drain()
        with self._talking:
            if self._child is not None:
                self._ask(self._child, ("close", None))

    def close(self) -> None:
        """Record what is queued (waiting `STOP_SECONDS` at most), then stop the feeder
        and the child (asked, then killed if it does not stop in time); what is still
        queued by then is not recorded (counted in `lost`, logged)."""
        deadline = time.monotonic() + STOP_SECONDS
        self._finish_queue()
        # A child stuck in its batch is not waited for: killed, its batch counted lost.
        talking = self._talking.acquire(timeout=max(0.0, deadline - time.monotonic()))
        try:
            child, self._child = self._child, None
            if child is not None:
                if talking:
                    with contextlib.suppress(EOFError, OSError):  # it died meanwhile
                        self._ask(child, ("stop", None))
                _reap(child)
        finally:
            if talking:
                self._talking.release()

    def _finish_queue(self) -> None:
        """Take no more exchanges, let the feeder hand over what is queued until it is
        recorded or `STOP_SECONDS` have passed, then stop it; what is left is lost."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            self._changed.wait_for(lambda: not self._pending and not self._in_flight,
                                   timeout=STOP_SECONDS)
            self._stopped = True
            left = len(self._pending)
            self._pending.clear()
            self.lost += left
            lost = self.lost
            self._changed.notify_all()
        if left:
            logger.warning("the proxy's recorder was closed with %d exchanges still queued: "
                           "not recorded (%d lost so far)", left, lost)

    @property
    def child_pid(self) -> int | None:
        child = self._child
        return child.process.pid if child is not None else None

    # -- the feeder thread ----------------------------------------------------------

    def _start_feeder(self) -> None:
        if self._feeder is None:
            with self._changed:
                if self._feeder is None:
                    self._feeder = threading.Thread(target=self._feed, daemon=True,
                                                    name="proxy-recorder-feeder")
                    self._feeder.start()

    def _feed(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._pending or self._stopped,
                                       timeout=LOOK_SECONDS)
                if self._stopped:
                    return
                if not self._pending:
                    continue
                batch = [self._pending.popleft()
                         for _ in range(min(MAX_BATCH, len(self._pending)))]
                self._in_flight = len(batch)
            try:
                self._hand_over(batch)
            except Exception:  # the process could not be started: counted as lost
                with self._changed:
                    self.lost += len(batch)
                logger.exception("handing %d proxied exchanges to the recorder failed",
                                 len(batch))
            finally:
                with self._changed:
                    self._in_flight = 0
                    self._changed.notify_all()

    def _hand_over(self, batch: list[Handed]) -> None:
        with self._talking:
            if self._stopped:  # close() gave up waiting before this batch's turn
                with self._changed:
                    self.lost += len(batch)
                    lost = self.lost
                logger.warning("the proxy's recorder was closed: %d exchanges handed to "
                               "it not recorded (%d lost so far)", len(batch), lost)
                return
            child = self._child = self._child or self._spawn()
            try:
                notices = self._ask(child, ("record", batch))
            except (EOFError, OSError):
                self._child = None
                _reap(child)
                with self._changed:
                    self.lost += len(batch)
                    lost = self.lost
                logger.warning("the proxy's recorder process died (exit code %s): %d "
                               "exchanges it held not recorded (%d lost so far); it is "
                               "started again", child.process.exitcode, len(batch), lost)
                return
        if notices:
            _tell_viewers(notices)

    @staticmethod
    def _ask(child: _Child, message: tuple[str, Any]) -> Any:
        child.connection.send(message)
        return child.connection.recv()

    def _spawn(self) -> _Child:
        context = multiprocessing.get_context("spawn")  # no fork of a threaded server
        ours, theirs = context.Pipe()
        process = context.Process(
            target=recorder_child.main, name="proxy-recorder", daemon=True,
            args=(theirs, os.environ.get("DJANGO_SETTINGS_MODULE") or settings.SETTINGS_MODULE,
                  str(connections["default"].settings_dict["NAME"]), _nice()))
        process.start()
        theirs.close()  # the child's end: its death is then our end's EOF
        if not self.started:
            atexit.register(self.close)
        self.started += 1
        return _Child(process, ours)


def _nice() -> int:
    """How much lower the recorder runs than the server. Not on SQLite: there it takes
    the server's write turn (a file lock) for each batch, and the server's writers would
    wait on a process the CPU serves last."""
    if connections["default"].vendor == "sqlite":
        return 0
    return int(settings.AGENTFORGE_PROXY_RECORDER_NICE)


def _reap(child: _Child) -> None:
    child.connection.close()
    child.process.join(STOP_SECONDS)
    if child.process.is_alive():
        child.process.kill()
        child.process.join(STOP_SECONDS)


def _tell_viewers(notices: dict[str, dict[str, Any]]) -> None:
    """The runs the child changed reach their live viewers from this process."""
    async def tell() -> None:
        for run_id, message in notices.items():
            await notify(run_id, message)

    try:
        async_to_sync(tell)()
    except Exception:  # a broken channel layer must never stop the recording
        logger.warning("could not notify viewers of %d proxied runs", len(notices),
                       exc_info=True)
