"""Counting this test process's child processes (as psutil's children() would)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def child_pids() -> set[int]:
    """The ids of the processes whose parent is this process (any of its threads).

    Read from every process's /proc/<pid>/stat rather than from each thread's children
    list: a thread that ends while the list is read takes its task directory with it."""
    me = os.getpid()
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _parent_of(entry) == me:
            found.add(int(entry.name))
    return found


def _parent_of(process: Path) -> int | None:
    """The parent's id from /proc/<pid>/stat ("pid (comm) state ppid ..."; the command
    name may hold spaces and parentheses, so fields are read after its last ")")."""
    try:
        stat = (process / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None  # it ended meanwhile
    return int(stat.rsplit(")", 1)[1].split()[1])
