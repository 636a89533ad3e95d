"""What running a Python tool isolated adds to a call (target: < 5 ms at the median).

The same tool (the demo `calculator`) called through the loop's own `invoke_tool`, in
process (on the tools' threads) and isolated (in the worker pool's processes), in
alternating blocks so that the machine's load weighs on both alike, after a warm-up
that starts the workers. Also timed: a worker's first call (an interpreter starting,
then the call), which is also what a call on a replaced worker costs.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

from benchmarks.common import summary, write_result
from tools_app.engine import FunctionToolExecutor, RegisteredTool, ToolSpecification
from tools_app.engine.isolation import (
    IsolatedFunctionExecutor,
    IsolationSettings,
    isolated_pool,
    shutdown_isolated_pools,
)
from tools_app.engine.loop.invocation import invoke_tool
from tools_app.engine.messages import ToolExecutionRequest
from tools_app.tools.example_tools import calculator

BLOCKS, CALLS_PER_BLOCK, WARM_UP = 20, 100, 50
SETTINGS = IsolationSettings(workers=2, memory_mb=512)
REQUEST = ToolExecutionRequest(id="bench", name="calculator",
                               arguments='{"expression": "(2 + 3) * 4 ** 2"}')


def registered(executor: object, timeout: float | None = None) -> RegisteredTool:
    return RegisteredTool(specification=ToolSpecification(name="calculator"),
                          executor=executor, timeout=timeout)  # type: ignore[arg-type]


async def timed_calls(tool: RegisteredTool, count: int) -> list[float]:
    timings = []
    for _ in range(count):
        started = time.perf_counter()
        result = await invoke_tool(tool, REQUEST, default_timeout=30)
        timings.append((time.perf_counter() - started) * 1000)
        assert result.text == "80", result.text
    return timings


async def first_call_ms() -> float:
    """A cold pool: the worker's interpreter starts within the call."""
    shutdown_isolated_pools()
    started = time.perf_counter()
    await timed_calls(registered(IsolatedFunctionExecutor(calculator, settings=SETTINGS)), 1)
    return (time.perf_counter() - started) * 1000


@dataclass(frozen=True)
class Measured:
    local: dict[str, float]
    remote: dict[str, float]
    cold_ms: float


async def measure() -> Measured:
    in_process = registered(FunctionToolExecutor(calculator))
    isolated = registered(IsolatedFunctionExecutor(calculator, settings=SETTINGS))
    cold = await first_call_ms()
    await timed_calls(in_process, WARM_UP)
    await timed_calls(isolated, WARM_UP)
    local: list[float] = []
    remote: list[float] = []
    for _ in range(BLOCKS):
        local += await timed_calls(in_process, CALLS_PER_BLOCK)
        remote += await timed_calls(isolated, CALLS_PER_BLOCK)
    assert len(isolated_pool(SETTINGS).worker_pids()) <= SETTINGS.workers
    shutdown_isolated_pools()
    return Measured(summary(local), summary(remote), cold)


def main() -> str:
    results = asyncio.run(measure())
    local, remote = results.local, results.remote
    added = remote["p50"] - local["p50"]
    verdict = "meets" if added < 5 else "MISSES"
    load = os.getloadavg()[0]
    return write_result("isolated_tools", f"""
## Isolated Python tools: what a call adds

`benchmarks/bench_isolated_tools.py`: the demo `calculator` called through the loop's
`invoke_tool`, in process and isolated ({SETTINGS.workers} workers of
{SETTINGS.memory_mb} MB), {BLOCKS} alternating blocks of {CALLS_PER_BLOCK} calls each,
after a warm-up of {WARM_UP}. 2 CPUs shared with other work (1-minute load average
{load:.1f}).

| | p50 | p95 | max |
|---|---|---|---|
| in process | {local['p50']:.3f} ms | {local['p95']:.3f} ms | {local['max']:.1f} ms |
| isolated | {remote['p50']:.3f} ms | {remote['p95']:.3f} ms | {remote['max']:.1f} ms |

Added at the median: **{added:.3f} ms**. Target < 5 ms: {verdict} the target.

A worker's first call (a new interpreter starting, then the call):
{results.cold_ms:.0f} ms. A run's workers start while its model answers; a worker
replaced after a stop or a crash costs its next call this much.
""").read_text()


if __name__ == "__main__":
    print(main())
