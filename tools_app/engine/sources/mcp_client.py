"""One connection to an MCP server: how to reach it (`McpServerConfig`, secrets kept out
of its repr), the SDK's client opened over stdio or streamable HTTP with the server's end
and transport faults reported, and an error described in one line. Keeping sessions
alive across calls and loops is mcp_sessions.py's job."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import Implementation

from ..outbound import OutboundPolicy
from .mcp_http import guarded_http_client

DEFAULT_STARTUP_TIMEOUT = 30.0
DEFAULT_CALL_TIMEOUT = 60.0
CLIENT_INFO = Implementation(name="agentforge-web", version="1")


@dataclass(frozen=True)
class McpServerConfig:
    """How to reach one MCP server, with every `env:` reference already resolved.

    `env` and `headers` may hold secrets: they are left out of the repr, and nothing
    here logs them. Two configs that differ in anything are two sessions."""

    name: str
    transport: Literal["stdio", "http"]
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    url: str = ""
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    call_timeout: float = DEFAULT_CALL_TIMEOUT
    outbound: OutboundPolicy = field(default_factory=OutboundPolicy)


class McpCallError(Exception):
    """A call to an MCP server failed; the message says how, for the model and the
    timeline (never with the server's environment or headers)."""


FaultHandler = Callable[[Exception], None]
Recorder = Callable[[Literal["sent", "received"], Any], None]


@asynccontextmanager
async def open_client(config: McpServerConfig, on_fault: FaultHandler | None = None,
                      on_end: Callable[[], None] | None = None,
                      record: Recorder | None = None) -> AsyncIterator[Client]:
    """A connected, initialised MCP client for `config` (no response cache: a sync
    must see the server's current tools). `on_fault` hears of transport faults, such
    as a stdout line that is not JSON-RPC; `on_end`, of the server's side ending (its
    process exited, say); `record`, of every message sent and received (a sync's
    wire log: mcp_listing.WireLog)."""
    async with AsyncExitStack() as stack:
        server: Any
        if config.transport == "stdio":
            # The child gets the SDK's minimal environment (HOME, LOGNAME, PATH, SHELL,
            # TERM, USER) plus what the server's configuration names: never the
            # worker's own variables, which hold the provider keys.
            parameters = StdioServerParameters(
                command=config.command, args=list(config.args), env=dict(config.env))
            # The server's log goes to the worker's own stderr (pytest's capture has no
            # file descriptor to give a child).
            server = stdio_client(parameters, errlog=sys.__stderr__ or sys.stderr)
        else:
            http = await stack.enter_async_context(guarded_http_client(
                config.outbound, dict(config.headers), read_timeout=config.call_timeout))
            server = streamable_http_client(config.url, http_client=http)
        client = Client(_watch_end(server, on_end, record), cache=None, client_info=CLIENT_INFO,
                        message_handler=_fault_listener(on_fault))
        yield await stack.enter_async_context(client)


@asynccontextmanager
async def _watch_end(transport: Any, on_end: Callable[[], None] | None,
                     record: Recorder | None = None) -> AsyncIterator[Any]:
    """`transport`, with its read stream telling `on_end` when it ends, and both
    streams telling `record` of each message."""
    async with transport as (read_stream, write_stream):
        if on_end or record:
            read_stream = _EndWatcher(read_stream, on_end or _nothing, record)
        if record:
            write_stream = _RecordingWriter(write_stream, record)
        yield read_stream, write_stream


def _nothing() -> None:
    pass


class _RecordingWriter:
    """A transport's write stream that tells `record` of each message it sends."""

    def __init__(self, inner: Any, record: Recorder) -> None:
        self._inner = inner
        self._record = record

    async def send(self, message: Any) -> None:
        self._record("sent", message)
        await self._inner.send(message)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _RecordingWriter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _EndWatcher:
    """A transport's read stream (the SDK's ReadStream protocol) that reports its end:
    a server that died between calls is then replaced before the next call, instead of
    failing it. With `record`, it also tells of each message received."""

    def __init__(self, inner: Any, on_end: Callable[[], None],
                 record: Recorder | None = None) -> None:
        self._inner = inner
        self._on_end = on_end
        self._record = record

    async def receive(self) -> Any:
        try:
            message = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise
        if self._record is not None:
            self._record("received", message)
        return message

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _EndWatcher:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _EndWatcher:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _fault_listener(on_fault: FaultHandler | None) -> Any:
    async def listen(message: Any) -> None:
        if isinstance(message, Exception) and on_fault is not None:
            on_fault(message)

    return listen


def describe(exc: BaseException) -> str:
    """An exception as one line; a group of one (anyio task groups) as its member."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return exc.message or f"error {exc.code}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
