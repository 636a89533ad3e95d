"""Executing tool calls: one call with its timeout, its errors turned into outcomes,
a round's calls together (results in request order, the rest cancelled when one
stops the run), and the event that says how a call ended."""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Coroutine
from typing import Any

from ..errors import (
    ReplayDivergence,
    ToolArgumentsError,
    ToolExecutionError,
    ToolRejectedError,
    ToolTimeoutError,
    ToolUnknownOutcomeError,
)
from ..events import ToolCallFinished, ToolCallOutcome
from ..execution import ToolExecutionResult, to_jsonable
from ..messages import (
    ToolExecutionRequest,
)
from .contract import RegisteredTool


async def invoke_tool(registered: RegisteredTool, request: ToolExecutionRequest, *,
                      default_timeout: float | None) -> ToolExecutionResult:
    """Run one call with the tool's (or the default) timeout: the loop's invocation,
    also used alone to execute a recorded call again (runs/debugger/reexecution.py). Raises
    ToolArgumentsError, ToolExecutionError (ToolTimeoutError for a timeout) or
    ReplayDivergence; anything else a custom executor raises counts as the tool failing."""
    timeout = registered.timeout or default_timeout
    call = registered.executor.execute_with_result(request)
    try:
        if timeout is None:
            return await call
        return await asyncio.wait_for(call, timeout)
    except TimeoutError as exc:
        if timeout is None:
            raise ToolExecutionError(f"TimeoutError: {exc}", tool_name=request.name,
                                     cause=exc) from exc
        raise ToolTimeoutError(request.name, timeout) from exc
    except (ToolArgumentsError, ToolExecutionError, ReplayDivergence,
            asyncio.CancelledError):
        raise
    except Exception as exc:
        # A custom executor that raised something else still counts as the tool failing.
        raise ToolExecutionError(f"{type(exc).__name__}: {exc}", tool_name=request.name,
                                 cause=exc) from exc


async def run_together[T](calls: list[Coroutine[Any, Any, T]]) -> list[T]:
    """Run `calls` concurrently; their results, in order.

    Each call starts at once in a task of its own and runs until it first waits
    (asyncio's eager tasks): a tool that never waits finishes without a trip through the
    event loop, which a TaskGroup's tasks would each take. If a call raises (its error
    handler stopped the run), the calls not started yet never start, the others are
    cancelled and waited for, and that error is raised itself, as a sequential round
    would stop. If this task is cancelled, every call is cancelled and waited for
    before the cancellation goes on (as asyncio.TaskGroup does).
    """
    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[T]] = []
    for index, call in enumerate(calls):
        if tasks and _failed(tasks[-1]):
            for unstarted in calls[index:]:
                unstarted.close()
            break
        tasks.append(asyncio.eager_task_factory(loop, call))
    try:
        pending = [task for task in tasks if not task.done()]
        while pending and not any(_failed(task) for task in tasks):
            _, still = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
            pending = list(still)
    except asyncio.CancelledError:
        await cancel_and_wait(tasks)
        raise
    failed = next((task for task in tasks if _failed(task)), None)
    if failed is not None:
        await cancel_and_wait(tasks)
        error = failed.exception()
        assert error is not None
        raise error
    return [task.result() for task in tasks]


def _failed(task: asyncio.Task[Any]) -> bool:
    return task.done() and not task.cancelled() and task.exception() is not None


async def cancel_and_wait(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel the calls still running and wait until every one has finished; a
    cancellation of this task meanwhile is raised once they have."""
    for task in tasks:
        task.cancel()
    interrupted: asyncio.CancelledError | None = None
    while pending := [task for task in tasks if not task.done()]:
        try:
            await asyncio.wait(pending)
        except asyncio.CancelledError as exc:
            interrupted = exc
    for task in tasks:  # mark every outcome seen: no "exception never retrieved"
        if not task.cancelled():
            task.exception()
    if interrupted is not None:
        raise interrupted


def outcome_of(error: ToolExecutionError) -> ToolCallOutcome:
    if isinstance(error, ToolRejectedError):
        return "rejected"
    if isinstance(error, ToolTimeoutError):
        return "timed_out"
    if isinstance(error, ToolUnknownOutcomeError):
        return "unknown_outcome"
    return "execution_error"


def traceback_of(error: BaseException | None) -> str | None:
    if error is None:
        return None
    cause = getattr(error, "cause", None) or error
    return "".join(traceback.format_exception(cause)).strip()


def handler_name(handler: object) -> str:
    """How an error handler or hallucinated-tool strategy is named in the events."""
    return str(getattr(handler, "handler_name", None) or getattr(handler, "__name__", None)
               or type(handler).__name__)


def finished_event(
    round_index: int,
    request: ToolExecutionRequest,
    started: float,
    outcome: ToolCallOutcome,
    result: ToolExecutionResult | None,
    *,
    error: BaseException | None,
    handled_by: str | None,
    stopped_run: bool = False,
) -> ToolCallFinished:
    """The event reporting how one call ended, finished now."""
    finished = time.time()
    return ToolCallFinished(
        round_index=round_index,
        call_id=request.id,
        tool_name=request.name,
        outcome=outcome,
        text=result.text if result else None,
        is_error=bool(result and result.is_error) or error is not None,
        result_json=to_jsonable(result.result) if result and not result.is_error else None,
        error_type=type(error).__name__ if error else None,
        error_message=str(error) if error else None,
        error_details=getattr(error, "errors", None) or None,
        traceback=traceback_of(error),
        handled_by=handled_by,
        stopped_run=stopped_run,
        started_at=started,
        finished_at=finished,
        duration_ms=(finished - started) * 1000,
    )
