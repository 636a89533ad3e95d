"""A run's event log: `RunEvent` rows numbered by a per-run `seq`, and the signal that
tells viewers a new one is committed.

The seq is allocated by incrementing `Run.last_seq` under the writer's lease token
(`UPDATE run SET last_seq = last_seq + k WHERE id = ? AND lease_token = ? RETURNING`,
one statement for a batch of k events), so a
worker that lost its lease writes nothing (`LeaseLost`) and the numbers have no gaps.

Viewers are told through `run_event_committed` (the live layer connects the
broadcaster); this layer never imports the live one. Notifications are best effort:
the database is the truth, and a viewer that misses one reads the rows by seq later.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from asgiref.sync import async_to_sync
from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone

from tools_app.models import Run, RunEvent
from tools_app.runs.store.sql import rowsql
from tools_app.runs.store.sql.rowsql import Add

logger = logging.getLogger(__name__)

run_event_committed = Signal()
"""Sent (with `run_id` and `message`: `{"seq": N}` or `{"fragment": {...}}`) once an
event is committed, or for a streaming fragment that is never stored. Receivers must be
async and must not raise."""


run_children_changed = Signal()
"""Sent (with `run_id`, of the parent) once a run made from it (a rerun, a fork, a
splice) is committed, so that the parent's viewers read its list of children again.
Receivers must be async and must not raise."""


class LeaseLost(Exception):
    """This worker no longer holds the run's lease: it must stop writing and leave."""


def next_seq(run_id: str | uuid.UUID, token: int | None) -> int:
    """Allocate the run's next event seq, fenced on the lease token (inside a transaction).

    token=None is for writers that already own the row in this transaction (the reaper,
    services acting on a run that is not executing).
    """
    return _allocate(run_id, token, 1, {})[0]


def append_event(run_id: str, token: int | None, kind: str, payload: dict[str, Any],
                 run_changes: Mapping[str, Any] | None = None,
                 expect: Mapping[str, Any] | None = None) -> int:
    return append_events(run_id, token, [(kind, payload)], run_changes, expect)[0]


def append_events(run_id: str, token: int | None, events: Sequence[tuple[str, dict[str, Any]]],
                  run_changes: Mapping[str, Any] | None = None,
                  expect: Mapping[str, Any] | None = None) -> tuple[int, bool]:
    """Append (kind, payload) events with consecutive seqs (inside a transaction): one
    fenced UPDATE of the run allocates them and applies `run_changes` (values, or
    `rowsql.Add` increments) to the run's row, one INSERT stores them. `expect`: more
    column values the run's row must have (else `LeaseLost`, as for the token). Returns
    the last seq, and whether the run's cancellation is requested (read by the same
    statement, so a run that writes needs no separate poll for it)."""
    last, cancel_requested = _allocate(run_id, token, len(events), run_changes or {},
                                       expect or {})
    first = last - len(events) + 1
    now = timezone.now()
    rowsql.insert(RunEvent, [
        {"run": run_id, "seq": first + offset, "kind": kind, "payload": payload,
         "created_at": now} for offset, (kind, payload) in enumerate(events)],
        fill_defaults=False)
    return last, cancel_requested


@dataclass(frozen=True)
class Append:
    """One run's events to append, as `append_events` takes them."""

    run_id: str
    token: int
    events: Sequence[tuple[str, dict[str, Any]]]
    run_changes: Mapping[str, Any]


def append_many(appends: Sequence[Append],
                expect: Mapping[str, Any]) -> list[tuple[int, bool]]:
    """`append_events` for several runs at once (inside a transaction): the runs' fenced
    UPDATEs as few statements as their changes have shapes (`rowsql.update_many`), then
    one INSERT of all their events. Raises `LeaseLost` for the first run whose token (or
    `expect`) no longer matches, before anything is inserted. Returns each run's (last
    seq, cancel_requested), in order."""
    keys = [run_key(append.run_id) for append in appends]
    if len(set(keys)) != len(keys):
        raise ValueError("one run's events must be appended together")  # one seq range a run
    shapes: dict[tuple[tuple[str, bool], ...], list[dict[str, Any]]] = {}
    for append in appends:
        row = {"id": append.run_id, "lease_token": append.token,
               "last_seq": Add(len(append.events)), **append.run_changes}
        shape = tuple((name, isinstance(value, Add)) for name, value in row.items())
        shapes.setdefault(shape, []).append(row)
    allocated: dict[str, tuple[int, bool]] = {}
    for rows in shapes.values():
        for run_id, last, cancel_requested in rowsql.update_many(
                Run, ("id", "lease_token"), rows, where=expect,
                returning=("id", "last_seq", "cancel_requested")):
            allocated[run_key(run_id)] = (int(last), bool(cancel_requested))
    for append, key in zip(appends, keys, strict=True):
        if key not in allocated:
            raise LeaseLost(f"run {append.run_id}: lease token {append.token} is no longer "
                            f"valid (or the run is not {dict(expect)})")
    now = timezone.now()
    rowsql.insert(RunEvent, [
        {"run": append.run_id, "seq": allocated[key][0] - len(append.events) + 1 + offset,
         "kind": kind, "payload": payload, "created_at": now}
        for append, key in zip(appends, keys, strict=True)
        for offset, (kind, payload) in enumerate(append.events)],
        fill_defaults=False)
    return [allocated[key] for key in keys]


def run_key(run_id: Any) -> str:
    """A run id as one spelling, whichever the database returned (SQLite's hex text,
    PostgreSQL's UUID) or the caller gave."""
    if isinstance(run_id, uuid.UUID):
        return run_id.hex
    return _key_of_text(str(run_id))


@lru_cache(maxsize=4096)
def _key_of_text(text: str) -> str:
    # Remembered: a request's rebuild spells the ids of its runs' rows and spans, a
    # few for every row, and parsing a UUID is most of what that costs.
    return uuid.UUID(text).hex


def _allocate(run_id: str | uuid.UUID, token: int | None, count: int,
              run_changes: Mapping[str, Any],
              expect: Mapping[str, Any] | None = None) -> tuple[int, bool]:
    """The fenced increment of the run's seq by `count` (with `run_changes`) and its
    result in one statement: (the last seq, cancel_requested)."""
    where: dict[str, Any] = {"id": run_id, **(expect or {})}
    if token is not None:
        where["lease_token"] = token
    row = rowsql.update(Run, where, {"last_seq": Add(count), **run_changes},
                        returning=("last_seq", "cancel_requested"))
    if row is None:
        raise LeaseLost(f"run {run_id}: lease token {token} is no longer valid"
                        + (f" (or the run is not {dict(expect)})" if expect else ""))
    return int(row[0]), bool(row[1])


async def notify(run_id: str, message: dict[str, Any]) -> None:
    """Tell live viewers something happened (after the commit, for a stored event)."""
    await run_event_committed.asend(sender=Run, run_id=run_id, message=message)


def notify_after_commit(run_id: str, seq: int) -> None:
    """Events written outside a run's own loop (a cancel, the reaper) reach live viewers
    too, once committed. Best effort, like every notification: the database is the truth."""

    def send() -> None:
        try:
            async_to_sync(notify)(run_id, {"seq": seq})
        except Exception:  # a broken channel layer must never fail a cancel or a reap
            logger.warning("could not notify viewers of run %s", run_id, exc_info=True)

    transaction.on_commit(send)


def notify_many_after_commit(last_seqs: Mapping[str, int]) -> None:
    """`notify_after_commit` for many runs written together (their last seqs by id): one
    hop to the event loop for them all, not one per run."""
    marks = dict(last_seqs)

    async def notify_all() -> None:
        for run_id, seq in marks.items():
            await notify(run_id, {"seq": seq})

    def send() -> None:
        try:
            async_to_sync(notify_all)()
        except Exception:  # a broken channel layer must never fail the write
            logger.warning("could not notify viewers of %d runs", len(marks), exc_info=True)

    if marks:
        transaction.on_commit(send)


def notify_child_after_commit(parent_id: str) -> None:
    """A run made from `parent_id` reaches the parent's live viewers (its list of
    children) once committed. Best effort: their sockets also read the list at every
    poll."""

    def send() -> None:
        try:
            async_to_sync(run_children_changed.asend)(sender=Run, run_id=parent_id)
        except Exception:  # a broken channel layer must never fail a rerun
            logger.warning("could not notify viewers of run %s of a new child", parent_id,
                           exc_info=True)

    transaction.on_commit(send)
