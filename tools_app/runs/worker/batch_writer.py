"""The runs of one event loop write their batches together: group commit.

Each run's recorder has at most one batch in flight (its batches are written in order);
it hands that batch here. A writer task of the event loop (`loop_groups`: up to one
per database lane, and the batches arriving while they are busy wait for the next
group; one writer a loop left the runs' last drains waiting behind its single
pipeline, docs/benchmarks/product-path.md) takes every batch waiting and writes them in
ONE transaction, with statements that carry all of their rows (the runs' fenced seq
allocations by `UPDATE ... FROM (VALUES ...)`, one INSERT of all their events, of all
their new rounds, of all their calls).

Why: the runs a worker drives move in step (their models answer after about the same
time), so their batches come in bursts, and SQLite takes one writer at a time. Written
run by run, a burst of 50 batches held the write lock about 2-3 ms each, one after
another, and the last waited well over 100 ms (docs/benchmarks/product-path.md); the
statements' cost is mostly per statement, not per row.

What a batch promises is kept whatever its group does:

- Each run's seqs are still allocated under its own lease token (and only while it is
  running): the fenced UPDATE returns the rows it changed, and a run missing from them
  has lost its lease.
- A group whose statements fail (a lost lease, a value a column refuses, a deadlock)
  is rolled back whole and its batches are written again one by one, each in its own
  transaction (`RunRecorder.record_batch`): each run then gets its own outcome, as if
  it had been alone, and no run pays for another's failure.
- A group whose COMMIT fails may or may not be stored: each of its batches fails with
  that error (the runs stop and are handed back, resumed from what is stored), never
  written again (it could be stored twice).
- Only after the commit are the waiting recorders told (they notify the viewers).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from django.db import transaction

from tools_app.models import RunStatus
from tools_app.runs.loops.loop_groups import LoopGroups
from tools_app.runs.store.db import write_turn
from tools_app.runs.store.eventlog import Append, append_many, run_key
from tools_app.runs.store.lifecycle import Ending, close_unfinished_of, last_round_indexes
from tools_app.runs.store.sanitize import CleanPayload
from tools_app.runs.store.sql.row_changes import RowChanges, write_all

logger = logging.getLogger(__name__)

# A batch is written only while the run is running under this worker: the token fences
# another worker out, the status this worker's own end (a batch still in flight then
# is refused, never stored after the run's last event).
WHILE_RUNNING = {"status": RunStatus.RUNNING}
# Batches written in one group at most: bounds one transaction's statements and the
# time the write lock is held (a group of 50 runs' round batches is about 500 events).
MAX_GROUP = 64

Events = Sequence[tuple[Any, dict[str, Any]]]


class Writes(Protocol):
    """What a batch's writer needs of its run's recorder."""

    run_id: str
    token: int

    def record_batch(self, batch: Events, *, end: Ending | None = None) -> int: ...

    def fold(self, batch: Events) -> RowChanges: ...

    def committed(self, changes: RowChanges, cancel_requested: bool) -> None: ...


@dataclass
class Batch:
    recorder: Writes
    events: Events
    # The run's end, written after the events as the batch's last one (the run's last
    # batch, handed over by the runner once its chat is over).
    end: Ending | None = None


def write_together(batches: Sequence[Batch], *, group: bool = False) -> list[int]:
    """Runs' batches (one each) in one transaction; raises what failed, nothing stored
    then (a group's failed statement as `_StatementFailed`, its cause the error).
    Returns each batch's last seq, in order."""
    with transaction.atomic():
        try:
            folded = [batch.recorder.fold(batch.events) for batch in batches]
            # The fenced seq allocations first: a lost lease writes nothing.
            allocated = append_many(_appends(batches, folded), expect=WHILE_RUNNING)
            write_all(folded)
            ends = {batch.recorder.run_id: (batch.end.status, batch.end.streamed)
                    for batch in batches if batch.end is not None and batch.end.terminal}
            if ends:
                # After the batches' own changes: what they left in flight is closed.
                close_unfinished_of(ends)
        except Exception as exc:
            if not group:
                raise
            raise _StatementFailed from exc
    for batch, changes, (_, cancel_requested) in zip(batches, folded, allocated, strict=True):
        batch.recorder.committed(changes, cancel_requested)
    return [seq for seq, _ in allocated]


def _appends(batches: Sequence[Batch], folded: Sequence[RowChanges]) -> list[Append]:
    """Each batch's events and run changes, for the fenced allocation of its seqs; an
    ending batch's with its run_status event and its move out of running last."""
    ending = [batch.recorder.run_id for batch in batches if batch.end is not None]
    stored_last_rounds = last_round_indexes(ending) if ending else {}
    appends = []
    for batch, changes in zip(batches, folded, strict=True):
        events = [(event.kind, _stored(payload)) for event, payload in batch.events]
        run_changes = changes.run_changes()
        if batch.end is not None:
            # The run's last round: the highest stored, or one this batch starts.
            last_round = max((index for index in (
                stored_last_rounds.get(run_key(batch.recorder.run_id)),
                *changes.started_rounds) if index is not None), default=None)
            events.append(("run_status", batch.end.event(last_round)))
            run_changes.update(batch.end.run_changes())
        appends.append(Append(batch.recorder.run_id, batch.recorder.token, events,
                              run_changes))
    return appends


def _stored(payload: dict[str, Any]) -> Any:
    """An event's payload as its row stores it (with its JSON text, when the recorder
    made it)."""
    return payload.stored() if isinstance(payload, CleanPayload) else payload


class _StatementFailed(Exception):
    """A group's statement failed: the transaction rolled back, nothing is stored."""


def write_group(batches: Sequence[Batch]) -> list[int | Exception]:
    """Each batch's last seq or the error that kept it from being stored, in order
    (the module docstring tells which error each gets)."""
    # On SQLite the groups, claims and ends of a process take turns (`db.write_turn`).
    with write_turn():
        return _write_group(batches)


def _write_group(batches: Sequence[Batch]) -> list[int | Exception]:
    if len(batches) == 1:
        return [_outcome(batches[0])]
    try:
        return list(write_together(batches, group=True))
    except _StatementFailed as failed:
        logger.info("a group of %d batches failed (%s); writing them one by one",
                    len(batches), failed.__cause__)
        return [_outcome(batch) for batch in batches]
    except Exception as exc:  # its COMMIT: whether it is stored is unknown
        logger.warning("the COMMIT of a group of %d batches failed", len(batches),
                       exc_info=True)
        return [exc for _ in batches]


def _outcome(batch: Batch) -> int | Exception:
    """The batch written alone, by its recorder (what the crash tests hold or fail)."""
    try:
        return batch.recorder.record_batch(batch.events, end=batch.end)
    except Exception as exc:
        return exc


_WRITERS: LoopGroups[Batch, int] = LoopGroups("event writer", write_group, MAX_GROUP)


async def write(recorder: Writes, events: Events, *, end: Ending | None = None) -> int:
    """Write one batch of a run's events (and, with `end`, the run's end after them)
    with whatever else this loop's runs have waiting; returns its last seq once
    committed, or raises what kept it from being stored (the recorder's own failure
    rules apply)."""
    return await _WRITERS.submit(Batch(recorder, events, end))
