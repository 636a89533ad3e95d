"""The executor of an isolated Python tool: arguments validated here, as in process;
the call run in a worker process; its reply turned into the result or the error a
FunctionToolExecutor would give (a death of the worker becomes a tool error naming
its exit code or signal)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

from ..base_errors import ToolArgumentsError, ToolExecutionError
from ..execution import FunctionToolExecutor, ToolExecutionResult
from ..messages import ToolExecutionRequest
from .pool import CallOutcome, ChildExited, IsolationSettings, isolated_pool


class ChildTraceback(Exception):
    """The traceback of a failure in the worker process, as text."""

    def __str__(self) -> str:
        return str(self.args[0])


class IsolatedToolFailure(Exception):
    """The tool raised in its worker process; `__cause__` holds the traceback there."""


class IsolatedFunctionExecutor(FunctionToolExecutor):
    """Runs a Python tool in a worker process of the pool for `settings`."""

    def __init__(self, func: Callable[..., Any], *, settings: IsolationSettings,
                 strict: bool | None = None) -> None:
        super().__init__(func, strict=strict)
        self.settings = settings

    async def execute_with_result(self, request: ToolExecutionRequest) -> ToolExecutionResult:
        validated = self.validate(request)
        args, kwargs = self._call_arguments(validated)
        outcome = await isolated_pool(self.settings).call(self.func, args, kwargs)
        return self._result_of(outcome)

    def _result_of(self, outcome: CallOutcome) -> ToolExecutionResult:
        if isinstance(outcome, ChildExited):
            raise ToolExecutionError(exit_message(outcome.code), tool_name=self.name)
        kind, *values = outcome.reply
        if kind == "ok":
            text, result = values
            return ToolExecutionResult.success(text, result=result)
        if kind == "arguments":
            message, errors = values
            raise ToolArgumentsError(message, tool_name=self.name, errors=errors)
        if kind == "out_of_memory":
            message = (f"The isolated tool process ran out of memory (limit "
                       f"{self.settings.memory_mb} MB)")
            raise ToolExecutionError(message, tool_name=self.name,
                                     cause=_failure(message, values[0]))
        failure, child_traceback = values
        raise ToolExecutionError(failure, tool_name=self.name,
                                 cause=_failure(failure, child_traceback))


def _failure(message: str, child_traceback: str) -> IsolatedToolFailure:
    failure = IsolatedToolFailure(message)
    failure.__cause__ = ChildTraceback(child_traceback)
    return failure


def exit_message(code: int) -> str:
    """A worker's end, said for the timeline: its exit code, or the signal that
    killed it."""
    if code >= 0:
        return f"The isolated tool process exited with code {code}"
    number = -code
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    hint = (" (the system's out-of-memory killer sends this one)"
            if number == signal.SIGKILL else "")
    return f"The isolated tool process was killed by {name}{hint}"
