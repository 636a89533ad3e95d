"""A server killed outright (SIGKILL, no shutdown) while an isolated tool spins: the
worker does not outlive it. (A worker killed idle sees its request pipe close; a busy
one never reads it, so the kernel ends it with the server: child.die_with.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .process_support import ROOT

SERVER = """
import asyncio, sys
from tools_app.engine import ToolExecutionRequest
from tools_app.engine.isolation import IsolatedFunctionExecutor, IsolationSettings
from tests.engine import isolated_tools

executor = IsolatedFunctionExecutor(isolated_tools.spins_after_saying,
                                    settings=IsolationSettings(workers=1, memory_mb=256))
request = ToolExecutionRequest(id="c1", name="spins_after_saying",
                               arguments='{"path": "%s"}' % sys.argv[1])
asyncio.run(executor.execute_with_result(request))
"""


def wait_for(condition: Callable[[], object], seconds: float) -> bool:
    """Poll `condition` until true or `seconds` pass: True if it became true."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


def running(pid: int) -> bool:
    """Alive and not a zombie waiting for a parent that never reaps it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_a_spinning_worker_ends_with_its_killed_server(tmp_path: Path) -> None:
    said = tmp_path / "worker.pid"
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(said)], cwd=ROOT)
    try:
        assert wait_for(lambda: said.exists() and said.read_text().strip(), 60), (
            "the tool never started")
        worker = int(said.read_text())
        assert running(worker)
    finally:
        os.kill(server.pid, signal.SIGKILL)
        server.wait()
    assert wait_for(lambda: not running(worker), 10), "the worker outlived its server"
