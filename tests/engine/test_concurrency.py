"""Concurrent execution of one round's calls, per-tool timeouts and cancellation.

The only wall-clock assertions of the suite are here: two 0.2 s tools in one round take
well under 0.4 s when run concurrently, and at least 0.4 s when serialized.
"""

import asyncio
import threading
import time
from typing import Any

import pytest

from tools_app.engine import ScriptedChatModel, ToolService, tool
from tools_app.engine.events import ChatFailed

from .support import EventLog, RecordingModel, call, calls, final, scripted, user

PAUSE = 0.2


class Overlap:
    """Counts how many tools run at the same moment (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.peak = 0
        self.finished: list[str] = []

    def enter(self) -> None:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)

    def leave(self, name: str) -> None:
        with self.lock:
            self.active -= 1
            self.finished.append(name)


def async_tools(overlap: Overlap) -> list[Any]:
    @tool
    async def first() -> str:
        overlap.enter()
        await asyncio.sleep(PAUSE)
        overlap.leave("first")
        return "first result"

    @tool
    async def second() -> str:
        overlap.enter()
        await asyncio.sleep(PAUSE)
        overlap.leave("second")
        return "second result"

    return [first, second]


def sync_tools(overlap: Overlap) -> list[Any]:
    @tool
    def first() -> str:
        overlap.enter()
        time.sleep(PAUSE)
        overlap.leave("first")
        return "first result"

    @tool
    def second() -> str:
        overlap.enter()
        time.sleep(PAUSE)
        overlap.leave("second")
        return "second result"

    return [first, second]


async def timed_round(service: ToolService) -> tuple[float, list[str]]:
    model = scripted(calls(call("first"), call("second")), final())
    started = time.perf_counter()
    await service.chat(model, [user()])
    elapsed = time.perf_counter() - started
    return elapsed, [m.text for m in model.tool_results(1)]


@pytest.mark.parametrize("make_tools", [async_tools, sync_tools], ids=["async", "sync-threads"])
async def test_one_rounds_calls_run_concurrently(make_tools: Any) -> None:
    overlap = Overlap()
    elapsed, results = await timed_round(ToolService().tools(make_tools(overlap)))
    assert elapsed < 2 * PAUSE * 0.85
    assert overlap.peak == 2
    assert results == ["first result", "second result"]


@pytest.mark.parametrize("make_tools", [async_tools, sync_tools], ids=["async", "sync-threads"])
@pytest.mark.parametrize(
    "options", [{"parallel": False}, {"max_concurrency": 1}], ids=["sequential", "cap-1"]
)
async def test_serialized_rounds_run_one_call_at_a_time(
    make_tools: Any, options: dict[str, Any]
) -> None:
    overlap = Overlap()
    elapsed, results = await timed_round(ToolService(**options).tools(make_tools(overlap)))
    assert elapsed >= 2 * PAUSE
    assert overlap.peak == 1
    assert overlap.finished == ["first", "second"]
    assert results == ["first result", "second result"]


async def test_a_concurrency_cap_limits_how_many_calls_overlap() -> None:
    overlap = Overlap()

    @tool
    async def work(n: int) -> int:
        overlap.enter()
        await asyncio.sleep(0.02)
        overlap.leave(str(n))
        return n

    service = ToolService(max_concurrency=2).tools([work])
    model = scripted(calls(*(call("work", {"n": n}) for n in range(6))), final())
    await service.chat(model, [user()])
    assert overlap.peak == 2
    assert [m.text for m in model.tool_results(1)] == ["0", "1", "2", "3", "4", "5"]


async def test_results_keep_request_order_when_later_calls_finish_first() -> None:
    @tool
    async def slow() -> str:
        await asyncio.sleep(0.05)
        return "slow"

    @tool
    async def fast() -> str:
        return "fast"

    model = scripted(calls(call("slow"), call("fast"), call("slow")), final())
    result = await ToolService().tools([slow, fast]).chat(model, [user()])
    assert [m.text for m in model.tool_results(1)] == ["slow", "fast", "slow"]
    assert [m.id for m in model.tool_results(1)] == ["call_0_0", "call_0_1", "call_0_2"]
    assert [e.request.id for e in result.tool_executions] == ["call_0_0", "call_0_1", "call_0_2"]


# -- timeouts --------------------------------------------------------------------------


@tool(timeout=0.05)
async def hangs() -> str:
    await asyncio.sleep(10)
    return "never"


@tool
async def hangs_without_own_timeout() -> str:
    await asyncio.sleep(10)
    return "never"


async def test_a_tool_past_its_timeout_becomes_an_execution_error_for_the_model() -> None:
    log = EventLog()
    model = scripted(calls(call("hangs")), final("it timed out"))
    result = await ToolService(observers=[log]).tools([hangs]).chat(model, [user()])
    [message] = model.tool_results(1)
    assert message.is_error is True
    assert message.text == "Tool 'hangs' timed out after 0.05 s"
    assert result.final_response.ai_message.text == "it timed out"
    [finished] = log.of_kind("tool_call_finished")
    assert finished.outcome == "timed_out"
    assert finished.error_type == "ToolTimeoutError"


async def test_the_service_default_timeout_applies_to_tools_without_their_own() -> None:
    log = EventLog()
    service = ToolService(default_timeout=0.05, observers=[log])
    model = scripted(calls(call("hangs_without_own_timeout")), final())
    await service.tools([hangs_without_own_timeout]).chat(model, [user()])
    assert model.tool_results(1)[0].text == (
        "Tool 'hangs_without_own_timeout' timed out after 0.05 s"
    )
    assert [e.outcome for e in log.of_kind("tool_call_finished")] == ["timed_out"]


async def test_a_tools_own_timeout_beats_the_service_default() -> None:
    @tool(timeout=0.05)
    async def quick_limit() -> str:
        await asyncio.sleep(10)
        return "never"

    service = ToolService(default_timeout=30).tools([quick_limit])
    model = scripted(calls(call("quick_limit")), final())
    await service.chat(model, [user()])
    assert "timed out after 0.05 s" in model.tool_results(1)[0].text


async def test_a_timeout_only_affects_its_own_call() -> None:
    @tool
    async def fine() -> str:
        return "fine"

    model = scripted(calls(call("hangs"), call("fine")), final())
    await ToolService().tools([hangs, fine]).chat(model, [user()])
    assert [(m.text, m.is_error) for m in model.tool_results(1)] == [
        ("Tool 'hangs' timed out after 0.05 s", True),
        ("fine", False),
    ]


# -- cancellation ----------------------------------------------------------------------


async def test_cancelling_the_run_cancels_the_running_tools() -> None:
    started = asyncio.Event()
    saw_cancel: list[str] = []
    log = EventLog()

    def blocking(name: str) -> Any:
        async def run() -> str:
            if name == "b":
                started.set()
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                saw_cancel.append(name)
                raise
            return "never"

        run.__name__ = name
        return tool(run)

    service = ToolService(observers=[log]).tools([blocking("a"), blocking("b")])
    model = scripted(calls(call("a"), call("b")), final())
    task = asyncio.create_task(service.chat(model, [user()]))
    await asyncio.wait_for(started.wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert sorted(saw_cancel) == ["a", "b"]
    assert model.calls == 1
    finished = log.of_kind("tool_call_finished")
    assert sorted((e.tool_name, e.outcome) for e in finished) == [
        ("a", "cancelled"),
        ("b", "cancelled"),
    ]
    last = log.events[-1]
    assert isinstance(last, ChatFailed)
    assert last.cancelled is True


async def test_cancelling_while_the_model_is_thinking_stops_the_loop() -> None:
    log = EventLog()
    model = RecordingModel(ScriptedChatModel([calls(call("a")), final()], latency=10))
    task = asyncio.create_task(ToolService(observers=[log]).chat(model, [user()]))
    while "model_request_sent" not in log.kinds():
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log.kinds()[-1] == "chat_failed"
    assert log.events[-1].cancelled is True
    assert "tool_call_started" not in log.kinds()
