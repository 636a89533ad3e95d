"""The Run row owns crash safety: lease, fencing token, heartbeats and the reaper.

django-tasks-db has no lease (a SIGKILLed worker leaves its task RUNNING forever), so a
worker must hold the run's lease to write anything about it. Claiming bumps
`lease_token`; every later write is `... WHERE lease_token = <mine>`, so a worker that
lost its lease (it stalled past expiry and someone else took over) changes nothing.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from .models import Run, RunEvent, RunStatus

logger = logging.getLogger(__name__)

CLAIMABLE = (RunStatus.QUEUED, RunStatus.INTERRUPTED)


class LeaseLost(Exception):
    """This worker no longer holds the run's lease: it must stop writing and leave."""


def new_worker_id() -> str:
    return f"{_this_process()}{uuid.uuid4().hex[:8]}"


def _this_process() -> str:
    """The prefix of every worker id this process hands out."""
    return f"{socket.gethostname()}:{os.getpid()}:"


def lease_duration() -> timedelta:
    return timedelta(seconds=settings.AGENTFORGE_LEASE_SECONDS)


def claim(run_id: str, worker_id: str) -> int | None:
    """Take the run's lease if it is claimable; return the fencing token or None."""
    now = timezone.now()
    claimable = Q(status__in=CLAIMABLE) | Q(status=RunStatus.RUNNING, lease_expires_at__lt=now)
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(claimable, pk=run_id).first()
        if run is None:
            return None
        if run.cancel_requested:
            # Cancelled while no worker could act on it (its worker died, or was stopping):
            # end it now, or it would stay interrupted for ever.
            cancel_now(run, "Cancelled by the user")
            return None
        token = run.lease_token + 1
        Run.objects.filter(pk=run_id, lease_token=run.lease_token).update(
            status=RunStatus.RUNNING,
            lease_owner=worker_id,
            lease_token=token,
            lease_expires_at=now + lease_duration(),
            started_at=run.started_at or now,
        )
    return token


def cancel_now(run: Run, message: str) -> None:
    """End a run no worker is executing as cancelled (the caller holds its row lock);
    bumping the token fences out any worker that might still claim it."""
    token = run.lease_token + 1
    Run.objects.filter(pk=run.pk).update(
        status=RunStatus.CANCELLED, cancel_requested=True, lease_token=token,
        lease_owner="", lease_expires_at=None, error_type="Cancelled",
        error_message=message, finished_at=timezone.now(),
    )
    seq = append_event(str(run.pk), token, "run_status", {"status": RunStatus.CANCELLED})
    notify_viewers_after_commit(str(run.pk), seq)


def renew(run_id: str, token: int) -> bool:
    """Extend the lease; False if it was lost."""
    updated = Run.objects.filter(pk=run_id, lease_token=token).update(
        lease_expires_at=timezone.now() + lease_duration()
    )
    return updated == 1


def cancel_requested(run_id: str) -> bool:
    return Run.objects.filter(pk=run_id, cancel_requested=True).exists()


def next_seq(run_id: str | uuid.UUID, token: int | None) -> int:
    """Allocate the run's next event seq, fenced on the lease token (inside a transaction).

    token=None is for writers that already own the row in this transaction (the reaper,
    services acting on a run that is not executing).
    """
    if connection.features.can_return_columns_from_insert:  # RETURNING: PostgreSQL, SQLite
        seq = _increment_returning(run_id, token)
    else:
        rows = Run.objects.filter(pk=run_id)
        if token is not None:
            rows = rows.filter(lease_token=token)
        updated = rows.update(last_seq=F("last_seq") + 1)
        seq = Run.objects.filter(pk=run_id).values_list("last_seq", flat=True).get() \
            if updated == 1 else None
    if seq is None:
        raise LeaseLost(f"run {run_id}: lease token {token} is no longer valid")
    return seq


def _increment_returning(run_id: str | uuid.UUID, token: int | None) -> int | None:
    """The fenced increment and its result in one statement (the ORM's update() returns
    only a row count, which cost a second query per event)."""
    quote = connection.ops.quote_name
    meta = Run._meta
    pk = meta.pk
    assert pk is not None
    seq_column = quote(meta.get_field("last_seq").column)
    # Only quoted identifiers from the model's metadata are formatted in; values are
    # parameters.
    sql = (f"UPDATE {quote(meta.db_table)} SET {seq_column} = {seq_column} + 1 "  # noqa: S608
           f"WHERE {quote(pk.column)} = %s")
    params: list[Any] = [pk.get_db_prep_value(run_id, connection)]
    if token is not None:
        sql += f" AND {quote(meta.get_field('lease_token').column)} = %s"
        params.append(token)
    with connection.cursor() as cursor:
        cursor.execute(f"{sql} RETURNING {seq_column}", params)
        row = cursor.fetchone()
    return int(row[0]) if row is not None else None


def append_event(run_id: str, token: int | None, kind: str, payload: dict[str, Any]) -> int:
    seq = next_seq(run_id, token)
    RunEvent.objects.create(run_id=run_id, seq=seq, kind=kind, payload=payload)
    return seq


def release_this_process_runs() -> list[str]:
    """Hand back every run this process is executing, because it is stopping (the
    embedded server's SIGTERM): interrupted, token bumped (so a step still in flight
    writes nothing), to be resumed at once instead of after its lease expires: the
    embedded server's next start picks interrupted runs up; a `db_worker` re-enqueues them
    for the others. Not a lost worker: resume_count is unchanged."""
    mine = Run.objects.filter(status=RunStatus.RUNNING, lease_owner__startswith=_this_process())
    released: list[str] = []
    for run_id in mine.values_list("pk", flat=True):
        with transaction.atomic():
            run = mine.select_for_update().filter(pk=run_id).first()
            if run is None:
                continue
            _mark_interrupted(run, "the server stopped; the run resumes when it starts again",
                              lost_worker=False)
        released.append(str(run_id))
    return released


def notify_viewers_after_commit(run_id: str, seq: int) -> None:
    """Events written outside a run's own loop (a cancel, the reaper) reach live viewers
    too, once committed. Best effort, like every notification: the database is the truth."""

    def send() -> None:
        from .recorder import notify  # the recorder imports this module

        try:
            async_to_sync(notify)(run_id, {"seq": seq})
        except Exception:  # a broken channel layer must never fail a cancel or a reap
            logger.warning("could not notify viewers of run %s", run_id, exc_info=True)

    transaction.on_commit(send)


def reap_expired_runs() -> list[str]:
    """Runs whose lease expired: re-queue them (bounded) or fail them as worker lost.

    Returns the ids of runs to (re-)enqueue; the caller enqueues them after commit.
    """
    now = timezone.now()
    expired = Run.objects.filter(status=RunStatus.RUNNING, lease_expires_at__lt=now)
    to_enqueue: list[str] = []
    for run_id in expired.values_list("pk", flat=True):
        with transaction.atomic():
            run = Run.objects.select_for_update().filter(
                pk=run_id, status=RunStatus.RUNNING, lease_expires_at__lt=now
            ).first()
            if run is None:
                continue
            if _interrupt_or_fail(run):
                to_enqueue.append(str(run.pk))
    return to_enqueue


def _interrupt_or_fail(run: Run) -> bool:
    # Bumping the token fences the lost worker out before anything else is written.
    token = run.lease_token + 1
    previous_owner = run.lease_owner
    if run.resume_count >= settings.AGENTFORGE_MAX_RESUMES:
        message = (f"worker lost: the run's worker stopped {run.resume_count + 1} times "
                   f"(last: {previous_owner or 'unknown'}); giving up")
        Run.objects.filter(pk=run.pk).update(
            status=RunStatus.FAILED, lease_token=token, lease_owner="", lease_expires_at=None,
            error_type="WorkerLost", error_message=message, finished_at=timezone.now(),
        )
        seq = append_event(str(run.pk), token, "run_status", {
            "status": RunStatus.FAILED, "error_type": "WorkerLost", "message": message})
        notify_viewers_after_commit(str(run.pk), seq)
        return False
    seq = _mark_interrupted(
        run, f"worker {previous_owner or 'unknown'} stopped responding; resuming",
        lost_worker=True)
    notify_viewers_after_commit(str(run.pk), seq)
    return True


def _mark_interrupted(run: Run, message: str, *, lost_worker: bool) -> int:
    """Interrupt `run` (the caller holds its row lock) and record why; returns the seq.

    The bumped token fences out its worker, should that still write; a lost worker counts
    towards AGENTFORGE_MAX_RESUMES, a hand-back does not.
    """
    token = run.lease_token + 1
    changes: dict[str, Any] = {"status": RunStatus.INTERRUPTED, "lease_token": token,
                               "lease_owner": "", "lease_expires_at": None}
    if lost_worker:
        changes["resume_count"] = F("resume_count") + 1
    Run.objects.filter(pk=run.pk).update(**changes)
    return append_event(str(run.pk), token, "run_status",
                        {"status": RunStatus.INTERRUPTED, "message": message})


def runs_to_recover_at_start() -> list[str]:
    """For the in-process backend: runs a previous server process left behind."""
    ids = reap_expired_runs()
    pending = Run.objects.filter(status__in=CLAIMABLE)  # a claim ends a cancelled one
    return ids + [str(pk) for pk in pending.values_list("pk", flat=True) if str(pk) not in ids]
