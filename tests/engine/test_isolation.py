"""Isolated Python tools (engine/isolation): results and errors come back as in
process; a tool that spins, hoards memory or ends its process is stopped and its worker
replaced while the pool goes on serving; the workers get only the allowed environment;
a shut-down pool leaves no process or thread behind."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator

import pytest

from tools_app.engine import (
    FunctionToolExecutor,
    RegisteredTool,
    ToolArgumentsError,
    ToolExecutionError,
    ToolExecutionRequest,
    ToolService,
    ToolSpecification,
    ToolTimeoutError,
)
from tools_app.engine.execution import ToolExecutionResult, to_jsonable
from tools_app.engine.isolation import (
    IsolatedFunctionExecutor,
    IsolationSettings,
    PoolClosed,
    isolated_pool,
    shutdown_isolated_pools,
)
from tools_app.engine.loop.invocation import invoke_tool, traceback_of

from . import isolated_tools
from .process_support import child_pids
from .support import call, calls, final, scripted, user

SETTINGS = IsolationSettings(workers=2, memory_mb=256)
ONE_WORKER = IsolationSettings(workers=1, memory_mb=256)


@pytest.fixture(autouse=True)
def _pools_shut_down() -> Iterator[None]:
    yield
    shutdown_isolated_pools()


def request(name: str, arguments: str = "{}") -> ToolExecutionRequest:
    return ToolExecutionRequest(id="call-1", name=name, arguments=arguments)


async def run_isolated(func: object, arguments: str = "{}", *,
                       settings: IsolationSettings = SETTINGS,
                       timeout: float | None = None) -> ToolExecutionResult:
    executor = IsolatedFunctionExecutor(func, settings=settings)  # type: ignore[arg-type]
    registered = RegisteredTool(specification=ToolSpecification(name=executor.name),
                                executor=executor, timeout=timeout)
    return await invoke_tool(registered, request(executor.name, arguments),
                             default_timeout=None)


@pytest.mark.parametrize(("func", "arguments"), [
    (isolated_tools.add, '{"a": 2, "b": "3"}'),
    (isolated_tools.moved, '{"point": {"x": 1, "y": 2}, "by": 5}'),
    (isolated_tools.shout, '{"text": "quiet"}'),
    (isolated_tools.nothing, ""),
])
async def test_a_result_comes_back_as_it_does_in_process(func: object, arguments: str) -> None:
    in_process = await FunctionToolExecutor(func).execute_with_result(  # type: ignore[arg-type]
        request("t", arguments))
    isolated = await run_isolated(func, arguments)
    assert (isolated.text, isolated.result, isolated.is_error) == (
        in_process.text, to_jsonable(in_process.result), False)


async def test_a_tool_that_raises_is_the_same_error_with_the_child_s_traceback() -> None:
    with pytest.raises(ToolExecutionError) as raised:
        await run_isolated(isolated_tools.fails, '{"reason": "no such order"}')
    assert str(raised.value) == "ValueError: no such order"
    assert type(raised.value) is ToolExecutionError
    recorded = traceback_of(raised.value)
    assert recorded is not None
    assert 'raise ValueError(reason)' in recorded
    assert "isolated_tools.py" in recorded


async def test_arguments_errors_are_the_same_as_in_process() -> None:
    with pytest.raises(ToolArgumentsError, match="not one I take"):
        await run_isolated(isolated_tools.refuses_arguments, '{"value": "x"}')
    with pytest.raises(ToolArgumentsError) as in_process:
        await FunctionToolExecutor(isolated_tools.add).execute_with_result(
            request("add", '{"a": "two"}'))
    with pytest.raises(ToolArgumentsError) as isolated:
        await run_isolated(isolated_tools.add, '{"a": "two"}')
    assert (str(isolated.value), isolated.value.errors) == (
        str(in_process.value), in_process.value.errors)


async def test_a_tool_that_cannot_be_sent_is_a_tool_error_and_the_pool_goes_on() -> None:
    def local_tool(a: int) -> int:  # not importable by module path: cannot be pickled
        return a

    with pytest.raises(ToolExecutionError, match="pickle"):
        await run_isolated(local_tool, '{"a": 1}', settings=ONE_WORKER)
    assert (await run_isolated(isolated_tools.add, '{"a": 1, "b": 1}',
                               settings=ONE_WORKER)).text == "2"
    assert len(isolated_pool(ONE_WORKER).worker_pids()) == 1


async def test_calls_reuse_the_worker_process() -> None:
    first = await run_isolated(isolated_tools.process_id, settings=ONE_WORKER)
    second = await run_isolated(isolated_tools.process_id, settings=ONE_WORKER)
    assert first.text == second.text != str(os.getpid())
    assert isolated_pool(ONE_WORKER).worker_pids() == [int(first.text)]


async def test_prestarted_workers_serve_the_first_calls() -> None:
    pool = isolated_pool(SETTINGS)
    starting = pool.prestart()
    assert starting is not None
    starting.result()
    started = set(pool.worker_pids())
    assert len(started) == SETTINGS.workers
    assert pool.prestart() is None  # already running: nothing more starts
    first = await run_isolated(isolated_tools.process_id)
    assert int(first.text) in started
    assert set(pool.worker_pids()) == started


async def test_a_worker_sees_only_the_allowed_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFORGE_TEST_SECRET", "hunter2")
    monkeypatch.setenv("AGENTFORGE_TEST_ALLOWED", "yes")
    settings = IsolationSettings(workers=1, memory_mb=256,
                                 env_allow=("PATH", "AGENTFORGE_TEST_ALLOWED"))
    secret = await run_isolated(isolated_tools.environment, '{"name": "AGENTFORGE_TEST_SECRET"}',
                                settings=settings)
    allowed = await run_isolated(isolated_tools.environment,
                                 '{"name": "AGENTFORGE_TEST_ALLOWED"}', settings=settings)
    assert (secret.result["in_os_environ"], secret.result["in_initial_environ"]) == (
        False, False)
    assert (allowed.result["in_os_environ"], allowed.result["in_initial_environ"]) == (
        True, True)
    assert set(secret.result["names"]) <= {"PATH", "AGENTFORGE_TEST_ALLOWED", "LC_CTYPE"}


async def test_a_spinning_tool_is_stopped_at_its_timeout_and_replaced() -> None:
    stuck_pid = int((await run_isolated(isolated_tools.process_id,
                                        settings=ONE_WORKER)).text)
    with pytest.raises(ToolTimeoutError, match="timed out after 1 s"):
        await run_isolated(isolated_tools.spins, settings=ONE_WORKER, timeout=1)
    after = await run_isolated(isolated_tools.add, '{"a": 1, "b": 1}', settings=ONE_WORKER)
    assert after.text == "2"
    assert stuck_pid not in child_pids()
    assert stuck_pid not in isolated_pool(ONE_WORKER).worker_pids()


async def test_a_tool_that_hoards_memory_hits_the_limit_and_is_replaced() -> None:
    with pytest.raises(ToolExecutionError) as raised:
        await run_isolated(isolated_tools.hoards_memory, settings=ONE_WORKER, timeout=30)
    assert str(raised.value) == (
        "The isolated tool process ran out of memory (limit 256 MB)")
    assert "MemoryError" in (traceback_of(raised.value) or "")
    after = await run_isolated(isolated_tools.add, '{"a": 1, "b": 2}', settings=ONE_WORKER)
    assert after.text == "3"


async def test_a_tool_that_ends_its_process_is_reported_and_replaced() -> None:
    with pytest.raises(ToolExecutionError) as raised:
        await run_isolated(isolated_tools.exits, settings=ONE_WORKER, timeout=30)
    assert str(raised.value) == "The isolated tool process exited with code 3"
    after = await run_isolated(isolated_tools.add, '{"a": 2, "b": 2}', settings=ONE_WORKER)
    assert after.text == "4"


async def test_a_shut_down_pool_leaves_no_process_or_thread_behind() -> None:
    processes_before = child_pids()
    threads_before = set(threading.enumerate())
    await run_isolated(isolated_tools.add, '{"a": 1, "b": 2}')
    with pytest.raises(ToolTimeoutError):
        await run_isolated(isolated_tools.spins, timeout=1)
    with pytest.raises(ToolExecutionError):
        await run_isolated(isolated_tools.exits)
    await run_isolated(isolated_tools.add, '{"a": 1, "b": 2}')  # a worker serving again
    pids = set(isolated_pool(SETTINGS).worker_pids())
    assert pids
    assert pids <= child_pids()
    # A call in progress at the shutdown is interrupted too.
    executor = IsolatedFunctionExecutor(isolated_tools.spins, settings=SETTINGS)
    spinning = asyncio.create_task(executor.execute_with_result(request("spins")))
    await asyncio.sleep(0)
    shutdown_isolated_pools()
    with pytest.raises(PoolClosed):
        await spinning
    assert child_pids() == processes_before
    assert set(threading.enumerate()) == threads_before


async def test_the_service_runs_a_tool_declared_isolated_in_its_pool() -> None:
    service = ToolService(isolation=ONE_WORKER).tools(isolated_tools)
    assert isinstance(service.registered_tools["sandboxed_sum"].executor,
                      IsolatedFunctionExecutor)
    assert type(service.registered_tools["add"].executor) is FunctionToolExecutor
    model = scripted(calls(call("sandboxed_sum", {"numbers": [1, 2, 3]}),
                           call("process_id")), final("done"))

    result = await service.chat(model, [user()])

    [summed, pid] = [execution.result_text for execution in result.tool_executions]
    assert summed == "6"
    assert pid == str(os.getpid())  # process_id is not declared isolated
    assert len(isolated_pool(ONE_WORKER).worker_pids()) == 1
