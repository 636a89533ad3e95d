"""Tools the isolation tests run in worker processes (importable there by module path):
well-behaved ones and the three runaways."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel

from tools_app.engine import ToolArgumentsError, tool


class Point(BaseModel):
    x: int
    y: int


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def moved(point: Point, by: int = 1) -> Point:
    """A point moved along both axes."""
    return Point(x=point.x + by, y=point.y + by)


@tool
async def shout(text: str) -> str:
    """The text in capitals (an async tool)."""
    return text.upper()


@tool
def nothing() -> None:
    """Returns nothing."""


@tool
def fails(reason: str) -> str:
    """Raises ValueError(reason)."""
    raise ValueError(reason)


@tool
def refuses_arguments(value: str) -> str:
    """Raises ToolArgumentsError from inside the tool."""
    raise ToolArgumentsError(f"value {value!r} is not one I take", tool_name="refuses_arguments")


@tool
def environment(name: str) -> dict[str, object]:
    """Whether variable `name` is in this process's environment, from os.environ and
    from the environment the process was started with."""
    initial = Path(f"/proc/{os.getpid()}/environ").read_bytes().split(b"\0")
    return {"in_os_environ": name in os.environ,
            "in_initial_environ": any(entry.startswith(f"{name}=".encode())
                                      for entry in initial),
            "names": sorted(os.environ)}


@tool
def process_id() -> int:
    """The id of the process the tool runs in."""
    return os.getpid()


@tool
def spins() -> str:
    """Never returns: a loop that never waits."""
    while True:
        pass


@tool
def hoards_memory() -> str:
    """Allocates without bound."""
    hoard = []
    while True:
        hoard.append(bytearray(16 * 1024 * 1024))


@tool
def exits() -> str:
    """Ends its process at once with exit code 3."""
    os._exit(3)


@tool(isolated=True, timeout=5)
def sandboxed_sum(numbers: list[int]) -> int:
    """The sum of the numbers, declared isolated in code."""
    return sum(numbers)


@tool
def spins_after_saying(path: str) -> str:
    """Writes its process id to `path`, then never returns."""
    Path(path).write_text(str(os.getpid()))
    while True:
        pass
