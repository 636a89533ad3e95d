"""The MCP servers the tests talk to: the real time server (stdio), the misbehaving
server of these tests (stdio or HTTP, in a subprocess), and their configurations."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tools_app.engine.outbound import OutboundPolicy
from tools_app.engine.sources.mcp import McpServerConfig

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
MISBEHAVING = "tests.mcp.misbehaving_server"
LOOPBACK = OutboundPolicy(allow_loopback=True)
# Bounds, never durations: a healthy server answers far sooner.
START_BOUND = 30.0
CALL_BOUND = 30.0


def time_server(name: str = "time") -> McpServerConfig:
    return McpServerConfig(name=name, transport="stdio", command=PYTHON,
                           args=("-m", "mcp_server_time", "--local-timezone", "UTC"),
                           startup_timeout=START_BOUND, call_timeout=CALL_BOUND)


def misbehaving(*extra: str, name: str = "bad", call_timeout: float = CALL_BOUND,
                startup_timeout: float = START_BOUND,
                env: tuple[tuple[str, str], ...] = ()) -> McpServerConfig:
    # The child's environment is minimal: it finds the tests' package by its cwd-less
    # module path only through PYTHONPATH, which the configuration names.
    return McpServerConfig(name=name, transport="stdio", command=PYTHON,
                           args=("-m", MISBEHAVING, *extra),
                           env=(("PYTHONPATH", str(ROOT)), *env),
                           startup_timeout=startup_timeout, call_timeout=call_timeout)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def http_server(port: int | None = None) -> Iterator[str]:
    """The misbehaving server on streamable HTTP on loopback; yields its MCP URL."""
    port = port or free_port()
    process = subprocess.Popen(
        [PYTHON, "-m", MISBEHAVING, "--http", str(port)], cwd=ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(process, port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _wait_listening(process: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + START_BOUND
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the MCP HTTP server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the MCP HTTP server did not listen on {port} in {START_BOUND} s")
