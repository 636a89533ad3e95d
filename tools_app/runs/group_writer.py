"""One writer per event loop for every run's event batches (group commit across runs).

Each run's recorder forms its own batches (runs.recorder); this module commits them.
While a group is being written, the batches other runs hand in queue up, and the next
group takes them: ONE transaction, one hop to a database thread, one commit for up to
`max_group` runs, instead of one each. Each batch is still written by its run's own
statements (`RunRecorder.stage_batch`, the seqs fenced by its lease token), in the
order the batches came in; a run has one batch in flight at most, so its own order
holds.

A group whose statements fail (one run's lease lost, a row the database refuses, the
database itself) is rolled back whole and each of its batches is then written alone,
in its own transaction: a failure stays its own run's, as if the runs had never been
grouped. A group whose COMMIT fails is not written again (it may have committed): each
of its batches gets the error, as a batch written alone would. No savepoint per run:
measured, they cost what grouping saves (docs/benchmarks/product-path.md).

Only on SQLite are batches grouped (`WRITER`): its one writer at a time makes a group
the natural unit. On PostgreSQL two concurrent groups could take the tool counters'
row locks (runs.audit_schema) in opposite orders and deadlock; each batch is its own
group there, as it always was.

Drivers: a task on the loop of the run whose batch found fewer than `max_drivers`
writing, in that run's context, so it writes on that run's database lane
(runs.task_backend): lanes overlap one another's database waits (measured: one driver
for the whole process was slower than none). Batches are queued per event loop and a
driver takes only its own loop's: a loop's tasks never write on another loop's thread
(a test's loop runs its thread-sensitive work on the test's own thread, inside the
test's transaction). A driver that stops without finishing (its loop closing) fails
what it took and what its loop queued: those runs are stopping with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any, Protocol

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction

Batch = Sequence[tuple[Any, dict[str, Any]]]
# Batches per group, at most: a group's batches are all committed when the last one is
# written, so a bigger group makes its first runs wait longer for their commit.
MAX_GROUP = 10


class RunRecorder(Protocol):
    """What the writer needs of a run's recorder (runs.recorder.RunRecorder)."""

    def record_batch(self, batch: Batch) -> int: ...

    def stage_batch(self, batch: Batch) -> tuple[int, dict[int, int]]: ...

    def committed(self, new_rounds: dict[int, int]) -> None: ...


@dataclass
class _Handed:
    recorder: RunRecorder
    batch: Batch
    done: Future[int] = field(default_factory=Future)


class GroupWriter:
    def __init__(self, *, max_drivers: int, max_group: int = MAX_GROUP) -> None:
        self.max_drivers = max_drivers
        self.max_group = max_group
        self._lock = threading.Lock()
        self._queued: dict[asyncio.AbstractEventLoop, list[_Handed]] = {}
        self._drivers: dict[asyncio.AbstractEventLoop, set[asyncio.Task[None]]] = {}

    async def write(self, recorder: RunRecorder, batch: Batch) -> int:
        """Commit `batch` for `recorder`'s run (with whatever other runs handed in
        meanwhile); returns its last seq, or raises what writing it alone raised."""
        loop = asyncio.get_running_loop()
        handed = _Handed(recorder, batch)
        with self._lock:
            self._forget_closed_loops()
            self._queued.setdefault(loop, []).append(handed)
            drivers = self._drivers.setdefault(loop, set())
            if len(drivers) < self.max_drivers:
                drivers.add(loop.create_task(self._drive(loop)))
        return await asyncio.wrap_future(handed.done)

    def _forget_closed_loops(self) -> None:
        for loop in [loop for loop in self._queued if loop.is_closed()]:
            for handed in self._queued.pop(loop):
                _resolve(handed.done, error=RuntimeError("the event loop closed"))
            self._drivers.pop(loop, None)

    async def _drive(self, loop: asyncio.AbstractEventLoop) -> None:
        group: list[_Handed] = []
        try:
            while group := self._take(loop):
                # A batch whose writer stopped waiting (its loop is closing) is skipped.
                group = [h for h in group if h.done.set_running_or_notify_cancel()]
                if group:
                    await sync_to_async(write_group)(group)
        except BaseException as exc:
            # Cancelled (its loop is closing) or the hop failed: the group may never
            # reach a thread, and nothing may be left waiting.
            with self._lock:
                self._drivers.get(loop, set()).discard(asyncio.current_task())
                stranded = self._queued.pop(loop, []) if not self._drivers.get(loop) else []
            for handed in [*group, *stranded]:
                _resolve(handed.done, error=exc)
            raise

    def _take(self, loop: asyncio.AbstractEventLoop) -> list[_Handed]:
        """The next group of this loop's batches; none left: this driver stops."""
        with self._lock:
            queued = self._queued.get(loop, [])
            group = queued[:self.max_group]
            del queued[:self.max_group]
            if not group:
                self._drivers.get(loop, set()).discard(asyncio.current_task())
            return group


def write_group(group: list[_Handed]) -> None:
    """Commit the group in one transaction, or each batch alone if its statements
    fail; every batch's future is resolved, whatever happens."""
    try:
        if len(group) == 1:
            _write_alone(group[0])
            return
        staged: list[tuple[int, dict[int, int]]] | None = None
        try:
            with transaction.atomic():
                staged = [h.recorder.stage_batch(h.batch) for h in group]
        except Exception as exc:
            if staged is not None:
                # The COMMIT failed: the group may be stored, so it is never written
                # again; each run gets the error, as a batch written alone would.
                for handed in group:
                    _resolve(handed.done, error=exc)
                return
            # Someone's batch failed the group: each is written alone, so the failure
            # is only its own run's.
            for handed in group:
                _write_alone(handed)
            return
        for handed, (seq, new_rounds) in zip(group, staged, strict=True):
            handed.recorder.committed(new_rounds)
            _resolve(handed.done, seq=seq)
    except BaseException as exc:
        # A thread stopping mid-group: what was not resolved is reported as not written.
        for handed in group:
            _resolve(handed.done, error=exc)
        raise


def _write_alone(handed: _Handed) -> None:
    try:
        seq = handed.recorder.record_batch(handed.batch)
    except Exception as exc:
        _resolve(handed.done, error=exc)
    else:
        _resolve(handed.done, seq=seq)


def _resolve(done: Future[int], *, seq: int = 0, error: BaseException | None = None,
             ) -> None:
    """Settle a batch's future once: a stopping driver and the thread writing its
    group may both try."""
    if done.done():
        return
    with contextlib.suppress(InvalidStateError):
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(seq)


def _max_group() -> int:
    return MAX_GROUP if connections[DEFAULT_DB_ALIAS].vendor == "sqlite" else 1


WRITER = GroupWriter(max_drivers=settings.AGENTFORGE_WORKER_DB_THREADS,
                     max_group=_max_group())
