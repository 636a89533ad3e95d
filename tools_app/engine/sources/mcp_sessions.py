"""MCP sessions: one per server per process, on one event loop of their own.

A session's streams and task groups belong to the loop that opened them, but runs come on
many loops, so sessions live on a dedicated loop in a daemon thread and every call is
marshalled to it (`asyncio.run_coroutine_threadsafe`). A session that may be broken (the
connection closed, the server crashed, a call timed out or was cancelled, an unreadable
answer) is retired and the next call starts a new one; a JSON-RPC error answer keeps it.

Timeouts and retirement are anyio cancel scopes, not `task.cancel()`: the SDK shields
its shutdown (which is what stops a stdio server) with anyio scopes, which a native
cancel can defeat. Sessions are closed at process exit, bounded in time.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import math
import threading
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import suppress
from typing import Any, TypeVar

import anyio
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, CallToolResult, Tool

from .mcp_client import McpCallError, McpServerConfig, Recorder, describe, open_client
from .mcp_listing import LIST_PAGES_CAP, McpListing, WireLog, list_everything

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Time a retired session gets to shut down before its owner task is cancelled (the
# SDK's own shutdown waits are bounded well below this).
SHUTDOWN_GRACE = 10.0


RESTARTED = "the session was restarted"


def _broken(name: str, fault: str | None, exc: BaseException | None = None) -> str:
    """What went wrong with a session that broke during a call."""
    if fault is not None:
        return f"MCP server {name!r} broke the protocol during the call: {fault}; {RESTARTED}"
    if exc is None:
        return (f"MCP server {name!r} closed the connection during the call (it may have "
                f"crashed); {RESTARTED}")
    return f"MCP server {name!r} failed during the call: {describe(exc)}; {RESTARTED}"


class _CallerCancelled(Exception):
    pass


class _Cancel:
    """A caller's cancellation, delivered on the sessions' loop to the anyio scope the
    work is in (and to the scopes it enters later)."""

    def __init__(self) -> None:
        self.cancelled = False
        self._scopes: list[anyio.CancelScope] = []

    def scope(self) -> anyio.CancelScope:
        scope = anyio.CancelScope()
        if self.cancelled:
            scope.cancel()
        self._scopes.append(scope)
        return scope

    def cancel(self) -> None:
        self.cancelled = True
        for scope in self._scopes:
            scope.cancel()


class _Connection:
    """One session, owned by one task on the sessions' loop (anyio scopes and task
    groups must be left by the task that entered them)."""

    def __init__(self, config: McpServerConfig, record: Recorder | None = None) -> None:
        self.config = config
        self._record = record
        self.ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self.retired = False
        self.fault: str | None = None
        self._stop = asyncio.Event()
        self._scope: anyio.CancelScope | None = None
        self.task = asyncio.ensure_future(self._own())

    async def _own(self) -> None:
        name = self.config.name
        if self._stop.is_set():  # retired before it began
            self.retired = True
            self._fail(McpCallError(f"MCP server {name!r}: the session was retired"))
            return
        try:
            with anyio.move_on_after(self.config.startup_timeout) as scope:
                self._scope = scope
                async with open_client(self.config, self._on_fault, self._on_end,
                                       self._record) as client:
                    scope.deadline = math.inf  # started: from now on only retire() ends it
                    self.ready.set_result(client)
                    await self._stop.wait()
            if scope.cancelled_caught and not self.ready.done():
                self._fail(McpCallError(
                    f"MCP server {name!r} did not start within "
                    f"{self.config.startup_timeout:g} s"))
        except Exception as exc:
            if self.ready.done():  # it ran, then broke (the server died, say)
                logger.info("MCP server %r: session ended: %s", name, describe(exc))
            self._fail(McpCallError(f"MCP server {name!r} could not be started: "
                                    f"{describe(exc)}"))
        finally:
            self.retired = True
            self._fail(McpCallError(f"MCP server {name!r}: the session ended"))

    def _on_fault(self, exc: Exception) -> None:
        # The stdio spec allows nothing but JSON-RPC messages on a server's stdout: a
        # server that writes anything else is broken, and its calls would only time
        # out. Retire it now; the calls in flight fail saying why. Before the session
        # is up, a banner some servers print is only logged (the SDK skips the line).
        if not self.ready.done():
            logger.info("MCP server %r wrote output that is not JSON-RPC while starting",
                        self.config.name)
            return
        if self.fault is None:
            self.fault = ("it wrote output that is not a JSON-RPC message "
                          f"({type(exc).__name__})")
            logger.warning("MCP server %r: %s; restarting it", self.config.name, self.fault)
        self.retire()

    def _on_end(self) -> None:
        # The server's side ended (its process exited, its HTTP session closed): no
        # call can reach it any more. Calls in flight fail (CONNECTION_CLOSED); the
        # next call starts a new session.
        if not self.retired:
            logger.info("MCP server %r: the connection ended", self.config.name)
            self.retire()

    def _fail(self, error: McpCallError) -> None:
        if not self.ready.done():
            self.ready.set_exception(error)
            self.ready.exception()  # retrieved: no "never retrieved" warning if unwaited

    def retire(self) -> None:
        """End this session (from any task on the sessions' loop); bounded in time."""
        if self.retired and self.task.done():
            return
        self.retired = True
        self._stop.set()
        if self._scope is not None:
            # Still starting: stop now. Started: the owner leaves `async with` on the
            # stop event, and this deadline only bounds a stuck shutdown.
            starting = not self.ready.done()
            self._scope.deadline = (anyio.current_time() if starting
                                    else anyio.current_time() + SHUTDOWN_GRACE)


class McpSessions:
    """The process's MCP sessions, on their own event loop (see the module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # Touched on the sessions' loop only: the live sessions, and the retired ones
        # still shutting down (waited for at close, or their processes would outlive us).
        self._connections: dict[str, _Connection] = {}
        self._closing: set[_Connection] = set()

    # -- callable from any thread or loop ------------------------------------------

    async def call_tool(self, config: McpServerConfig, tool: str,
                        arguments: dict[str, Any]) -> CallToolResult:
        """Call `tool` on the server's session; McpCallError if it failed."""
        return await self._submit(
            lambda cancel: self._call_tool(config, tool, arguments, cancel))

    async def list_tools(self, config: McpServerConfig) -> list[Tool]:
        """The server's tools, through a session of its own, closed afterwards."""
        return await self._submit(lambda cancel: self._list_tools(config, cancel))

    def inspect_blocking(self, config: McpServerConfig, log: WireLog) -> McpListing:
        """Connect and list the server's tools, resources and prompts through a session
        of its own, closed afterwards; every message of it goes into `log` (kept when
        the listing fails, to show how far it got). For synchronous callers (a sync)."""
        future = asyncio.run_coroutine_threadsafe(self._inspect(config, log), self._start())
        try:
            return future.result(config.startup_timeout + config.call_timeout
                                 + SHUTDOWN_GRACE)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise McpCallError(f"MCP server {config.name!r} did not list what it offers "
                               f"in time") from None

    def session_count(self) -> int:
        """Live sessions (for tests and the curious)."""
        if self._loop is None:
            return 0
        future = asyncio.run_coroutine_threadsafe(self._count(), self._loop)
        return future.result(5)

    def close(self, timeout: float = SHUTDOWN_GRACE + 5) -> None:
        """Close every session and stop the loop (at process exit; tests)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        future = asyncio.run_coroutine_threadsafe(self._close_all(), loop)
        try:
            future.result(timeout)
        except Exception:  # a timeout, or the loop already gone
            logger.warning("MCP sessions were not all closed within %g s", timeout)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)

    # -- the sessions' loop ----------------------------------------------------------

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=_run_forever, args=(loop,),
                                          name="agentforge-mcp", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    async def _submit(self, work: Callable[[_Cancel], Coroutine[Any, Any, T]]) -> T:
        """Run `work` on the sessions' loop and wait for it. A caller cancelled (a tool
        timeout, a cancelled run) cancels the work through an anyio scope, never with
        a native `task.cancel()` inside the SDK, and waits (bounded) for it to wind
        down, so the session it retires is gone before the caller's next call."""
        loop = self._start()
        cancel = _Cancel()
        future = asyncio.run_coroutine_threadsafe(work(cancel), loop)
        waiting = asyncio.wrap_future(future)
        try:
            return await asyncio.shield(waiting)
        except asyncio.CancelledError:
            loop.call_soon_threadsafe(cancel.cancel)
            with suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(waiting), SHUTDOWN_GRACE)
            raise

    async def _connection(self, config: McpServerConfig) -> tuple[_Connection, Client]:
        current = self._connections.get(config.name)
        if current is not None and (current.retired or current.config != config):
            self._retire(current)
            current = None
        if current is None:
            current = self._connections[config.name] = _Connection(config)
        try:
            return current, await asyncio.shield(current.ready)
        except McpCallError:
            self._forget(current)
            raise

    def _forget(self, connection: _Connection) -> None:
        self._retire(connection)
        if self._connections.get(connection.config.name) is connection:
            del self._connections[connection.config.name]

    async def _call_tool(self, config: McpServerConfig, tool: str,
                         arguments: dict[str, Any], cancel: _Cancel) -> CallToolResult:
        name = config.name
        with cancel.scope():
            connection, client = await self._connection(config)
        if cancel.cancelled:
            raise McpCallError(f"the call to MCP server {name!r} was cancelled")
        try:
            with cancel.scope(), anyio.fail_after(config.call_timeout):
                result = await client.call_tool(tool, arguments)
            if cancel.cancelled:
                raise _CallerCancelled
            return result
        except TimeoutError:
            self._forget(connection)
            raise McpCallError(f"MCP server {name!r} did not answer within "
                               f"{config.call_timeout:g} s; {RESTARTED}") from None
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise McpCallError(f"MCP server {name!r} refused the call: "
                                   f"{describe(exc)}") from exc
            self._forget(connection)
            raise McpCallError(_broken(name, connection.fault)) from exc
        except _CallerCancelled:
            self._forget(connection)  # the server may still be busy with it
            raise McpCallError(f"the call to MCP server {name!r} was cancelled; "
                               f"{RESTARTED}") from None
        except Exception as exc:
            self._forget(connection)
            raise McpCallError(_broken(name, connection.fault, exc)) from exc

    async def _list_tools(self, config: McpServerConfig, cancel: _Cancel) -> list[Tool]:
        connection = _Connection(config)
        try:
            with cancel.scope():
                client = await asyncio.shield(connection.ready)
            if cancel.cancelled:
                raise McpCallError(f"listing the tools of {config.name!r} was cancelled")
            tools: list[Tool] = []
            cursor: str | None = None
            with cancel.scope(), anyio.fail_after(config.call_timeout):
                for _ in range(LIST_PAGES_CAP):
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
            if cancel.cancelled:
                raise McpCallError(f"listing the tools of {config.name!r} was cancelled")
            return tools
        except TimeoutError:
            raise McpCallError(f"MCP server {config.name!r} did not list its tools within "
                               f"{config.call_timeout:g} s") from None
        except MCPError as exc:
            raise McpCallError(f"MCP server {config.name!r} refused to list its tools: "
                               f"{describe(exc)}") from exc
        finally:
            connection.retire()
            await _bounded(connection.task)

    async def _inspect(self, config: McpServerConfig, log: WireLog) -> McpListing:
        connection = _Connection(config, record=log.record)
        try:
            client = await asyncio.shield(connection.ready)
            with anyio.fail_after(config.call_timeout):
                return await list_everything(client)
        except TimeoutError:
            raise McpCallError(f"MCP server {config.name!r} did not list what it offers "
                               f"within {config.call_timeout:g} s") from None
        except MCPError as exc:
            raise McpCallError(f"MCP server {config.name!r} refused a listing: "
                               f"{describe(exc)}") from exc
        finally:
            connection.retire()
            await _bounded(connection.task)

    def _retire(self, connection: _Connection) -> None:
        connection.retire()
        if not connection.task.done():
            self._closing.add(connection)
            connection.task.add_done_callback(lambda _: self._closing.discard(connection))

    async def _count(self) -> int:
        return sum(1 for c in self._connections.values() if not c.retired)

    async def _close_all(self) -> None:
        connections = [*self._connections.values(), *self._closing]
        self._connections.clear()
        for connection in connections:
            self._retire(connection)
        await asyncio.gather(*(_bounded(c.task) for c in connections))


async def _bounded(task: Awaitable[None]) -> None:
    """Wait for a retired session's owner to finish, bounded (what it hit is logged by
    the owner; one that does not finish in time goes with the process)."""
    try:
        await asyncio.wait_for(asyncio.shield(task), SHUTDOWN_GRACE + 2)
    except TimeoutError:
        logger.warning("an MCP session did not close within %g s", SHUTDOWN_GRACE + 2)


def _run_forever(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.close()


MCP_SESSIONS = McpSessions()
"""The process's sessions (every run's MCP executors share them)."""

atexit.register(MCP_SESSIONS.close)
