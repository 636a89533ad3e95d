"""Executing one recorded tool call again, with arguments a person gives (issue #16).

`request_reexecution` checks the request (the user may see the run; the call's tool is
one of the run's, still registered and enabled here, and its executor builds; the
arguments fit the tool's JSON schema as frozen in the run, problems by JSON pointer; a
tool that requires approval is approved explicitly by the person), stores a pending
`CallReexecution` and enqueues `execute_reexecution` on commit: a slow tool never holds
a web request. The task (runs/worker/reexecute.py) runs the snapshot's definition of the
tool with the executor of its kind (`tool_executors.build_executor`: schema-validated
unless Python) and stores the outcome. The run's own rounds never change; a
`call_reexecution` event on the run tells live viewers.

Splicing a finished re-execution into a new run is `fork.run_splice`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from tools_app.engine import ToolArgumentsError, ToolExecutionError, ToolExecutionResultMessage
from tools_app.engine.arguments import (
    JsonTextError,
    parse_json_text,
    schema_validator,
    validate_against_schema,
)
from tools_app.models import (
    REEXECUTABLE_CALL_STATES,
    CallReexecution,
    ReexecutionState,
    Run,
    ToolCall,
    ToolRegistration,
)
from tools_app.runs.debugger.fork import ForkError, run_splice
from tools_app.runs.debugger.run_files import unregistered_tool_code
from tools_app.runs.snapshot.model import ToolSnapshot, snapshot_of
from tools_app.runs.store.sanitize import clean_json, fit_column
from tools_app.runs.tasks import execute_reexecution
from tools_app.runs.worker.reexecute import (
    DEFAULT_TIMEOUT_SECONDS,
    ReexecutionError,
    built,
    event,
    snapshot_tool,
    timeout_of,
)

__all__ = [
    "ReexecutionError",
    "ReexecutionRequest",
    "argument_problems",
    "check_runnable",
    "parse_arguments_text",
    "recover_reexecutions",
    "request_reexecution",
    "runnable_problem",
    "snapshot_tool",
    "splice",
]

User = AbstractBaseUser | AnonymousUser

# -- checks ----------------------------------------------------------------------------


def runnable_problem(run: Run, call: ToolCall) -> str | None:
    """Why the call cannot be executed again now (None if it can), without building its
    executor: what the lane's editor says instead of offering to run it."""
    try:
        check_runnable(run, call, build=False)
    except ReexecutionError as exc:
        return str(exc)
    return None


def check_runnable(run: Run, call: ToolCall, *, build: bool = True) -> ToolSnapshot:
    """The snapshot's tool if the call may be executed again; else ReexecutionError."""
    if call.state not in REEXECUTABLE_CALL_STATES:
        raise ReexecutionError("call_not_finished", f"The call is {call.state}: it can be "
                               "executed again once the run has executed it")
    tool = snapshot_tool(run, call)
    registration = ToolRegistration.objects.filter(name=tool.name).first()
    if registration is None or not registration.enabled:
        raise ReexecutionError("tool_unavailable", f"Tool {tool.name!r} is "
                               f"{'no longer registered' if registration is None else 'disabled'}"
                               " here: it is not run again")
    snapshot = snapshot_of(run)
    if snapshot.imported is not None and tool.name in unregistered_tool_code(snapshot):
        raise ReexecutionError("tool_unavailable", f"This run was imported and its tool "
                               f"{tool.name!r} is not the one registered here: its code "
                               "is never run")
    if build:
        built(tool)  # an import path that no longer imports, a kind this version lacks
    return tool


def argument_problems(tool: ToolSnapshot, arguments: Any) -> dict[str, str]:
    """What is wrong with `arguments` for the tool as frozen in the run, by JSON pointer
    ("" is the whole object); the engine's cached Draft 2020-12 validator."""
    if not isinstance(arguments, dict):
        return {"": "the arguments must be a JSON object"}
    try:
        validate_against_schema(schema_validator(tool.json_schema), arguments,
                                tool.name)
    except ToolArgumentsError as exc:
        problems: dict[str, str] = {}
        for error in exc.errors or []:
            problems.setdefault(str(error.get("pointer", "")), str(error.get("msg", "")))
        return problems
    except ToolExecutionError as exc:  # the tool's own schema cannot be used
        return {"": str(exc)}
    return {}


def parse_arguments_text(text: str) -> Any:
    """Arguments as typed on the page; a ReexecutionError says where the JSON broke."""
    try:
        return parse_json_text(text)
    except JsonTextError as exc:
        raise ReexecutionError("invalid_arguments", f"The arguments are not valid JSON: {exc}",
                               status=400, problems={"": f"not valid JSON: {exc}"}) from exc


# -- writes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ReexecutionRequest:
    arguments: Any
    approve: bool = False
    """The person approves running a tool that requires approval (required for one)."""


def request_reexecution(*, run: Run, call: ToolCall, user: User | None,
                        request: ReexecutionRequest) -> CallReexecution:
    """A pending re-execution of `call`, enqueued on commit; ReexecutionError if refused."""
    tool = check_runnable(run, call)
    problems = argument_problems(tool, request.arguments)
    if problems:
        raise ReexecutionError("invalid_arguments", "The arguments do not fit the tool's "
                               "schema", status=400, problems=problems)
    approved = bool(tool.requires_approval)
    if approved and request.approve is not True:
        raise ReexecutionError("approval_required", f"Tool {tool.name!r} requires "
                               "approval: re-executing it is your approval, so say so "
                               "(approve)", status=400)
    with transaction.atomic():
        execution = _store(run, call, tool, request.arguments, approved, user)
        event(execution)
        pk = execution.pk
        transaction.on_commit(lambda: execute_reexecution.enqueue(pk))
    return execution


def _store(run: Run, call: ToolCall, tool: ToolSnapshot, arguments: Any, approved: bool,
           user: User | None) -> CallReexecution:
    """The pending row, numbered after the call's latest (inside the caller's
    transaction, the call's row locked: two requests at once never take one number)."""
    ToolCall.objects.select_for_update().filter(pk=call.pk).first()
    number = (call.reexecutions.aggregate(n=Max("number"))["n"] or 0) + 1
    return CallReexecution.objects.create(
        run=run, tool_call=call, number=number,
        tool_name=fit_column(CallReexecution, "tool_name", tool.name),
        tool_kind=tool.kind, tool_version_hash=tool.version_hash or "",
        arguments=clean_json(arguments), approved=approved,
        requested_by_id=user.pk if user is not None and user.is_authenticated else None,
        requested_by_label=fit_column(CallReexecution, "requested_by_label", _label(user)))


def _label(user: User | None) -> str:
    return user.get_username() if user is not None and user.is_authenticated else "(unknown)"


def splice(*, run: Run, execution: CallReexecution, user: User | None) -> Run:
    """A new run continuing `run` with the re-execution's result in place of its call's
    original result, from the next model call (`fork.run_splice`). Once per
    re-execution: asked again (a retried request, a double click), it returns the run
    the first splice made (`spliced_run`) instead of starting another."""
    return splice_once(run=run, execution=execution, user=user)[0]


def splice_once(*, run: Run, execution: CallReexecution,
                user: User | None) -> tuple[Run, bool]:
    """`splice`, and whether it made the run now (False: an earlier request did). The
    re-execution's row lock makes two requests at once take turns."""
    with transaction.atomic():
        CallReexecution.objects.select_for_update().filter(pk=execution.pk).first()
        earlier = spliced_run(run, execution, user)
        if earlier is not None:
            return earlier, False
        return _splice_new(run=run, execution=execution, user=user), True


def spliced_run(run: Run, execution: CallReexecution, user: User | None) -> Run | None:
    """The run an earlier splice of `execution` by the same user made, if any (its
    snapshot's splice section names the call and the re-execution's number)."""
    owner = user.pk if user is not None and user.is_authenticated else None
    return (Run.objects.filter(parent=run, created_by_id=owner,
                               snapshot__splice__call=execution.tool_call_id,
                               snapshot__splice__execution=execution.number)
            .order_by("created_at").first())


def _splice_new(*, run: Run, execution: CallReexecution, user: User | None) -> Run:
    if not execution.is_finished or execution.result_text is None:
        raise ReexecutionError("not_finished", f"Re-execution {execution.number} is "
                               f"{execution.state}: splice it once it has a result")
    call = execution.tool_call
    result = ToolExecutionResultMessage(id=call.call_id, tool_name=call.tool_name,
                                        text=execution.result_text,
                                        is_error=execution.is_error)
    try:
        return run_splice(run=run, user=user, call=call, result=result, splice={
            "of": str(run.pk), "call": call.pk, "call_id": call.call_id,
            "tool": call.tool_name, "round": call.round.index + 1,
            "execution": execution.number, "by": _label(user),
            "original": {"arguments": call.arguments, "text": call.result_text,
                         "is_error": call.is_error},
            "spliced": {"arguments": execution.arguments,
                        "arguments_text": json.dumps(execution.arguments, ensure_ascii=False),
                        "text": execution.result_text,
                        "is_error": execution.is_error, "state": execution.state,
                        "tool_version_hash": execution.tool_version_hash},
        })
    except ForkError as exc:
        raise ReexecutionError("cannot_splice", f"Cannot splice: {exc}") from exc


# -- recovery --------------------------------------------------------------------------

LOST_GRACE_SECONDS = 60.0
"""How long past its timeout a running re-execution may go unfinished before it counts
as lost with its worker (a task that ran it would have stored a timeout by then)."""
LOST_MESSAGE = ("The worker executing it stopped before it finished: its outcome is "
                "unknown (it was not run again)")


def recover_reexecutions(*, enqueue_pending: bool) -> tuple[list[int], list[int]]:
    """(pending ones enqueued again, running ones marked lost). At a worker's start, a
    pending re-execution's task may have been lost with the previous process (the
    in-process backend keeps none): it is enqueued again, which is safe (a second
    delivery finds it taken and does nothing). A running one whose worker died never
    finishes: past its timeout and a grace it is stored as failed, never re-run (the
    tool may have had effects)."""
    pending: list[int] = []
    if enqueue_pending:
        pending = list(CallReexecution.objects.filter(state=ReexecutionState.PENDING)
                       .values_list("pk", flat=True))
        for pk in pending:
            execute_reexecution.enqueue(pk)
    lost = [execution.pk for execution in CallReexecution.objects.filter(
        state=ReexecutionState.RUNNING).select_related("run", "tool_call__round")
        if _lost(execution) and _mark_lost(execution)]
    return pending, lost


def _lost(execution: CallReexecution) -> bool:
    try:
        limit = timeout_of(execution.run, snapshot_tool(execution.run, execution.tool_call))
    except ReexecutionError:
        limit = DEFAULT_TIMEOUT_SECONDS
    started = execution.started_at or execution.requested_at
    return started < timezone.now() - timedelta(seconds=limit + LOST_GRACE_SECONDS)


def _mark_lost(execution: CallReexecution) -> bool:
    with transaction.atomic():
        marked = CallReexecution.objects.filter(
            pk=execution.pk, state=ReexecutionState.RUNNING).update(
            state=ReexecutionState.EXECUTION_ERROR, is_error=True, result_text=LOST_MESSAGE,
            error_type="WorkerLost", error_message=LOST_MESSAGE, finished_at=timezone.now())
        if marked:
            execution.state = ReexecutionState.EXECUTION_ERROR
            event(execution)
    return bool(marked)
