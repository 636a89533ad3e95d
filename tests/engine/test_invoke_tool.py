"""`service.invoke_tool`: one call executed on its own, as the loop executes it (used to
execute a recorded call again): the tool's timeout, else the default; anything a custom
executor raises is the tool failing."""

from __future__ import annotations

import asyncio

import pytest

from tools_app.engine import (
    CallableToolExecutor,
    RegisteredTool,
    ToolArgumentsError,
    ToolExecutionError,
    ToolExecutionRequest,
    ToolSpecification,
    ToolTimeoutError,
)
from tools_app.engine.loop.invocation import invoke_tool

REQUEST = ToolExecutionRequest(id="c1", name="t", arguments="{}")


class _Raises:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def execute_with_result(self, request: ToolExecutionRequest) -> object:
        raise self.error


def registered(executor: object, timeout: float | None = None) -> RegisteredTool:
    return RegisteredTool(specification=ToolSpecification(name="t"),
                          executor=executor, timeout=timeout)  # type: ignore[arg-type]


def test_a_result_comes_back_as_the_loop_would_send_it() -> None:
    result = asyncio.run(invoke_tool(registered(CallableToolExecutor(lambda r: {"a": 1})),
                                     REQUEST, default_timeout=None))
    assert (result.text, result.result, result.is_error) == ('{"a": 1}', {"a": 1}, False)


@pytest.mark.parametrize(("tool_timeout", "default"), [(0.01, None), (None, 0.01)])
def test_the_tool_s_timeout_else_the_default_stops_it(tool_timeout: float | None,
                                                      default: float | None) -> None:
    async def never(request: ToolExecutionRequest) -> str:
        await asyncio.Event().wait()  # never set: only the timeout ends it
        return "unreachable"

    with pytest.raises(ToolTimeoutError):
        asyncio.run(invoke_tool(registered(CallableToolExecutor(never), tool_timeout),
                                REQUEST, default_timeout=default))


def test_what_a_custom_executor_raises_is_the_tool_failing() -> None:
    with pytest.raises(ToolExecutionError, match="KeyError: 'x'"):
        asyncio.run(invoke_tool(registered(_Raises(KeyError("x"))), REQUEST,
                                default_timeout=None))
    arguments = ToolArgumentsError("bad", tool_name="t")
    with pytest.raises(ToolArgumentsError):
        asyncio.run(invoke_tool(registered(_Raises(arguments)), REQUEST, default_timeout=None))
