"""Counting this test process's child processes (as psutil's children() would)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def child_pids() -> set[int]:
    """The ids of this process's child processes, from every thread's children list."""
    found: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        found.update(int(pid) for pid in (task / "children").read_text().split())
    return found
