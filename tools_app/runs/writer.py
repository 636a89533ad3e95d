"""The process-wide event writer: every run's events, committed together (group commit).

Without it each run writes every event in a transaction of its own, from a thread and a
connection of its own: on SQLite one writer gets in at a time and the others wait in
its busy handler; on PostgreSQL every event is a commit. A process that executes runs
(daphne's embedded worker, `db_worker`) starts one `EventWriter`: a thread with its own
connection that takes whatever the runs queued meanwhile and writes it in ONE
transaction, then notifies the viewers of each run touched (the highest seq, once).

What stays exact:
- Each item is the same work the recorder does in its own transaction (`write`: the
  seq allocated under the lease token, the state change, the RunEvent), in the order
  the runs emitted them, so a run's seqs stay gapless and in emission order.
- A worker that lost its lease writes nothing: the fenced seq increment is the item's
  first statement and changes no row then, so nothing of that item needs undoing; the
  run's later items are skipped and the run sees `LeaseLost`.
- Any other failure rolls the batch back and writes its items again one transaction
  each, so one run's bad value or a broken connection reaches that run (or every run, if
  the database is down) exactly as it did when each run wrote alone.
- The recorder waits for the commit only where the crash-safety contract needs it (see
  `recorder.DURABLE_KINDS`); those waits share batches too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.db import connections, transaction

from .db import drop_broken_connections
from .eventlog import LeaseLost, notify

logger = logging.getLogger(__name__)

MAX_BATCH = 500  # items per transaction: bounds a batch's lock time and memory
IDLE_CLOSE_S = 5.0  # an idle writer closes its connection (a database restart, tests)
THREAD_NAME = "agentforge-event-writer"


class Recordable(Protocol):
    """What the writer needs of a run's recorder."""

    run_id: str
    failure: BaseException | None

    def write(self, event: Any, payload: dict[str, Any]) -> int: ...


@dataclass(eq=False)
class Item:
    recorder: Recordable
    event: Any
    payload: dict[str, Any]
    loop: asyncio.AbstractEventLoop
    future: Future[int] = field(default_factory=Future)


class EventWriter:
    """One thread, one connection, one transaction per batch of queued events."""

    def __init__(self) -> None:
        # Items, or a marker: an Event set once everything queued before it is written,
        # None to stop the thread after writing everything queued before it.
        self._queue: queue.SimpleQueue[Item | threading.Event | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def submit(self, recorder: Recordable, event: Any, payload: dict[str, Any]) -> Future[int]:
        """Queue one event of a run; the future holds its seq once committed."""
        item = Item(recorder, event, payload, asyncio.get_running_loop())
        self._queue.put(item)
        return item.future

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far is written (or failed); False on timeout."""
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout)

    def stop(self, timeout: float | None = None) -> None:
        """Write what is queued, then end the thread (its connection closed)."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            try:
                first = self._queue.get(timeout=IDLE_CLOSE_S)
            except queue.Empty:
                connections.close_all()  # reopened by the next batch
                continue
            batch: list[Item] = []
            marker = self._gather(first, batch)
            if batch:
                self._write(batch)
            if marker is None:
                connections.close_all()
                return
            if isinstance(marker, threading.Event):
                marker.set()

    def _gather(self, first: Item | threading.Event | None, batch: list[Item],
                ) -> threading.Event | bool | None:
        """Fill `batch` with queued items up to a marker; the marker, or False if none."""
        element = first
        while isinstance(element, Item):
            batch.append(element)
            if len(batch) >= MAX_BATCH:
                return False
            try:
                element = self._queue.get_nowait()
            except queue.Empty:
                return False
        return element

    @staticmethod
    def _write(batch: list[Item]) -> None:
        try:
            write_batch(batch)
        except BaseException:  # never let the thread die: the runs would wait forever
            logger.exception("the event writer failed a batch")
            _settle(batch, {}, RuntimeError("the event writer failed"))


def write_batch(batch: list[Item]) -> None:
    """Write a batch in one transaction (falling back to one each), then settle it."""
    try:
        with transaction.atomic():
            results = {item: _write_one(item) for item in batch}
    except Exception:
        # Not a lost lease (that writes nothing and is a result): something only some
        # item, or the database itself, got wrong. Each item alone, as runs wrote before.
        drop_broken_connections()
        results = {item: _write_alone(item) for item in batch}
    _settle(batch, results, None)


def _write_one(item: Item) -> int | BaseException:
    recorder = item.recorder
    if recorder.failure is not None:
        return recorder.failure  # an earlier event of this run was not stored: stop here
    try:
        return recorder.write(item.event, item.payload)
    except LeaseLost as lost:  # its fenced increment matched no row: nothing written
        recorder.failure = lost
        return lost


def _write_alone(item: Item) -> int | BaseException:
    try:
        with transaction.atomic():
            return _write_one(item)
    except Exception as exc:
        item.recorder.failure = exc
        drop_broken_connections()
        return exc


def _settle(batch: list[Item], results: dict[Item, int | BaseException],
            default: BaseException | None) -> None:
    """Notify each run's viewers once (its highest committed seq), then release the
    waiting runs: notifications first, so a run that finishes right after still has
    its loop running when they are sent."""
    highest: dict[tuple[asyncio.AbstractEventLoop, str], int] = {}
    for item in batch:
        result = results.get(item, default)
        if isinstance(result, int):
            key = (item.loop, item.recorder.run_id)
            highest[key] = max(highest.get(key, 0), result)
    for (loop, run_id), seq in highest.items():
        _call_soon(loop, _spawn_notify, run_id, seq)
    for item in batch:
        result = results.get(item, default)
        if isinstance(result, int):
            item.future.set_result(result)
        else:
            item.future.set_exception(result or RuntimeError("not written"))


_notifying: set[asyncio.Task[None]] = set()


def _spawn_notify(run_id: str, seq: int) -> None:
    task = asyncio.get_running_loop().create_task(notify(run_id, {"seq": seq}))
    _notifying.add(task)  # a task nobody references may be collected before it runs
    task.add_done_callback(_notifying.discard)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., None],
               *args: Any) -> None:
    # A run's loop that has ended refuses it: the runner's own last notification covers it.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)


_writer: EventWriter | None = None
_lock = threading.Lock()


def start_event_writer() -> EventWriter:
    """Start this process's writer (once); runs recorded from now on go through it."""
    global _writer
    with _lock:
        if _writer is None:
            _writer = EventWriter()
        return _writer


def current_writer() -> EventWriter | None:
    return _writer


def stop_event_writer(timeout: float | None = None) -> None:
    """Write what is queued and stop the writer; runs then write their events inline."""
    global _writer
    with _lock:
        writer, _writer = _writer, None
    if writer is not None:
        writer.stop(timeout)
