"""Human approval of flagged tool calls: the run's approver, decisions, the timeout.

A call of a tool flagged `requires_approval` never executes without a stored
`CallDecision`. The engine asks the run's approver (`runs.approver.RunApprover`) about every flagged
call of a round before any call of it starts; an undecided call pauses the whole round
(`ToolApprovalPending`), and the runner moves the run to `waiting` (lease released, task
ended: a waiting run holds no worker). `decide()` stores one decision per call; once
every waiting call of the run has one, the run is moved back to `queued` and
`execute_run` is enqueued in the same commit, so a worker resumes it from its stored
rounds and the approver then finds the decisions. A worker that dies after a decision
loses nothing: the decision is a row, and the resume logic never runs a call twice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.utils import timezone

from tools_app.engine.arguments import JsonTextError, parse_json_text, schema_validator
from tools_app.models import (
    CallDecision,
    DecisionKind,
    Run,
    RunPause,
    RunStatus,
    ToolCall,
    ToolCallState,
)
from tools_app.runs.snapshot.model import snapshot_of
from tools_app.runs.store.eventlog import append_event, notify_after_commit
from tools_app.runs.store.lifecycle import move_locked
from tools_app.runs.store.sanitize import clean_json, clean_text, fit_column
from tools_app.runs.tasks import enqueue_run_at_commit

logger = logging.getLogger(__name__)

TIMEOUT_LABEL = "approval timeout"
MAX_MESSAGE_CHARS = 2000


class DecisionError(ValueError):
    """A decision that cannot be taken; `code` names why (the API's error code),
    `problems` maps an argument to what is wrong with it (edit)."""

    def __init__(self, code: str, message: str, *, status: int = 409,
                 problems: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code, self.status, self.problems = code, status, problems or {}


# -- reads -----------------------------------------------------------------------------


def flagged_tools(run: Run) -> frozenset[str]:
    return snapshot_of(run).approval_tools()


def pending_calls(run: Run) -> list[ToolCall]:
    """The calls the waiting run waits for: flagged, not started, not decided."""
    if run.status != RunStatus.WAITING:
        return []
    return list(ToolCall.objects.filter(
        run=run, state=ToolCallState.PROPOSED, tool_name__in=flagged_tools(run),
        decision__isnull=True,
    ).select_related("round").order_by("round__index", "call_index"))


def schema_of(run: Run, tool_name: str) -> dict[str, Any]:
    tool = snapshot_of(run).tool_named(tool_name)
    return tool.json_schema if tool is not None else {}


def argument_problems(run: Run, tool_name: str, arguments: Any) -> dict[str, str]:
    """What is wrong with edited arguments, by argument ("" for the whole object),
    checked against the tool's JSON schema as frozen in the run."""
    if not isinstance(arguments, dict):
        return {"": "the arguments must be a JSON object"}
    problems: dict[str, str] = {}
    # The engine's validator: compiled once per schema, remote $refs never fetched.
    validator = schema_validator(schema_of(run, tool_name))
    for error in sorted(validator.iter_errors(arguments), key=lambda e: list(e.path)):
        where = ".".join(str(p) for p in error.path)
        if not where and error.validator == "required":
            # "'x' is a required property": name the missing argument itself.
            where = next((str(name) for name in error.validator_value
                          if name not in arguments), "")
        problems.setdefault(where, error.message)
    return problems


def parse_arguments(text: str) -> Any:
    """Edited arguments as the user typed them; a DecisionError says where JSON broke."""
    try:
        return parse_json_text(text)
    except JsonTextError as exc:
        raise DecisionError("invalid_arguments", f"The arguments are not valid JSON: {exc}",
                            status=400, problems={"": f"not valid JSON: {exc}"}) from exc


# -- writes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class DecisionRequest:
    call_id: str
    decision: str
    arguments: Any = None
    message: str = ""


User = AbstractBaseUser | AnonymousUser


@dataclass(frozen=True)
class Decided:
    decision: CallDecision
    created: bool  # False: the same decision was already stored, nothing changed
    # The run's status as the decision left it: queued when it was the last one awaited
    # (a worker woken by the enqueue may have moved the run on by the time anyone reads
    # it again).
    run_status: str


def decide(*, run: Run, user: User | None, request: DecisionRequest) -> Decided:
    """Store a decision on a waiting call. The same decision sent again returns the
    stored one and changes nothing; a different one is refused. When the last waiting
    call is decided, the run is queued again and enqueued."""
    kind = _checked_kind(request.decision)
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.is_terminal:
            raise DecisionError("run_finished",
                                f"The run has ended ({locked.get_status_display().lower()}): "
                                "it takes no decisions")
        call = _call_of(locked, request.call_id)
        existing = CallDecision.objects.filter(tool_call=call).first()
        if existing is not None:
            return Decided(_repeated(existing, kind, request), False, locked.status)
        _check_decidable(locked, call)
        decision = _store(locked, call, kind, request, user)
        resumed = _resume_if_decided(locked)
    return Decided(decision, True, RunStatus.QUEUED if resumed else locked.status)


def _checked_kind(value: str) -> DecisionKind:
    try:
        return DecisionKind(value)
    except ValueError:
        raise DecisionError("invalid_field", "decision must be one of approve, reject, edit",
                            status=400) from None


def _call_of(run: Run, call_id: str) -> ToolCall:
    if not isinstance(call_id, str) or not call_id:
        raise DecisionError("missing_field", "'call_id' is required", status=400)
    # The latest round first: call ids are the model's, and a model may reuse one.
    stored_id = fit_column(ToolCall, "call_id", call_id)
    call = ToolCall.objects.filter(run=run, call_id=stored_id).order_by("-round__index").first()
    if call is None:
        raise DecisionError("unknown_call", f"The run has no tool call {call_id!r}", status=404)
    return call


def _repeated(existing: CallDecision, kind: DecisionKind,
              request: DecisionRequest) -> CallDecision:
    same = existing.decision == kind and (kind != DecisionKind.EDIT
                                          or existing.arguments == request.arguments)
    if not same:
        raise DecisionError("already_decided", f"The call was already decided "
                            f"({existing.decision} by {existing.decided_by_label})")
    return existing


def _check_decidable(run: Run, call: ToolCall) -> None:
    if call.tool_name not in flagged_tools(run):
        raise DecisionError("not_pending", f"Tool '{call.tool_name}' does not require "
                            "approval: the call needs no decision")
    if run.status != RunStatus.WAITING or call.state != ToolCallState.PROPOSED:
        raise DecisionError("not_pending", f"The call is {call.state} and the run "
                            f"{run.status}: it is not waiting for a decision")


def _store(run: Run, call: ToolCall, kind: DecisionKind, request: DecisionRequest,
           user: User | None) -> CallDecision:
    arguments = None
    if kind == DecisionKind.EDIT:
        problems = argument_problems(run, call.tool_name, request.arguments)
        if problems:
            raise DecisionError("invalid_arguments", "The edited arguments do not fit the "
                                "tool's schema", status=400, problems=problems)
        arguments = clean_json(request.arguments)
    message = clean_text(request.message[:MAX_MESSAGE_CHARS]) or ""
    label = user.get_username() if user is not None and user.is_authenticated else TIMEOUT_LABEL
    decision = CallDecision.objects.create(
        run=run, tool_call=call, decision=kind, arguments=arguments, message=message,
        decided_by_id=user.pk if user is not None and user.is_authenticated else None,
        decided_by_label=label)
    seq = append_event(str(run.pk), None, "call_decision", {
        "round_index": call.round.index, "call_id": call.call_id, "decision": kind.value,
        "by": label, "arguments": arguments, "message": message})
    notify_after_commit(str(run.pk), seq)
    return decision


def _resume_if_decided(run: Run) -> bool:
    """Queue the run again if nothing is awaited any more; whether it was."""
    if pending_calls(run) or RunPause.objects.filter(run=run, resolved_at__isnull=True).exists():
        return False
    move_locked(run, RunStatus.QUEUED, {"message": "decided; resuming"}, waiting_since=None)
    enqueue_run_at_commit(str(run.pk))
    return True


def decide_round(*, run: Run, user: User | None, round_index: int) -> list[CallDecision]:
    """Approve every waiting call of a round (approve-all)."""
    calls = [c for c in pending_calls(run) if c.round.index == round_index]
    if not calls:
        raise DecisionError("not_pending", f"No call of round {round_index + 1} is waiting "
                            "for a decision")
    return [decide(run=run, user=user, request=DecisionRequest(c.call_id, "approve")).decision
            for c in calls]


# -- the timeout -----------------------------------------------------------------------


def expire_waiting_runs() -> list[str]:
    """Reject the waiting calls of runs that waited longer than
    AGENTFORGE_APPROVAL_TIMEOUT (seconds; unset: wait for ever). The reapers call this;
    the rejected calls go to the model as errors, through the run's policy."""
    timeout = settings.AGENTFORGE_APPROVAL_TIMEOUT
    if not timeout:
        return []
    cutoff = timezone.now() - timedelta(seconds=timeout)
    expired = Run.objects.filter(status=RunStatus.WAITING, waiting_since__lt=cutoff)
    message = f"no decision within {timeout:g} s (AGENTFORGE_APPROVAL_TIMEOUT)"
    done: list[str] = []
    for run in expired:  # a run waiting at a breakpoint has no pending call: left alone
        rejected = False
        for call in pending_calls(run):
            try:
                decide(run=run, user=None,
                       request=DecisionRequest(call.call_id, "reject", message=message))
            except DecisionError:  # decided or cancelled meanwhile: nothing left to do
                continue
            rejected = True
        if rejected:
            done.append(str(run.pk))
    return done
