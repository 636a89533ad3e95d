"""Tools the scale-out tests register; they run inside `db_worker` subprocesses.

Each call appends one line ("<tool> <argument>") to a counter file in the directory
named by AGENTFORGE_TEST_COUNTER_DIR (set by the tests in the workers' environment)
as soon as the tool is entered, before it sleeps. So the file tells how many times a
tool really started, even when the worker running it was SIGKILLed mid-call (or was
killed by the tool itself: `crash_worker`).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from tools_app.engine import tool

COUNTER_DIR_ENV = "AGENTFORGE_TEST_COUNTER_DIR"


def counter_file(directory: str | Path, tool_name: str) -> Path:
    return Path(directory) / f"{tool_name}.log"


def _count(tool_name: str, argument: str) -> None:
    directory = os.environ.get(COUNTER_DIR_ENV)
    if not directory:
        raise RuntimeError(f"{COUNTER_DIR_ENV} is not set in the worker's environment")
    with counter_file(directory, tool_name).open("a", encoding="utf-8") as handle:
        handle.write(f"{tool_name} {argument}\n")


@tool
async def slow_transfer(to: str, seconds: float = 0.0) -> str:
    """Send money slowly (a side effect: NOT safe to run twice)."""
    _count("slow_transfer", to)
    await asyncio.sleep(seconds)
    return f"sent to {to}"


@tool(idempotent=True)
async def slow_lookup(key: str, seconds: float = 0.0) -> str:
    """Read a value slowly (idempotent: safe to run again after a crash)."""
    _count("slow_lookup", key)
    await asyncio.sleep(seconds)
    return f"value of {key}"


@tool
async def tally(tag: str, seconds: float = 0.0) -> str:
    """Count one execution for `tag`, after an optional pause."""
    _count("tally", tag)
    await asyncio.sleep(seconds)
    return f"tallied {tag}"


@tool(idempotent=True)
async def crash_worker(reason: str = "poison") -> str:
    """Kill the worker process running it, every time (a poison run). Idempotent, so a
    resumed run executes it again and kills that worker too."""
    _count("crash_worker", reason)
    os._exit(3)
