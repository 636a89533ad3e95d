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
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from tools_app.models import Run, RunStatus
from tools_app.runs.store.eventlog import LeaseLost, run_key
from tools_app.runs.store.lifecycle import (
    CLAIMABLE,
    check_move,
    claim_locked,
    claimable,
    move_locked,
)
from tools_app.runs.store.sql import rowsql
from tools_app.runs.store.sql.rowsql import Add

logger = logging.getLogger(__name__)

__all__ = ["LeaseLost", "cancel_now", "cancel_requested", "claim", "claim_new_many",
           "claim_other", "new_worker_id", "owner_is_gone",
           "reap_expired_runs", "reap_runs_of_gone_processes", "release_this_process_runs", "renew",
           "runs_to_recover_at_start"]


# Tells this process from an earlier one that had the same pid (a container's daphne
# is often pid 1 at every start).
_PROCESS_MARK = uuid.uuid4().hex[:8]


def new_worker_id() -> str:
    """`host:pid:mark-xxxxxxxx`: the host and pid say which process holds a lease (the
    embedded server's start takes back those of a process that is gone), the mark which
    life of that pid."""
    return f"{_this_process()}{uuid.uuid4().hex[:8]}"


def _this_process() -> str:
    """The prefix of every worker id this process hands out."""
    return f"{socket.gethostname()}:{os.getpid()}:{_PROCESS_MARK}-"


def owner_is_gone(owner: str) -> bool:
    """Whether the lease owner `owner` (a worker id) was a process of this machine that
    no longer exists. Anything unsure (another host, another id format, a pid that a
    live process holds, even one of another user) counts as alive."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    pid, mark = int(parts[1]), parts[2].partition("-")[0]
    if pid == os.getpid():
        # This pid is ours: gone only if handed out by an earlier life of it.
        return "-" in parts[2] and mark != _PROCESS_MARK
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists, owned by someone else
        return False
    return False


def lease_duration() -> timedelta:
    return timedelta(seconds=settings.AGENTFORGE_LEASE_SECONDS)


def claim(run_id: str, worker_id: str) -> int | None:
    """Take the run's lease if it is claimable; return the fencing token or None."""
    now = timezone.now()
    token = claim_new_many([(run_id, worker_id)], now).get(run_key(run_id))
    if token is not None:
        return token
    return claim_other(run_id, worker_id, now)


def claim_new_many(requests: Sequence[tuple[str, str]], now: datetime) -> dict[str, int]:
    """The first claims of runs never started (`(run id, worker id)` each): one
    statement that moves each queued -> running only if it still is, not cancelled.
    Returns the tokens of those it moved, by `run_key`; any other run takes the general
    path (`claim_other`: a resumed, interrupted or cancelled one).

    Why one statement for many: the runs a db_worker claims in one turn start together,
    and one commit each (a WAL flush on PostgreSQL) would keep its database lane from
    the runs' event writes."""
    check_move(RunStatus.QUEUED, RunStatus.RUNNING)
    until = now + lease_duration()
    rows = rowsql.update_many(
        Run, ("id",),
        [{"id": run_id, "status": RunStatus.RUNNING, "lease_owner": worker_id,
          "lease_token": Add(1), "lease_expires_at": until, "started_at": now}
         for run_id, worker_id in requests],
        where={"status": RunStatus.QUEUED, "cancel_requested": False, "started_at": None},
        returning=("id", "lease_token"))
    return {run_key(run_id): int(token) for run_id, token in rows}


def claim_other(run_id: str, worker_id: str, now: datetime) -> int | None:
    """The claim of a run that is not queued for its first time: checked claimable
    under its row lock."""
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(claimable(now), pk=run_id).first()
        if run is None:
            return None
        if run.cancel_requested:
            # Cancelled while no worker could act on it (its worker died, or was stopping):
            # end it now, or it would stay interrupted for ever.
            cancel_now(run, "Cancelled by the user")
            return None
        return claim_locked(run, worker_id=worker_id, lease_until=now + lease_duration())


def cancel_now(run: Run, message: str) -> None:
    """End a run no worker is executing as cancelled (the caller holds its row lock)."""
    move_locked(run, RunStatus.CANCELLED, {}, cancel_requested=True,
                error_type="Cancelled", error_message=message)


def renew(run_id: str, token: int) -> bool:
    """Extend the lease; False if it was lost."""
    # rowsql's statements, built once: every running run asks these again and again.
    updated = rowsql.update(Run, {"id": run_id, "lease_token": token},
                            {"lease_expires_at": timezone.now() + lease_duration()})
    return bool(updated == 1)


def cancel_requested(run_id: str) -> bool:
    return bool(rowsql.select(Run, ("id",), {"id": run_id, "cancel_requested": True}))


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
                              lost_worker=False, notify=False)
        released.append(str(run_id))
    return released


def reap_expired_runs() -> list[str]:
    """Runs whose lease expired: re-queue them (bounded) or fail them as worker lost.

    Returns the ids of runs to (re-)enqueue; the caller enqueues them after commit.
    """
    now = timezone.now()
    expired = Run.objects.filter(status=RunStatus.RUNNING, lease_expires_at__lt=now)
    return _reap(list(expired.values_list("pk", flat=True)), lease_expires_at__lt=now)


def reap_runs_of_gone_processes() -> list[str]:
    """Running runs whose lease, expired or not, belongs to a process of this machine
    that no longer exists (`owner_is_gone`: a kill -9 of the embedded server): re-queued
    (bounded) or failed as the reaper would, without waiting out their leases. A run
    held by a live process is left alone. Returns the ids to (re-)enqueue."""
    held = Run.objects.filter(status=RunStatus.RUNNING).values_list("pk", "lease_owner")
    gone = [pk for pk, owner in held if owner and owner_is_gone(owner)]
    return _reap(gone)


def _reap(run_ids: Sequence[uuid.UUID | str], **still: object) -> list[str]:
    """Interrupt or fail each run still running (and matching `still`, under its row
    lock); the ids to re-enqueue."""
    to_enqueue: list[str] = []
    for run_id in run_ids:
        with transaction.atomic():
            run = Run.objects.select_for_update().filter(
                pk=run_id, status=RunStatus.RUNNING, **still).first()
            if run is None:
                continue
            if _interrupt_or_fail(run):
                to_enqueue.append(str(run.pk))
    return to_enqueue


def _interrupt_or_fail(run: Run) -> bool:
    previous_owner = run.lease_owner
    if run.resume_count >= settings.AGENTFORGE_MAX_RESUMES:
        message = (f"worker lost: the run's worker stopped {run.resume_count + 1} times "
                   f"(last: {previous_owner or 'unknown'}); giving up")
        move_locked(run, RunStatus.FAILED, {"error_type": "WorkerLost", "message": message},
                    error_type="WorkerLost", error_message=message)
        return False
    _mark_interrupted(
        run, f"worker {previous_owner or 'unknown'} stopped responding; resuming",
        lost_worker=True)
    return True


def _mark_interrupted(run: Run, message: str, *, lost_worker: bool,
                      notify: bool = True) -> int:
    """Interrupt `run` (the caller holds its row lock) and record why; returns the seq.

    A lost worker counts towards AGENTFORGE_MAX_RESUMES, a hand-back does not.
    """
    counted = {"resume_count": F("resume_count") + 1} if lost_worker else {}
    return move_locked(run, RunStatus.INTERRUPTED, {"message": message}, notify=notify,
                       **counted)


def runs_to_recover_at_start() -> list[str]:
    """For the in-process backend: runs a previous server process left behind (those
    of a process that is gone at once, not once their leases expire)."""
    ids = reap_runs_of_gone_processes()
    ids += [run_id for run_id in reap_expired_runs() if run_id not in ids]
    pending = Run.objects.filter(status__in=CLAIMABLE)  # a claim ends a cancelled one
    return ids + [str(pk) for pk in pending.values_list("pk", flat=True) if str(pk) not in ids]
