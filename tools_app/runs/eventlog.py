"""A run's event log: `RunEvent` rows numbered by a per-run `seq`, and the signal that
tells viewers a new one is committed.

The seq is allocated by incrementing `Run.last_seq` under the writer's lease token
(`UPDATE run SET last_seq = last_seq + 1 WHERE id = ? AND lease_token = ?`), so a
worker that lost its lease writes nothing (`LeaseLost`) and the numbers have no gaps.

Viewers are told through `run_event_committed` (the live layer connects the
broadcaster); this layer never imports the live one. Notifications are best effort:
the database is the truth, and a viewer that misses one reads the rows by seq later.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from asgiref.sync import async_to_sync
from django.db import connection, transaction
from django.db.models import F, Field
from django.dispatch import Signal
from django.utils import timezone

from ..models import Run, RunEvent
from . import rowsql
from .rowsql import Add

logger = logging.getLogger(__name__)

run_event_committed = Signal()
"""Sent (with `run_id` and `message`: `{"seq": N}` or `{"fragment": {...}}`) once an
event is committed, or for a streaming fragment that is never stored. Receivers must be
async and must not raise."""


class LeaseLost(Exception):
    """This worker no longer holds the run's lease: it must stop writing and leave."""


def next_seq(run_id: str | uuid.UUID, token: int | None, count: int = 1) -> int:
    """Allocate the run's next `count` event seqs, fenced on the lease token (inside a
    transaction); returns the last of them (the first is `last - count + 1`).

    token=None is for writers that already own the row in this transaction (the reaper,
    services acting on a run that is not executing).
    """
    if connection.features.can_return_columns_from_insert:  # RETURNING: PostgreSQL, SQLite
        seq = _increment_returning(run_id, token, count)
    else:
        rows = Run.objects.filter(pk=run_id)
        if token is not None:
            rows = rows.filter(lease_token=token)
        updated = rows.update(last_seq=F("last_seq") + count)
        seq = Run.objects.filter(pk=run_id).values_list("last_seq", flat=True).get() \
            if updated == 1 else None
    if seq is None:
        raise LeaseLost(f"run {run_id}: lease token {token} is no longer valid")
    return seq


def _increment_returning(run_id: str | uuid.UUID, token: int | None,
                         count: int) -> int | None:
    """The fenced increment and its result in one statement (the ORM's update() returns
    only a row count, which would cost a second query per event)."""
    quote = connection.ops.quote_name
    meta = Run._meta
    pk = meta.pk
    assert pk is not None
    seq_column = quote(_column(meta.get_field("last_seq")))
    # Only quoted identifiers from the model's metadata are formatted in; values are
    # parameters.
    sql = (f"UPDATE {quote(meta.db_table)} SET {seq_column} = {seq_column} + %s "  # noqa: S608
           f"WHERE {quote(_column(pk))} = %s")
    params: list[Any] = [count, pk.get_db_prep_value(run_id, connection)]
    if token is not None:
        sql += f" AND {quote(_column(meta.get_field('lease_token')))} = %s"
        params.append(token)
    with connection.cursor() as cursor:
        cursor.execute(f"{sql} RETURNING {seq_column}", params)
        row = cursor.fetchone()
    return int(row[0]) if row is not None else None


def _column(field: Field[Any, Any]) -> str:
    """A concrete field's column: None only before the field is bound to its model."""
    column = field.column
    assert column is not None
    return column


def append_event(run_id: str, token: int | None, kind: str, payload: dict[str, Any]) -> int:
    seq = next_seq(run_id, token)
    RunEvent.objects.create(run_id=run_id, seq=seq, kind=kind, payload=payload)
    return seq


def append_events(run_id: str, token: int | None, events: Sequence[tuple[str, dict[str, Any]]],
                  run_changes: Mapping[str, Any] | None = None) -> tuple[int, bool]:
    """Append (kind, payload) events with consecutive seqs (inside a transaction): one
    fenced UPDATE of the run allocates them and applies `run_changes` (values, or
    `rowsql.Add` increments) to the run's row, one INSERT stores them. Returns the last
    seq, and whether the run's cancellation is requested (read by the same statement,
    so a run that writes needs no separate poll for it)."""
    where: dict[str, Any] = {"id": run_id}
    if token is not None:
        where["lease_token"] = token
    values = {"last_seq": Add(len(events)), **(run_changes or {})}
    row = rowsql.update(Run, where, values, returning=("last_seq", "cancel_requested"))
    if row is None:
        raise LeaseLost(f"run {run_id}: lease token {token} is no longer valid")
    last, cancel_requested = int(row[0]), bool(row[1])
    first = last - len(events) + 1
    now = timezone.now()
    rowsql.insert(RunEvent, [
        {"run": run_id, "seq": first + offset, "kind": kind, "payload": payload,
         "created_at": now} for offset, (kind, payload) in enumerate(events)],
        fill_defaults=False)
    return last, cancel_requested


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
