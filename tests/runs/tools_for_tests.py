"""Tools the run-lifecycle tests register next to the demo tools.

Every call is counted in `STATE`, so a test can prove a tool ran exactly as often as it
should (a completed call is never re-executed after a crash, an in-doubt idempotent one
is re-executed once). A test can also attach one-shot hooks that run when a tool is
entered or is about to return: they simulate a worker dying mid-call (`SimulatedCrash`),
request a cancel, or set the shutdown flag at a precise point of the run.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tools_app.engine import tool


class SimulatedCrash(BaseException):
    """Raised inside a tool or model call: nothing in the worker catches it, so the run is
    left exactly as a killed worker leaves it (status running, the call in flight)."""


Hook = Callable[[], Any]


@dataclass
class ToolState:
    calls: list[tuple[str, str]] = field(default_factory=list)
    on_enter: dict[str, deque[Hook]] = field(default_factory=lambda: defaultdict(deque))
    before_return: dict[str, deque[Hook]] = field(default_factory=lambda: defaultdict(deque))
    crash_every_time: set[str] = field(default_factory=set)
    cancelled: list[str] = field(default_factory=list)

    def count(self, tool_name: str, argument: str | None = None) -> int:
        return sum(1 for name, arg in self.calls
                   if name == tool_name and (argument is None or arg == argument))

    def reset(self) -> None:
        self.calls.clear()
        self.on_enter.clear()
        self.before_return.clear()
        self.crash_every_time.clear()
        self.cancelled.clear()


STATE = ToolState()


async def _run_hooks(hooks: dict[str, deque[Hook]], name: str) -> None:
    queue = hooks.get(name)
    if queue:
        result = queue.popleft()()
        if inspect.isawaitable(result):
            await result


async def _enter(name: str, argument: str) -> None:
    STATE.calls.append((name, argument))
    await _run_hooks(STATE.on_enter, name)
    if name in STATE.crash_every_time:
        raise SimulatedCrash(name)


@tool
async def transfer(to: str) -> str:
    """Send money (a side effect: NOT safe to run twice)."""
    await _enter("transfer", to)
    await _run_hooks(STATE.before_return, "transfer")
    return f"sent to {to}"


@tool(requires_approval=True)
async def delete_everything(scope: str) -> str:
    """Irreversible: must never run without a person's approval."""
    await _enter("delete_everything", scope)
    return f"deleted {scope}"


@tool(idempotent=True)
async def lookup(key: str) -> str:
    """Read a value (idempotent: safe to run again after a crash)."""
    await _enter("lookup", key)
    await _run_hooks(STATE.before_return, "lookup")
    return f"value of {key}"


@tool
async def wait_here(seconds: float) -> str:
    """Sleep, noting whether the sleep was cancelled."""
    await _enter("wait_here", str(seconds))
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        STATE.cancelled.append("wait_here")
        raise
    await _run_hooks(STATE.before_return, "wait_here")
    return f"waited {seconds:g} s"


@tool
def nul_echo(text: str) -> str:
    """Echo the text back with a NUL character around it."""
    STATE.calls.append(("nul_echo", text))
    return f"echo:\x00{text}\x00"


@tool
def big_output(size: int) -> str:
    """Return `size` ASCII characters."""
    STATE.calls.append(("big_output", str(size)))
    return "x" * size


@tool
def hostile_output(kind: str) -> Any:
    """Return a value that is hard to store or send: a lone surrogate, non-finite floats,
    or a structure nested deeper than the JSON encoder recurses."""
    STATE.calls.append(("hostile_output", kind))
    if kind == "surrogate":
        return "half a pair: \ud800 end"
    if kind == "nan":
        return {"x": float("nan"), "y": float("inf"), "z": -float("inf")}
    nested: Any = "bottom"
    for _ in range(5000):
        nested = [nested]
    return nested


@tool
def exits(how: str) -> str:
    """Raise SystemExit or KeyboardInterrupt, as a badly written tool might."""
    STATE.calls.append(("exits", how))
    if how == "keyboard":
        raise KeyboardInterrupt
    raise SystemExit(3)
