"""The loop of an isolated tool's worker process: receive a call, run it, reply.

Started by `pool` as a fresh interpreter (`python -c BOOTSTRAP ...`) with only the
allowed environment variables; it limits its own address space first, then serves calls
until its request pipe closes. Every reply is a tuple of plain values (never an
exception object, which may not unpickle in the parent):

    ("ok", text, jsonable_result)
    ("arguments", message, errors)       the tool raised ToolArgumentsError
    ("failed", failure_text, traceback)  the tool raised (or could not be loaded)
    ("out_of_memory", traceback)         MemoryError: the process exits after replying
"""

from __future__ import annotations

import asyncio
import ctypes
import inspect
import os
import resource
import signal
import sys
import traceback
from multiprocessing.connection import Connection
from typing import Any

from ..base_errors import ToolArgumentsError
from ..execution import TOOL_FAILURES, failure_text, result_text, to_jsonable

Reply = tuple[Any, ...]

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def limit_memory(limit_bytes: int) -> None:
    """Cap the address space: an allocation past it raises MemoryError in the tool."""
    if limit_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))


def run_call(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Reply:
    """Run one call and describe its outcome as a reply."""
    try:
        value = func(*args, **kwargs)
        if inspect.isawaitable(value):
            value = asyncio.run(_awaited(value))
        return ("ok", result_text(value), to_jsonable(value))
    except ToolArgumentsError as exc:
        return ("arguments", str(exc), exc.errors)
    except MemoryError:
        return ("out_of_memory", traceback.format_exc())
    except TOOL_FAILURES as exc:
        return ("failed", failure_text(exc), traceback.format_exc())


async def _awaited(value: Any) -> Any:
    return await value


def serve(requests: Connection, replies: Connection) -> None:
    """Answer calls until the parent closes the request pipe (or after a MemoryError,
    which may leave the interpreter short of memory for the next call)."""
    while True:
        try:
            func, args, kwargs = requests.recv()
        except EOFError:
            return
        except TOOL_FAILURES as exc:  # the tool's module did not import here
            reply: Reply = ("failed", f"The tool could not be loaded in its isolated "
                            f"process: {failure_text(exc)}", traceback.format_exc())
        else:
            reply = run_call(func, args, kwargs)
        replies.send(reply)
        if reply[0] == "out_of_memory":
            return


def die_with(parent_pid: int) -> None:
    """Be killed when the server process ends, even mid-call (a server killed with
    SIGKILL closes no pipe in time for a tool that never reads one). Linux only
    (PR_SET_PDEATHSIG, which follows the thread that started this process: the pool's
    threads live as long as the pool); elsewhere a worker ends at its next read."""
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the server ended before the line above
        os._exit(1)


def main(argv: list[str]) -> None:
    requests_fd, replies_fd, limit_bytes, parent_pid = (int(value) for value in argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server's Ctrl-C is the server's
    die_with(parent_pid)
    limit_memory(limit_bytes)
    serve(Connection(requests_fd, writable=False), Connection(replies_fd, readable=False))


if __name__ == "__main__":
    main(sys.argv[1:])
