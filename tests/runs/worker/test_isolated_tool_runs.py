"""Isolated Python tools in real runs: a tool that spins, one that hoards memory and one
that ends its process are each stopped and recorded (the call's outcome, error and
event), the run goes on per the policy, the worker serves the next run, and the pool's
shutdown leaves no worker process or thread behind."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.engine.process_support import child_pids
from tests.runs.support import calls, events, execute, start
from tools_app.engine.isolation import IsolatedFunctionExecutor, shutdown_isolated_pools
from tools_app.models import ErrorPolicy, RunStatus, ToolRegistration
from tools_app.runs.snapshot.engine import engine_for_snapshot
from tools_app.runs.snapshot.model import snapshot_of
from tools_app.tools.registry import compute_version_hash, sync_tools

pytestmark = pytest.mark.both

# Only the spinning tool needs its timeout; the others are stopped by their own doing
# (the timeout bounds them should that break).
RUNAWAYS = {
    "spins": ("timed_out", "ToolTimeoutError", "Tool 'spins' timed out after 1 s"),
    "hoards_memory": ("execution_error", "ToolExecutionError",
                      "The isolated tool process ran out of memory (limit 256 MB)"),
    "exits": ("execution_error", "ToolExecutionError",
              "The isolated tool process exited with code 3"),
}


@pytest.fixture
def isolated_tools(db: None, settings: Any) -> Iterator[dict[str, ToolRegistration]]:
    settings.AGENTFORGE_ISOLATED_TOOL_WORKERS = 1
    settings.AGENTFORGE_ISOLATED_TOOL_MEMORY_MB = 256
    sync_tools(["tests.engine.isolated_tools"])
    tools = {tool.name: tool for tool in ToolRegistration.objects.all()}
    for tool in tools.values():
        tool.isolated = True
        tool.timeout_seconds = 1 if tool.name == "spins" else 30
        tool.version_hash = compute_version_hash(tool)
        tool.save()
    yield tools
    shutdown_isolated_pools()


def script(name: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"tool_calls": [{"name": name, "arguments": arguments}]},
            {"text": "model saw: {last_result}"}]


def test_the_snapshot_runs_an_isolated_tool_in_the_pool(
        make_endpoint: Any, isolated_tools: dict[str, ToolRegistration],
        policy: ErrorPolicy) -> None:
    run = start(make_endpoint(script("add", {"a": 1, "b": 2})), [isolated_tools["add"]],
                policy)
    snapshot = snapshot_of(run)
    assert [tool.isolated for tool in snapshot.tools] == [True]
    executor = engine_for_snapshot(snapshot).service.registered_tools["add"].executor
    assert isinstance(executor, IsolatedFunctionExecutor)
    assert (executor.settings.workers, executor.settings.memory_mb) == (1, 256)


@pytest.mark.parametrize("runaway", list(RUNAWAYS))
def test_a_runaway_tool_is_stopped_recorded_and_the_worker_goes_on(
        make_endpoint: Any, isolated_tools: dict[str, ToolRegistration],
        policy: ErrorPolicy, runaway: str) -> None:
    processes_before = child_pids()
    outcome, error_type, message = RUNAWAYS[runaway]

    stopped = start(make_endpoint(script(runaway, {})), [isolated_tools[runaway]], policy)
    execute(stopped)

    assert stopped.status == RunStatus.SUCCEEDED  # the policy tells the model
    [call] = calls(stopped)
    assert (call.state, call.is_error, call.error_type, call.result_text) == (
        outcome, True, error_type, message)
    assert stopped.final_text == f"model saw: {message}"
    [finished] = [e for e in events(stopped) if e.kind == "tool_call_finished"]
    assert finished.payload["outcome"] == outcome
    assert message in str(finished.payload)

    after = start(make_endpoint(script("add", {"a": 2, "b": 3}), name="next"),
                  [isolated_tools["add"]], policy)
    execute(after)
    assert (after.status, after.final_text) == (RunStatus.SUCCEEDED, "model saw: 5")

    shutdown_isolated_pools()
    assert child_pids() == processes_before
    assert not [t for t in threading.enumerate() if t.name.startswith("agentforge-isolated")]


def test_a_timeout_stops_the_run_when_the_policy_says_so(
        make_endpoint: Any, isolated_tools: dict[str, ToolRegistration],
        policy: ErrorPolicy) -> None:
    policy.execution_error = "rethrow"
    policy.save()

    run = start(make_endpoint(script("spins", {})), [isolated_tools["spins"]], policy)
    execute(run)

    assert (run.status, run.error_type) == (RunStatus.FAILED, "ToolTimeoutError")
    [call] = calls(run)
    assert call.state == "timed_out"
