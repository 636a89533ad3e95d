"""Running a person's re-execution of a tool call (the `execute_reexecution` task's
body; requests are checked and stored by runs/debugger/reexecution.py): the tool as frozen in the
run's snapshot, with the executor a run builds for its kind, under the tool's, else the
policy's, else `DEFAULT_TIMEOUT_SECONDS` timeout. The outcome is stored redacted of the
executor's secrets, and a `call_reexecution` event tells the run's live viewers.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone

from tools_app.engine import (
    RegisteredTool,
    ToolArgumentsError,
    ToolExecutionRequest,
    ToolSpecification,
    ToolTimeoutError,
)
from tools_app.engine.execution import ToolExecutionResult, to_jsonable
from tools_app.engine.loop.invocation import invoke_tool
from tools_app.models import CallReexecution, ReexecutionState, Run, ToolCall
from tools_app.runs.snapshot.engine import live_executor
from tools_app.runs.snapshot.executors import BuiltExecutor
from tools_app.runs.snapshot.model import ToolSnapshot, snapshot_of
from tools_app.runs.store.eventlog import append_event, notify_after_commit
from tools_app.runs.store.sanitize import clean_json, clean_text, fit_column, redact

DEFAULT_TIMEOUT_SECONDS = 300.0
"""A re-execution's timeout when neither the tool nor the run's policy sets one: a task
never waits for ever on a stuck tool."""


class ReexecutionError(ValueError):
    """A re-execution that cannot be made; `code` is the API's error code, `problems`
    maps a JSON pointer of the arguments ("" for the whole object) to what is wrong."""

    def __init__(self, code: str, message: str, *, status: int = 409,
                 problems: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code, self.status, self.problems = code, status, problems or {}


def snapshot_tool(run: Run, call: ToolCall) -> ToolSnapshot:
    """The call's tool as frozen in the run; a name the run never had is hallucinated."""
    tool = snapshot_of(run).tool_named(call.tool_name)
    if tool is not None:
        return tool
    raise ReexecutionError("hallucinated_tool", f"The run has no tool named "
                           f"{call.tool_name!r}: the model made the name up, so there is "
                           "nothing to execute")


def specification(tool: ToolSnapshot) -> ToolSpecification:
    return ToolSpecification(name=tool.name, description=tool.description,
                             parameters=tool.json_schema, strict=tool.strict or None)


def built(tool: ToolSnapshot) -> BuiltExecutor:
    """The executor a run builds for the tool (secrets read under the run's rule)."""
    try:
        return live_executor(tool, specification(tool))
    except ImproperlyConfigured as exc:
        raise ReexecutionError("tool_unavailable", f"Tool {tool.name!r} cannot run "
                               f"here any more: {exc}") from exc


def timeout_of(run: Run, tool: ToolSnapshot) -> float:
    """The tool's timeout, else the run's policy's default, else DEFAULT_TIMEOUT_SECONDS."""
    return float(tool.timeout_seconds or snapshot_of(run).policy.default_tool_timeout
                 or DEFAULT_TIMEOUT_SECONDS)


def event(execution: CallReexecution) -> None:
    """The run's history says who executed which call again and how it ended; viewers of
    a live run get the call's round again (its lane lists the re-executions)."""
    call = execution.tool_call
    seq = append_event(str(execution.run_id), None, "call_reexecution", {
        "round_index": call.round.index, "call_id": call.call_id, "number": execution.number,
        "state": execution.state, "by": execution.requested_by_label,
        "approved": execution.approved})
    notify_after_commit(str(execution.run_id), seq)


# -- executing -------------------------------------------------------------------------


async def perform(pk: int) -> str | None:
    """The task's body: run a pending re-execution and store its outcome (its state);
    None if it was not pending (already taken by another delivery of the task)."""
    execution = await sync_to_async(_claim)(pk)
    if execution is None:
        return None
    started = time.monotonic()
    outcome = await _execute(execution)
    await sync_to_async(_finish)(execution, outcome, (time.monotonic() - started) * 1000)
    return outcome.state


def _claim(pk: int) -> CallReexecution | None:
    """pending -> running, so a task delivered twice runs the tool once."""
    with transaction.atomic():
        taken = CallReexecution.objects.filter(pk=pk, state=ReexecutionState.PENDING).update(
            state=ReexecutionState.RUNNING, started_at=timezone.now())
    if not taken:
        return None
    return CallReexecution.objects.select_related("run", "tool_call__round").get(pk=pk)


@dataclass(frozen=True)
class _Outcome:
    state: str
    result: ToolExecutionResult | None = None
    error: BaseException | None = None
    secrets: tuple[str, ...] = ()


async def _execute(execution: CallReexecution) -> _Outcome:
    """Run the snapshot's tool; every failure is an outcome (cancellation propagates:
    the row stays running and the reaper's sweep stores it as lost)."""
    run = execution.run
    try:
        tool = await sync_to_async(snapshot_tool)(run, execution.tool_call)
        executor = await sync_to_async(built)(tool)
    except ReexecutionError as exc:  # changed since the request: a failure, said why
        return _Outcome(ReexecutionState.EXECUTION_ERROR, error=exc)
    registered = RegisteredTool(specification=specification(tool), executor=executor.executor,
                                timeout=timeout_of(run, tool))
    request = ToolExecutionRequest(id=execution.tool_call.call_id, name=tool.name,
                                   arguments=json.dumps(execution.arguments))
    try:
        result = await invoke_tool(registered, request, default_timeout=None)
    except ToolArgumentsError as exc:
        return _Outcome(ReexecutionState.ARGUMENTS_ERROR, error=exc, secrets=executor.secrets)
    except ToolTimeoutError as exc:
        return _Outcome(ReexecutionState.TIMED_OUT, error=exc, secrets=executor.secrets)
    except Exception as exc:  # the tool failing, whatever it raised (ReplayDivergence too)
        return _Outcome(ReexecutionState.EXECUTION_ERROR, error=exc, secrets=executor.secrets)
    return _Outcome(ReexecutionState.SUCCEEDED, result=result, secrets=executor.secrets)


def _finish(execution: CallReexecution, outcome: _Outcome, duration_ms: float) -> None:
    secrets = outcome.secrets
    values: dict[str, Any] = {"state": outcome.state, "finished_at": timezone.now(),
                              "duration_ms": duration_ms}
    if outcome.result is not None:
        values |= {"result_text": clean_text(redact(outcome.result.text, secrets)),
                   "result_json": _raw_result(outcome.result, secrets),
                   "is_error": outcome.result.is_error}
    else:
        error = outcome.error
        message = str(error) if error is not None else "unknown failure"
        values |= {"is_error": True, "result_text": clean_text(redact(message, secrets)),
                   "error_type": fit_column(CallReexecution, "error_type",
                                            type(error).__name__),
                   "error_message": clean_text(redact(message, secrets))}
    with transaction.atomic():
        # Still running: a sweep that took it for lost (runs/debugger/reexecution.py) has the
        # last word, and says so in the run's history already.
        if CallReexecution.objects.filter(pk=execution.pk,
                                          state=ReexecutionState.RUNNING).update(**values):
            execution.state = outcome.state
            event(execution)


def _raw_result(result: ToolExecutionResult, secrets: tuple[str, ...]) -> Any:
    """The raw result when it is not the text itself (a dict, a list), as JSON."""
    if result.result is None or isinstance(result.result, str):
        return None
    return clean_json(redact(to_jsonable(result.result), secrets))
