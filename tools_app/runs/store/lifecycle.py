"""The one owner of a run's status: the allowed moves, and the event each one writes.

    queued ──claim──> running ──finish──> succeeded | failed | cancelled
      ▲ │                │  ▲ └──wait───> waiting (no worker, no lease)
      │ │                │  └─(an expired lease taken over by another worker)
      │ │                └──interrupt (lost worker, hand-back, shutdown)──> interrupted
      │ └──cancel──> cancelled          interrupted ──claim──> running
      └──decided (every waiting call has a decision)── waiting
                                        interrupted | waiting ──cancel | fail──> ...

Every move but a claim appends a `run_status` event `{"status": <new>, ...}` in the same
transaction as the status change; a claim writes none (the round it starts is the next
event). Moves made for a run by someone other than its worker (a cancel, the reaper, a
hand-back) bump the lease token first, which fences the worker out: whatever it still
tries to write is refused (`LeaseLost`). An illegal move raises `IllegalTransition` and
changes nothing.

A run whose steps arrive from outside (OTLP spans, tools_app/ingest) is created running
with no worker and no lease (`create_received`) and ends by a move like any other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Q
from django.utils import timezone

from tools_app.models import (
    TERMINAL_STATUSES,
    Round,
    Run,
    RunEvent,
    RunStatus,
    ToolCall,
    ToolCallState,
)
from tools_app.runs.store.eventlog import LeaseLost, append_event, notify_after_commit, run_key
from tools_app.runs.store.sanitize import clean_text
from tools_app.runs.store.sql import rowsql
from tools_app.runs.store.sql.rowsql import In

RUNNING, WAITING = RunStatus.RUNNING, RunStatus.WAITING
INTERRUPTED = RunStatus.INTERRUPTED
SUCCEEDED, FAILED, CANCELLED = RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED

ALLOWED_MOVES: Mapping[RunStatus, frozenset[RunStatus]] = {
    RunStatus.QUEUED: frozenset({RUNNING, CANCELLED, FAILED}),
    # running -> running: another worker takes over a lease that expired.
    RUNNING: frozenset({RUNNING, WAITING, INTERRUPTED, SUCCEEDED, FAILED, CANCELLED}),
    # waiting -> queued: the decisions it waited for are in; a worker claims it again.
    WAITING: frozenset({RUNNING, RunStatus.QUEUED, INTERRUPTED, FAILED, CANCELLED}),
    INTERRUPTED: frozenset({RUNNING, FAILED, CANCELLED}),
    SUCCEEDED: frozenset(),
    FAILED: frozenset(),
    CANCELLED: frozenset(),
}

CLAIMABLE = (RunStatus.QUEUED, INTERRUPTED)


class IllegalTransition(Exception):
    """A status move the lifecycle does not allow; nothing was changed."""

    def __init__(self, current: str, to: str) -> None:
        super().__init__(f"a run cannot move from {current} to {to}")
        self.current, self.to = current, to


def check_move(current: str, to: str) -> None:
    if RunStatus(to) not in ALLOWED_MOVES[RunStatus(current)]:
        raise IllegalTransition(current, to)


def claimable(now: datetime) -> Q:
    """Runs a worker may claim: queued, interrupted, or running on an expired lease."""
    return Q(status__in=CLAIMABLE) | Q(status=RUNNING, lease_expires_at__lt=now)


def create_queued(**fields: Any) -> Run:
    """A new run, queued, with its first event (inside the caller's transaction)."""
    # A new run's first event is seq 1: stored with the run's row already counting it,
    # not allocated by a second statement (this is on every POST /api/runs).
    # A priced run's cost starts at $0 and its rounds add to it (worker/event_rows.py);
    # an unpriced one's stays None ("no price").
    cost = Decimal(0) if is_priced(fields) else None
    run = Run(status=RunStatus.QUEUED, last_seq=1, is_tryit=is_tryit(fields), cost_usd=cost,
              **fields)
    # Every column in one precompiled INSERT (`rowsql.insert_as_saved`), not the ORM's
    # save, whose compilation is a large part of a POST /api/runs. Its database triggers
    # fire for this INSERT as for any.
    rowsql.insert_as_saved(run)
    rowsql.insert(RunEvent, [{"run": run.pk, "seq": 1, "kind": "run_status",
                              "payload": {"status": RunStatus.QUEUED},
                              "created_at": timezone.now()}], fill_defaults=False)
    return run


def is_tryit(fields: Mapping[str, Any]) -> bool:
    """Whether a run to be stored is a try-it run (or a rerun of one): its snapshot has
    the "tryit" section (runs/debugger/tryit.py)."""
    snapshot = fields.get("snapshot")
    return isinstance(snapshot, Mapping) and isinstance(snapshot.get("tryit"), Mapping)


def is_priced(fields: Mapping[str, Any]) -> bool:
    """Whether a run to be stored is charged for its model calls: its snapshot has a
    price and its model is not a recording (RunSnapshot.billed_price)."""
    snapshot = fields.get("snapshot")
    if not isinstance(snapshot, Mapping) or not isinstance(snapshot.get("price"), Mapping):
        return False
    replay = snapshot.get("replay")
    return not (isinstance(replay, Mapping) and replay.get("model") == "recorded")


def create_finished(*, status: RunStatus, origin: Mapping[str, Any], **fields: Any) -> Run:
    """A run that arrives finished (imported from a run file), inside the caller's
    transaction: its first event says where it came from (`origin`: the event's kind and
    payload), its second its terminal status."""
    if status not in TERMINAL_STATUSES:
        raise IllegalTransition("imported", status)
    run = Run.objects.create(status=status, last_seq=2, is_tryit=is_tryit(fields), **fields)
    RunEvent.objects.bulk_create([
        RunEvent(run=run, seq=1, kind=origin["kind"], payload=origin["payload"]),
        RunEvent(run=run, seq=2, kind="run_status", payload={"status": status}),
    ])
    return run


def create_received(*, status: RunStatus, events: Sequence[tuple[str, dict[str, Any]]] = (),
                    **fields: Any) -> Run:
    """A run whose steps arrive from outside (OTLP spans, tools_app/ingest), inside the
    caller's transaction: running with no worker and no lease (so nothing claims or
    reaps it), its first event saying so, then `events`; or, when all of it came at
    once, already ended (`status` terminal: its end is the last event). One received
    later ends by `move_locked`; a person may cancel it before."""
    if status != RUNNING and status not in TERMINAL_STATUSES:
        raise IllegalTransition("received", status)
    kinds = [("run_status", {"status": RUNNING, "received": True}), *events]
    if status != RUNNING:
        kinds.append(("run_status", {"status": status}))
        fields.setdefault("finished_at", timezone.now())
    run = Run(status=status, last_seq=len(kinds), is_tryit=is_tryit(fields), **fields)
    rowsql.insert_as_saved(run)
    now = timezone.now()
    rowsql.insert(RunEvent, [{"run": run.pk, "seq": seq, "kind": kind, "payload": payload,
                              "created_at": now}
                             for seq, (kind, payload) in enumerate(kinds, start=1)],
                  fill_defaults=False)
    return run


@dataclass(frozen=True)
class ReceivedRun:
    """One run `create_received_many` makes: as `create_received` takes it."""

    status: RunStatus
    events: Sequence[tuple[str, dict[str, Any]]]
    fields: Mapping[str, Any]


def create_received_many(received: Sequence[ReceivedRun]) -> list[Run]:
    """`create_received` for the runs a request makes together: their rows in one
    INSERT (`bulk_create`: the fields' pre-save values, no save signals, as no receiver
    of Run's is), their events in another."""
    runs: list[Run] = []
    events: list[dict[str, Any]] = []
    now = timezone.now()
    for one in received:
        if one.status != RUNNING and one.status not in TERMINAL_STATUSES:
            raise IllegalTransition("received", one.status)
        fields = dict(one.fields)
        kinds = [("run_status", {"status": RUNNING, "received": True}), *one.events]
        if one.status != RUNNING:
            kinds.append(("run_status", {"status": one.status}))
            fields.setdefault("finished_at", now)
        run = Run(status=one.status, last_seq=len(kinds), is_tryit=is_tryit(fields), **fields)
        runs.append(run)
        events += [{"run": run.pk, "seq": seq, "kind": kind, "payload": payload,
                    "created_at": now} for seq, (kind, payload) in enumerate(kinds, start=1)]
    Run.objects.bulk_create(runs)
    rowsql.insert(RunEvent, events, fill_defaults=False)
    return runs


def claim_locked(run: Run, *, worker_id: str, lease_until: datetime) -> int:
    """The claim move for a row the caller locked: running, leased to `worker_id`.
    Returns the new fencing token."""
    check_move(run.status, RUNNING)
    token = run.lease_token + 1
    moved = Run.objects.filter(pk=run.pk, lease_token=run.lease_token).update(
        status=RUNNING, lease_owner=worker_id, lease_token=token,
        lease_expires_at=lease_until, started_at=run.started_at or timezone.now(),
    )
    if moved != 1:  # the caller's row lock makes this impossible; never claim blind
        raise LeaseLost(f"run {run.pk}: its lease token changed while it was claimed")
    return token


def move_locked(run: Run, to: RunStatus, event: Mapping[str, Any] | None = None, *,
                notify: bool = True, **fields: Any) -> int:
    """Move a run its worker is not driving (the caller holds its row lock): the token is
    bumped, the lease cleared, `fields` written, the event appended and (unless
    `notify` is false: a process at exit has no loop left to tell them on) viewers told
    after the commit. Returns the event's seq."""
    check_move(run.status, to)
    token = run.lease_token + 1
    closed: dict[str, Any] = {}
    if to in TERMINAL_STATUSES:
        fields.setdefault("finished_at", timezone.now())
        closed = close_unfinished(str(run.pk), to)
    Run.objects.filter(pk=run.pk).update(status=to, lease_token=token, lease_owner="",
                                         lease_expires_at=None, **fields)
    seq = append_event(str(run.pk), token, "run_status",
                       {"status": to, **(event or {}), **closed})
    if notify:
        notify_after_commit(str(run.pk), seq)
    return seq


def wait(run_id: str, token: int, event: Mapping[str, Any]) -> int:
    """The worker's move of its running run to waiting (inside the caller's transaction),
    fenced by its lease token: the lease is released, so a waiting run holds no worker,
    and `waiting_since` starts the approval timeout. Returns the event's seq."""
    check_move(RUNNING, WAITING)
    seq = append_event(run_id, token, "run_status", {"status": WAITING, **event})
    moved = Run.objects.filter(pk=run_id, lease_token=token, status=RUNNING).update(
        status=WAITING, lease_owner="", lease_expires_at=None, waiting_since=timezone.now())
    if moved != 1:
        raise LeaseLost(f"run {run_id}: it is no longer running under token {token}")
    return seq


def finish(run_id: str, token: int, to: RunStatus, fields: Mapping[str, Any],
           streamed: Mapping[int, str] | None = None) -> int:
    """The worker's own last move of a running run (inside the caller's transaction),
    fenced by its lease token: a terminal status, or interrupted when it hands the run
    back. `streamed`: the (redacted) text each round streamed so far, kept on a round
    that never got its response. Returns the event's seq; the caller notifies viewers
    after the commit. (A run whose chat ran ends with its last batch instead, in a
    group: `Ending`, batch_writer.)"""
    ending = Ending(to, fields, streamed or {})
    closed = close_unfinished(run_id, to, streamed) if ending.terminal else {}
    # The move goes with the event's seq, in one statement fenced by the token and the
    # status: never an event without its move (the precompiled statements of `rowsql`:
    # a run's end is on every run's path).
    return append_event(run_id, token, "run_status", ending.event(closed.get("round_index")),
                        run_changes=ending.run_changes(), expect={"status": RUNNING})


@dataclass(frozen=True)
class Ending:
    """A worker's last move of its running run (`finish`), as data: what its
    `run_status` event says and what it changes in the run's row. The runner hands a
    run's ending to the batch writer with the chat's last events, which writes the
    endings of the loop's runs together (their seqs allocated by the same fenced
    statement as any batch's, expecting the run still running)."""

    status: RunStatus
    fields: Mapping[str, Any]
    streamed: Mapping[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_move(RUNNING, self.status)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def event(self, last_round: int | None) -> dict[str, Any]:
        """The run_status event; `last_round`: the run's last round index, if it has
        rounds (the live timeline re-renders one round per event: the last one, the only
        one that can be in flight when a run ends, and the one whose view changes with
        the end: the final answer moves to the header, calls that never ran are shown)."""
        closed = {"round_index": last_round} if self.terminal and last_round is not None \
            else {}
        return {"status": self.status, **self.fields, **closed}

    def run_changes(self) -> dict[str, Any]:
        return {"status": self.status, "lease_owner": "", "lease_expires_at": None,
                "finished_at": timezone.now() if self.terminal else None, **self.fields}


# A finished run leaves nothing in flight: its unanswered round and its calls that never
# finished end in a final state, so no badge says "requested" and no bar keeps growing.
def close_unfinished(run_id: str, to: RunStatus,
                     streamed: Mapping[int, str] | None = None) -> dict[str, Any]:
    """End what the run left in flight (inside the caller's transaction): a round still
    waiting for the model becomes `cancelled` or `failed` and keeps the text it streamed;
    a call proposed or started becomes `cancelled`, its bar ending now. Returns what the
    run_status event carries so the live timeline re-renders the round it touched
    (`Ending.event`)."""
    close_unfinished_of({run_id: (to, streamed or {})})
    last = last_round_indexes([run_id]).get(run_key(run_id))
    return {"round_index": last} if last is not None else {}


def close_unfinished_of(ends: Mapping[str, tuple[RunStatus, Mapping[int, str]]]) -> None:
    """`close_unfinished` for the runs ending together (inside the caller's transaction,
    each run's terminal status and streamed texts by its id): three statements
    whatever their number, and one more a round left waiting (rare)."""
    now = timezone.now()
    by_key = {run_key(run_id): end for run_id, end in ends.items()}
    runs = In(tuple(ends))
    for pk, run_id, index in rowsql.select(Round, ("id", "run", "index"),
                                           {"run": runs, "status": "requested"}):
        to, streamed = by_key[run_key(run_id)]
        rowsql.update(Round, {"id": pk}, {
            "status": "cancelled" if to == CANCELLED else "failed", "finished_at": now,
            "ai_text": clean_text(streamed.get(index) or None)})
    rowsql.update(ToolCall, {"run": runs, "state": ToolCallState.STARTED},
                  {"state": ToolCallState.CANCELLED, "finished_at": now})
    rowsql.update(ToolCall, {"run": runs, "state": ToolCallState.PROPOSED},
                  {"state": ToolCallState.CANCELLED})


def last_round_indexes(run_ids: Sequence[str]) -> dict[str, int]:
    """Each run's highest round index stored (by `eventlog.run_key`), for the runs that
    have rounds: one query for them all."""
    last: dict[str, int] = {}
    for run_id, index in rowsql.select(Round, ("run", "index"), {"run": In(tuple(run_ids))}):
        key = run_key(run_id)
        last[key] = max(index, last.get(key, index))
    return last
