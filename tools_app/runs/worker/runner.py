"""Executing one run in a worker: claim the lease, resume from history, record, finish.

This is the body of the `execute_run` task. It is safe to call for any run id at any
time: if the run is not claimable (finished, or leased by a live worker) it returns.
A run handed back (interrupted) is re-enqueued by the task, not here.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections, transaction
from django.utils import timezone

from tools_app.engine import (
    ChatMessage,
    ResumeState,
    RunPaused,
    ToolChatResult,
)
from tools_app.engine.providers.adapter import WireChatModel
from tools_app.models import (
    TERMINAL_STATUSES,
    Round,
    Run,
    RunStatus,
)
from tools_app.runs.loops.loop_groups import LoopGroups
from tools_app.runs.snapshot.engine import engine_for_snapshot
from tools_app.runs.snapshot.model import PolicySnapshot, snapshot_of
from tools_app.runs.store.db import drop_broken_connections, write_turn
from tools_app.runs.store.eventlog import LeaseLost, notify, run_key
from tools_app.runs.store.leases import (
    cancel_requested,
    claim_new_many,
    claim_other,
    new_worker_id,
    renew,
)
from tools_app.runs.store.lifecycle import Ending, finish, wait
from tools_app.runs.store.sanitize import clean_text, redact
from tools_app.runs.store.selectors import run_row, run_rows
from tools_app.runs.store.sql import rowsql
from tools_app.runs.worker import batch_writer
from tools_app.runs.worker.approver import RunApprover
from tools_app.runs.worker.breakpoint_hooks import RunBreakpoints
from tools_app.runs.worker.history import load_history
from tools_app.runs.worker.recorder import RunRecorder, StreamedText

logger = logging.getLogger(__name__)

# Set by the worker's SIGTERM handler: finish the current step, then hand the run back.
shutdown_requested = threading.Event()



class WorkerShutdown(Exception):
    """The worker is stopping; the run is checkpointed and handed to another worker."""


class _Stop:
    """Why the heartbeat stopped the chat task, if it did."""

    reason: str | None = None

    def cancelled(self) -> None:
        """The recorder saw the cancel first (a call's start committed after it)."""
        if self.reason is None:
            self.reason = "cancelled"


async def execute_run(run_id: str) -> str | None:
    """Run (or resume) a run to its end. Returns the final status, or None if not claimed."""
    claimed = await _claim(run_id)
    if claimed is None:
        return None
    started = time.perf_counter()
    streamed = StreamedText()  # round index -> text streamed so far (redacted)
    last = _LastEvents()
    try:
        status, fields = await _drive(claimed, streamed, last)
    except LeaseLost:
        logger.warning("run %s: lease lost, leaving it to its new owner", run_id)
        return None
    if status != RunStatus.WAITING:
        fields["wall_ms"] = _wall_ms(claimed.run, started)
    try:
        status, seq = await _end(run_id, claimed.token, status, fields, streamed,
                                 last.recorder)
    except LeaseLost:
        return None
    await notify(run_id, {"seq": seq})
    return str(status)


async def _end(run_id: str, token: int, status: RunStatus, fields: dict[str, Any],
               streamed: StreamedText, recorder: RunRecorder | None,
               ) -> tuple[RunStatus, int]:
    """The run's end stored (with the chat's last events, if it left some queued): the
    status it ended in and the end's seq. A database error while writing those events
    hands the run back, as it would have mid-run (nothing of that transaction is
    stored, and the resumed run starts from what is)."""
    held = recorder.take_held() if recorder is not None else []
    try:
        # A terminal end goes with the chat's last events, in its loop's groups
        # (batch_writer): the runs of a loop end in bursts as they move in step, and one
        # transaction each was the largest share of a worker's database lanes at 100
        # runs (docs/benchmarks/product-path.md). A run that waits or is handed back
        # ends alone.
        if recorder is not None and status in TERMINAL_STATUSES:
            ending = Ending(status, fields, streamed)
            return status, await batch_writer.write(recorder, held, end=ending)
        return status, await sync_to_async(_finish)(run_id, token, status, fields, streamed)
    except (OperationalError, InterfaceError) as exc:
        if not held:
            raise
        logger.warning("run %s: database error storing its end, handing the run back: %s",
                       run_id, exc)
    await sync_to_async(drop_broken_connections)()
    interrupted = RunStatus.INTERRUPTED
    return interrupted, await sync_to_async(_finish)(run_id, token, interrupted, {}, streamed)


@dataclass
class _Claimed:
    """A run as its claim left it, read with its history in the same trip to the
    database thread (the run's first model call waits for them)."""

    run: Run
    token: int
    # The conversation and resume state, or why they could not be rebuilt (a broken
    # snapshot: reported as the run's failure once the engine is built).
    history: tuple[list[ChatMessage], ResumeState | None] | Exception


def _claimed_together(requests: Sequence[tuple[str, str]]) -> list[_Claimed | Exception | None]:
    """The claims of the runs a loop starts together (`(run id, worker id)` each; one at
    a time where `claims_grouped()` says not), in order: each run claimed with its row
    and stored history, None if it could not be claimed, or the error its claim failed
    with. The first claims of runs never started (nearly all) are one statement, their
    rows and whether they have rounds one query each; any other run is claimed alone
    (`leases.claim_other`).

    Why together: a db_worker's claim turn starts up to `--concurrency` runs at once,
    and three statements and a commit each kept its database lane from the running runs'
    event writes (docs/benchmarks/product-path.md)."""
    with write_turn():  # SQLite: the worker's writers take turns (db.write_turn)
        tokens = claim_new_many(requests, timezone.now())
    runs = {run_key(run.pk): run for run in run_rows(list(tokens))} if tokens else {}
    started = {run_key(row[0]) for row in rowsql.select(
        Round, ("run",), {"run": rowsql.In(tuple(tokens))})} if tokens else set()
    outcomes: list[_Claimed | Exception | None] = []
    for run_id, worker_id in requests:
        key = run_key(run_id)
        try:
            if key in tokens:
                run = runs[key]
                outcomes.append(_Claimed(run, tokens[key], _history(run, key in started)))
            else:
                outcomes.append(_claimed_alone(run_id, worker_id))
        except Exception as exc:  # this run's failure is its own
            outcomes.append(exc)
    return outcomes


def _claimed_alone(run_id: str, worker_id: str) -> _Claimed | None:
    with write_turn():
        token = claim_other(run_id, worker_id, timezone.now())
    if token is None:
        return None
    run = run_row(run_id)
    return _Claimed(run, token, _history(run, None))


def _history(run: Run, has_rounds: bool | None,
             ) -> tuple[list[ChatMessage], ResumeState | None] | Exception:
    try:
        return load_history(run, has_rounds=has_rounds)
    except Exception as exc:  # the run fails with it (`_drive`), its claim stands
        return exc


_CLAIMS: LoopGroups[tuple[str, str], _Claimed | None] = LoopGroups(
    "claims of runs", _claimed_together, max_group=64)


def claims_grouped() -> bool:
    """Whether a loop's runs are claimed in groups: on PostgreSQL, where each claim alone
    cost its lane three round trips and a commit's WAL flush (5 ms of wall in a busy
    db_worker), and a db_worker's claim turn starts its runs together anyway. Not on
    SQLite, where a claim costs its lane well under a millisecond and grouping only
    lined up runs whose POSTs had come apart, their rounds then falling in the same
    bursts (embedded, 50 runs: 97-98 -> 90-92 % and from emit p95 22-42 -> 43-56 ms
    grouped, docs/benchmarks/product-path.md)."""
    return connections[DEFAULT_DB_ALIAS].vendor != "sqlite"


async def _claim(run_id: str) -> _Claimed | None:
    """The run claimed with its row and history (`_claimed_together`), or None."""
    request = (run_id, new_worker_id())
    if claims_grouped():
        return await _CLAIMS.submit(request)
    (outcome,) = await sync_to_async(_claimed_together)([request])
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


class _LastEvents:
    """The chat's recorder, once there is one: what a successful chat left queued is
    written with the run's end (one transaction for both); after any other ending the
    recorder has drained everything."""

    def __init__(self) -> None:
        self.recorder: RunRecorder | None = None


async def _drive(claimed: _Claimed, streamed: StreamedText,
                 last: _LastEvents) -> tuple[RunStatus, dict[str, Any]]:
    run, token, run_id = claimed.run, claimed.token, str(claimed.run.pk)
    try:
        snapshot = snapshot_of(run)
        engine = engine_for_snapshot(snapshot)
        if isinstance(claimed.history, Exception):
            raise claimed.history
        messages, resume = claimed.history
    except Exception as exc:  # a broken snapshot (missing key, tool gone) fails the run
        return RunStatus.FAILED, {"error_type": type(exc).__name__, "error_message": str(exc)}
    stop = _Stop()
    recorder = last.recorder = RunRecorder(
        run_id, token, engine.secrets, before_round=_checkpoint, on_cancel=stop.cancelled,
        requests_announced=isinstance(engine.model, WireChatModel), streamed=streamed,
        call_row_defaults={"run_created_at": run.created_at,
                           "run_owner_id": run.created_by_id},
        idempotent_tools=snapshot.idempotent_tools())
    # Flagged calls wait for a stored decision (runs.debugger.approvals), never run without one.
    # Gates read the run's rows: what the engine reported is committed first.
    engine.service.approver = after_drain(recorder, RunApprover(run_id))
    if snapshot.breakpoints:
        hooks = RunBreakpoints(run_id, snapshot.breakpoints)
        engine.service.call_gate = after_drain(recorder, hooks.call_gate)
        engine.service.before_model_call = after_drain(recorder, hooks.before_model_call)
    chat = asyncio.ensure_future(_chat_recorded(
        engine.service.chat(engine.model, messages, snapshot.request_parameters(),
                            observers=[recorder], resume=resume), recorder))
    heartbeat = asyncio.ensure_future(_heartbeat(run_id, token, chat, stop, recorder))
    deadline = _start_deadline(chat, stop, snapshot.policy.run_timeout_seconds)
    try:
        result = await chat
    except asyncio.CancelledError:
        if stop.reason == "lease_lost":
            raise LeaseLost(run_id) from None
        if stop.reason == "cancelled":
            return RunStatus.CANCELLED, {"error_type": "Cancelled",
                                         "error_message": "Cancelled by the user"}
        if stop.reason == "deadline":
            return RunStatus.FAILED, {"error_type": "RunTimeout",
                                      "error_message": _deadline_message(snapshot.policy)}
        raise
    except WorkerShutdown:
        return RunStatus.INTERRUPTED, {}
    except RunPaused as paused:
        # Approvals or a breakpoint: the run waits, holding no worker or lease, until a
        # person decides (debugger.approvals / debugger.breakpoints queue it again); it
        # then resumes from what was stored.
        return RunStatus.WAITING, {"reason": paused.reason, "round_index": paused.round_index,
                                   "calls": paused.call_ids}
    except LeaseLost:
        raise
    except (OperationalError, InterfaceError) as exc:
        # The database went away or stayed locked (a restart, a failover, a dropped
        # connection): not the run's fault. Hand it back to be resumed from what was
        # stored, on a fresh connection; if the database is still down, handing back
        # fails too and the reaper resumes it once the lease expires.
        logger.warning("run %s: database error, handing the run back: %s", run_id, exc)
        await sync_to_async(drop_broken_connections)()
        return RunStatus.INTERRUPTED, {}
    except Exception as exc:
        return RunStatus.FAILED, {"error_type": type(exc).__name__,
                                  "error_message": clean_text(redact(str(exc),
                                                                     engine.secrets)) or ""}
    finally:
        heartbeat.cancel()
        if deadline is not None:
            deadline.cancel()
        await recorder.settle()
        await _close_model(engine.model)
    return RunStatus.SUCCEEDED, _success_fields(result, engine.secrets)


def _start_deadline(chat: asyncio.Future[Any], stop: _Stop,
                    seconds: float | None) -> asyncio.TimerHandle | None:
    """The run's deadline (the policy's `run_timeout_seconds`), counted from when this
    worker took the run up: when it passes, the chat is cancelled wherever it is (a
    model call and its retries included) and the run fails as RunTimeout, its round
    and calls in flight closed by its end as a cancel's are."""
    if seconds is None:
        return None

    def expire() -> None:
        if not chat.done() and stop.reason is None:
            stop.reason = "deadline"
            chat.cancel(f"The run passed its deadline of {seconds:g} s")

    return asyncio.get_running_loop().call_later(seconds, expire)


def _deadline_message(policy: PolicySnapshot) -> str:
    return (f"The run did not finish within its deadline of {policy.run_timeout_seconds:g} s "
            f"(error policy {policy.name!r}, run_timeout_seconds); what was in flight was "
            "stopped.")


async def _chat_recorded(chat: Awaitable[ToolChatResult],
                         recorder: RunRecorder) -> ToolChatResult:
    """The chat, then every event it reported committed, or held for the run's end
    (which reads them) if it succeeded: written with the end, in its transaction."""
    try:
        result = await chat
    except BaseException:
        await recorder.drain()
        raise
    await recorder.hold_for_end()
    return result


def after_drain[**P, R](recorder: RunRecorder,
                        hook: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """`hook`, called once the events the engine reported before it are committed."""

    async def drained(*args: P.args, **kwargs: P.kwargs) -> R:
        await recorder.drain()
        return await hook(*args, **kwargs)

    return drained


async def _close_model(model: Any) -> None:
    """Release the model's pooled HTTP connections now rather than at garbage collection."""
    close = getattr(model, "aclose", None)
    if close is None:
        return
    try:
        await close()
    except Exception:  # closing must never change how the run ended
        logger.warning("closing the model's HTTP client failed", exc_info=True)


async def _checkpoint() -> None:
    if shutdown_requested.is_set():
        raise WorkerShutdown("the worker is shutting down; the run will resume elsewhere")


async def _heartbeat(run_id: str, token: int, chat: asyncio.Future[Any], stop: _Stop,
                     recorder: RunRecorder) -> None:
    interval = settings.AGENTFORGE_HEARTBEAT_SECONDS
    poll = min(interval, 0.5)
    last_renewal = time.monotonic()
    while not chat.done():
        await asyncio.sleep(poll)
        if await _cancelled(run_id, recorder, poll):
            stop.reason = "cancelled"
            chat.cancel()
            return
        if time.monotonic() - last_renewal >= interval:
            if not await sync_to_async(renew)(run_id, token):
                stop.reason = "lease_lost"
                chat.cancel()
                return
            last_renewal = time.monotonic()


async def _cancelled(run_id: str, recorder: RunRecorder, fresh_for: float) -> bool:
    """Whether the run's cancellation is requested: as the recorder's last batch read it
    if that was within `fresh_for` seconds (a run that writes costs no poll), else asked."""
    seen = recorder.cancel_seen
    if seen is not None and time.monotonic() - seen[0] < fresh_for:
        return seen[1]
    return await sync_to_async(cancel_requested)(run_id)


def _success_fields(result: ToolChatResult, secrets: tuple[str, ...]) -> dict[str, Any]:
    text = result.final_response.ai_message.text
    return {"final_text": clean_text(redact(text, secrets)), "error_type": "",
            "error_message": ""}


def _wall_ms(run: Run, started: float) -> float:
    """From the run's start as stored (its first claim, for a resumed run) to now."""
    if run.started_at is None:
        return (time.perf_counter() - started) * 1000
    return (timezone.now() - run.started_at).total_seconds() * 1000


def _finish(run_id: str, token: int, status: RunStatus, fields: dict[str, Any],
            streamed: Mapping[int, str] | None = None) -> int:
    """A run's end in a transaction of its own: one that waits, is handed back, or had
    no recorder (its snapshot could not be rebuilt)."""
    with write_turn(), transaction.atomic():
        if status == RunStatus.WAITING:
            return wait(run_id, token, fields)
        return finish(run_id, token, status, fields, streamed)


# -- resuming from the stored history --------------------------------------------------
