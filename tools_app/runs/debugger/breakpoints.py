"""Breakpoints: a run pauses (status waiting, no worker) where a person asked it to.

Set per run when it starts (the playground, `POST /api/runs` "breakpoints"), frozen in
its snapshot:

    {"kind": "before_round", "round": N}      before round N's model call (N from 1)
    {"kind": "before_tool", "tool": name}     before any call of that tool
    {"kind": "tool_error"}                    after a round with a failed call, before
                                              the next model call
    {"kind": "condition", "tool": name, "pointer": "/a/0", "value": V}
                                              before a call of that tool whose argument
                                              at the JSON pointer equals V

The engine asks `breakpoint_hooks.RunBreakpoints` before each model call and once per round of calls
(`before_model_call`, `call_gate`). A pause is a `RunPause` row; the runner then moves
the run to waiting. `continue_run` resolves it (run on, step one call, step one round,
or abort; edit the held calls' arguments, or add a message before the model call) and
queues the run, which resumes from its stored state: the hooks see the resolved pause
and let that point pass. A step is remembered as the latest pause's resolution, so the
next point of that kind pauses again (a step of one call: the next call, or the next
model call once no held call is left).

Abort and cancelling the run are one action: both resolve the open pause (who, when)
and end the run as cancelled (`cancel_paused`), whichever button or API call asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.utils import timezone

from tools_app.models import PauseResolution, Run, RunPause, RunStatus, ToolCall
from tools_app.runs.debugger.approvals import DecisionError, argument_problems, pending_calls
from tools_app.runs.store.eventlog import append_event, notify_after_commit
from tools_app.runs.store.leases import cancel_now
from tools_app.runs.store.lifecycle import move_locked
from tools_app.runs.store.sanitize import clean_json, clean_text, fit_column
from tools_app.runs.tasks import enqueue_run_at_commit

__all__ = ["BreakpointError", "cancel_paused", "checked_breakpoints", "continue_run"]

MAX_BREAKPOINTS = 20
MAX_MESSAGE_CHARS = 20_000
KINDS = ("before_round", "before_tool", "tool_error", "condition")
STEPS = ("run", "call", "round", "abort")

User = AbstractBaseUser | AnonymousUser


class BreakpointError(ValueError):
    """Breakpoints that cannot be set; the message names the one at fault."""


# -- setting them ----------------------------------------------------------------------


def checked_breakpoints(raw: Any, tool_names: Sequence[str]) -> list[dict[str, Any]]:
    """The breakpoints as they will be frozen into the run, or a BreakpointError."""
    if raw in (None, ""):
        return []
    if not isinstance(raw, list):
        raise BreakpointError("breakpoints must be a list of objects")
    if len(raw) > MAX_BREAKPOINTS:
        raise BreakpointError(f"at most {MAX_BREAKPOINTS} breakpoints")
    return [_checked(item, f"breakpoints[{i}]", tool_names) for i, item in enumerate(raw)]


def _checked(item: Any, where: str, tool_names: Sequence[str]) -> dict[str, Any]:
    kind = item.get("kind") if isinstance(item, dict) else None
    if kind not in KINDS:
        raise BreakpointError(f"{where}: kind must be one of {', '.join(KINDS)}")
    if kind == "before_round":
        number = item.get("round")
        if type(number) is not int or not 1 <= number <= 10_000:
            raise BreakpointError(f"{where}: round must be a whole number from 1")
        return {"kind": kind, "round": number}
    if kind == "tool_error":
        return {"kind": kind}
    tool = item.get("tool")
    if tool not in tool_names:
        raise BreakpointError(f"{where}: tool must be one of the run's tools "
                              f"({', '.join(tool_names) or 'none'})")
    if kind == "before_tool":
        return {"kind": kind, "tool": tool}
    pointer = item.get("pointer")
    if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
        raise BreakpointError(f"{where}: pointer must be a JSON pointer such as /city")
    if "value" not in item:
        raise BreakpointError(f"{where}: value is required (the argument's value to stop at)")
    return {"kind": kind, "tool": tool, "pointer": pointer, "value": clean_json(item["value"])}


# -- going on --------------------------------------------------------------------------


@dataclass(frozen=True)
class Continued:
    pause: RunPause  # resolved
    # The run's status as this left it (queued, cancelled, or still waiting for
    # decisions): a worker woken by the enqueue may have moved it on since.
    run_status: str


def continue_run(*, run: Run, user: User, step: str, arguments: Any = None,
                 message: str = "") -> Continued:
    """Resolve the run's open pause and queue it again (abort: cancel the run, as
    `cancel_paused`)."""
    if step not in STEPS:
        raise DecisionError("invalid_field", f"step must be one of {', '.join(STEPS)}",
                            status=400)
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        pause = _open_pause(locked)
        if step == PauseResolution.ABORT:  # nothing runs: edits and a message are moot
            cancel_paused(locked, pause, user)
            return Continued(pause, RunStatus.CANCELLED)
        edits = _checked_edits(locked, pause, arguments)
        if message and pause.before != "model":
            raise DecisionError("invalid_field", "a message can be added only at a pause "
                                "before a model call", status=400)
        _resolve(locked, pause, user, step, edits, message)
        status: str = locked.status
        if not pending_calls(locked):
            move_locked(locked, RunStatus.QUEUED, {"message": "continued"},
                        waiting_since=None)
            enqueue_run_at_commit(str(locked.pk))
            status = RunStatus.QUEUED
    return Continued(pause, status)


def cancel_paused(run: Run, pause: RunPause, user: User | None) -> None:
    """End a run paused at a breakpoint: its pause resolved as aborted (by `user`), the
    run cancelled; nothing held runs. The caller holds the run's row lock."""
    _resolve(run, pause, user, PauseResolution.ABORT, {}, "")
    by = f" by {pause.resolved_by_label}" if pause.resolved_by_label else ""
    cancel_now(run, f"Cancelled at a breakpoint{by}")


def _open_pause(run: Run) -> RunPause:
    if run.is_terminal:
        status = run.get_status_display().lower()
        raise DecisionError("run_finished", f"The run has ended ({status}): it cannot continue")
    pause = run.open_pause
    if pause is None:
        waiting = " (it waits for approval decisions)" if pending_calls(run) else ""
        raise DecisionError("not_paused", f"The run is {run.get_status_display().lower()}, "
                            f"not paused at a breakpoint{waiting}")
    return pause


def _checked_edits(run: Run, pause: RunPause, arguments: Any) -> dict[str, Any]:
    if arguments in (None, {}):
        return {}
    if not isinstance(arguments, dict):
        raise DecisionError("invalid_field", "arguments must map call ids to objects",
                            status=400)
    edits: dict[str, Any] = {}
    for call_id, value in arguments.items():
        if call_id not in pause.call_ids:
            raise DecisionError("not_pending", f"Call {call_id!r} is not held at this pause",
                                status=400)
        call = ToolCall.objects.filter(run=run, call_id=fit_column(ToolCall, "call_id", call_id),
                                       round__index=pause.round_index).first()
        problems = argument_problems(run, call.tool_name if call else "", value)
        if problems:
            raise DecisionError("invalid_arguments", f"The arguments of call {call_id!r} do "
                                "not fit the tool's schema", status=400, problems=problems)
        edits[call_id] = clean_json(value)
    return edits


def _resolve(run: Run, pause: RunPause, user: User | None, step: str,
             edits: dict[str, Any], message: str) -> None:
    pause.resolution = step
    pause.resolved_at = timezone.now()
    pause.released = pause.call_ids[:1] if step == PauseResolution.CALL else pause.call_ids
    pause.edited_arguments = edits
    pause.message = clean_text(message[:MAX_MESSAGE_CHARS]) or ""
    signed_in = user is not None and user.is_authenticated
    pause.resolved_by_id = user.pk if user is not None and signed_in else None
    pause.resolved_by_label = user.get_username() if user is not None and signed_in else ""
    pause.save()
    seq = append_event(str(run.pk), None, "breakpoint_continued", {
        "round_index": pause.round_index, "step": step, "by": pause.resolved_by_label,
        "released": pause.released, "arguments": edits, "message": pause.message})
    notify_after_commit(str(run.pk), seq)
