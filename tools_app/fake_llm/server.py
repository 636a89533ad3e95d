"""Running the fake provider under uvicorn: in the foreground (CLI, management command)
or in a background thread (tests, benchmarks)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import uvicorn

from .app import FakeLLMApp
from .script import ScriptSet, load_script_set

LOOPBACK = "127.0.0.1"


def build_app(script_path: str | Path | None = None, *, record_limit: int = 10_000,
              strict: bool = True) -> FakeLLMApp:
    """The app with its start-up scripts read (once) from `script_path`, if given.
    `strict=False` accepts the malformed requests the real APIs refuse."""
    scripts = load_script_set(script_path) if script_path else ScriptSet()
    return FakeLLMApp(scripts, record_limit=record_limit, strict=strict)


def _config(app: FakeLLMApp, host: str, port: int, log_level: str) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="off",
        http="httptools",  # a C parser: the pure-Python h11 would be most of its CPU
        log_level=log_level,
        access_log=False,
        proxy_headers=False,
        server_header=False,
        # Open streams must not hold a shutdown forever.
        timeout_graceful_shutdown=2,
    )


def base_urls(host: str, port: int) -> dict[str, str]:
    """What users paste into their provider settings."""
    root = f"http://{host}:{port}"
    return {"openai": f"{root}/v1", "openai_responses": f"{root}/v1", "anthropic": root,
            "gemini": f"{root}/v1beta"}


def banner(host: str, port: int) -> str:
    urls = base_urls(host, port)
    return (f"fake LLM server listening on http://{host}:{port}  "
            f"(OpenAI base_url {urls['openai']}, Anthropic {urls['anthropic']}, "
            f"Gemini {urls['gemini']})")


def serve(host: str = LOOPBACK, port: int = 8765, script_path: str | Path | None = None, *,
          record_limit: int = 10_000, log_level: str = "warning", strict: bool = True,
          announce: Callable[[str], None] = print) -> None:
    """Serve in the foreground until interrupted; announces the bound address first
    (so `--port 0` tells which port it got)."""
    app = build_app(script_path, record_limit=record_limit, strict=strict)
    server = uvicorn.Server(_config(app, host, port, log_level))
    asyncio.run(_serve_announcing(server, host, announce))


async def _serve_announcing(server: uvicorn.Server, host: str,
                            announce: Callable[[str], None]) -> None:
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():
        await asyncio.sleep(0.01)
    if server.started:
        announce(banner(host, _bound_port(server)))
    await task


def _bound_port(server: uvicorn.Server) -> int:
    return int(server.servers[0].sockets[0].getsockname()[1])


class BackgroundServer:
    """The fake provider on a loopback port in a daemon thread; use as a context manager.

    `port=0` picks a free port; `url` / `base_urls()` tell where it listens. `stop()`
    is bounded in time and safe to call twice.
    """

    def __init__(self, app: FakeLLMApp | None = None, *, host: str = LOOPBACK, port: int = 0,
                 log_level: str = "warning") -> None:
        self.app = app or FakeLLMApp()
        self.host = host
        self._server = uvicorn.Server(_config(self.app, host, port, log_level))
        self._thread = threading.Thread(target=self._server.run, name="fake-llm-server",
                                        daemon=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def base_urls(self) -> dict[str, str]:
        return base_urls(self.host, self.port)

    def start(self, timeout: float = 10.0) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the fake LLM server did not start within {timeout} s")
            time.sleep(0.01)
        self.port = _bound_port(self._server)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._thread.is_alive():
            # Graceful shutdown is stuck on a connection: cut everything.
            self._server.force_exit = True
            self._thread.join(timeout)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
