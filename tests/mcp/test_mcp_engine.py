"""The MCP executor against real servers: the time server, and a server that
misbehaves (hangs, crashes mid-call, writes garbage on stdout, starts slowly). Each
failure is a clear ToolExecutionError and the next call works on a new session."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Coroutine, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpcore2
import pytest

from tools_app.engine import (
    RegisteredTool,
    ScriptedChatModel,
    ToolExecutionError,
    ToolExecutionRequest,
    ToolService,
    ToolSpecification,
    UserMessage,
)
from tools_app.engine.outbound import OutboundPolicy
from tools_app.engine.sources.mcp import (
    McpServerConfig,
    McpSessions,
    McpToolExecutor,
    tool_definitions,
)
from tools_app.engine.sources.mcp_http import GuardedBackend

from .servers import CALL_BOUND, LOOPBACK, http_server, misbehaving, time_server


@pytest.fixture
def sessions() -> Iterator[McpSessions]:
    host = McpSessions()
    yield host
    host.close()


def request(name: str, arguments: dict[str, object] | None = None) -> ToolExecutionRequest:
    return ToolExecutionRequest(id="call-1", name=name, arguments=json.dumps(arguments or {}))


def run[T](coroutine: Coroutine[Any, Any, T]) -> T:
    """In a new event loop each time, as db_worker runs each run."""
    return asyncio.run(coroutine)


async def call(sessions: McpSessions, config: McpServerConfig, tool: str,
               arguments: dict[str, object] | None = None, **options: int) -> str:
    executor = McpToolExecutor(config, tool, sessions=sessions, **options)
    return (await executor.execute_with_result(request(tool, arguments))).text


async def failure(sessions: McpSessions, config: McpServerConfig, tool: str) -> str:
    with pytest.raises(ToolExecutionError) as caught:
        await call(sessions, config, tool)
    return str(caught.value)


# -- the real server ---------------------------------------------------------------------

def test_the_time_server_tells_the_time(sessions: McpSessions) -> None:
    executor = McpToolExecutor(time_server(), "get_current_time", sessions=sessions)
    result = asyncio.run(executor.execute_with_result(
        request("get_current_time", {"timezone": "Europe/Paris"})))
    assert json.loads(result.text)["timezone"] == "Europe/Paris"
    assert result.result["structured_content"]["timezone"] == "Europe/Paris"
    assert not result.is_error


def test_an_error_result_is_an_execution_error_with_the_servers_words(
        sessions: McpSessions) -> None:
    executor = McpToolExecutor(time_server(), "get_current_time", sessions=sessions)
    with pytest.raises(ToolExecutionError, match="Invalid timezone") as caught:
        asyncio.run(executor.execute_with_result(
            request("get_current_time", {"timezone": "Nowhere/Atlantis"})))
    assert "get_current_time" in str(caught.value)
    assert "'time'" in str(caught.value)


def test_listing_reads_the_annotations(sessions: McpSessions) -> None:
    tools = {t.name: t for t in tool_definitions(run(sessions.list_tools(time_server())))}
    current = tools["get_current_time"]
    assert current.annotations == {"read_only_hint": True, "destructive_hint": False,
                                   "idempotent_hint": True, "open_world_hint": False}
    assert current.idempotent
    assert current.input_schema["required"] == ["timezone"]
    assert sessions.session_count() == 0  # a listing's session is closed after it


# -- one session per process -------------------------------------------------------------

def test_one_session_serves_every_call_from_every_event_loop(sessions: McpSessions) -> None:
    config = misbehaving()
    # Two asyncio.run: two event loops, as db_worker gives each run its own.
    first = run(call(sessions, config, "pid"))
    second = run(call(sessions, config, "pid"))
    assert first == second
    assert sessions.session_count() == 1


def test_a_changed_configuration_gets_a_new_session(sessions: McpSessions) -> None:
    first = run(call(sessions, misbehaving(), "pid"))
    second = run(call(sessions, misbehaving("--banner"), "pid"))
    assert first != second
    assert sessions.session_count() == 1


# -- misbehaving servers -----------------------------------------------------------------

async def _fails_then_recovers(sessions: McpSessions, config: McpServerConfig,
                               tool: str) -> tuple[str, str, str]:
    before = await call(sessions, config, "pid")
    error = await failure(sessions, config, tool)
    after = await call(sessions, config, "pid")
    return before, error, after


def test_a_crash_mid_call_is_a_tool_error_and_the_session_restarts(
        sessions: McpSessions) -> None:
    before, error, after = run(_fails_then_recovers(sessions, misbehaving(), "crash"))
    assert "'bad'" in error
    assert "closed the connection" in error
    assert error.endswith("; the session was restarted")
    assert before != after


def test_garbage_on_stdout_is_a_tool_error_and_the_session_restarts(
        sessions: McpSessions) -> None:
    before, error, after = run(_fails_then_recovers(sessions, misbehaving(), "garbage"))
    assert error == ("MCP server 'bad' broke the protocol during the call: it wrote output "
                     "that is not a JSON-RPC message (ValidationError); the session was "
                     "restarted")
    assert "<script>" not in error  # what it wrote is not repeated
    assert before != after


def test_a_server_that_died_between_calls_is_replaced_before_the_next_call(
        sessions: McpSessions) -> None:
    config = misbehaving()
    first = run(call(sessions, config, "exit_soon"))
    # Its exit reaches the session as the end of its stream: the session is retired.
    deadline = time.monotonic() + CALL_BOUND
    while sessions.session_count():
        assert time.monotonic() < deadline, "the session never saw the server exit"
        time.sleep(0.02)
    second = run(call(sessions, config, "pid"))  # no error: a new session
    assert second != first


def test_a_hung_server_times_out_and_the_session_restarts(sessions: McpSessions) -> None:
    config = misbehaving(call_timeout=1.0)
    before, error, after = run(_fails_then_recovers(sessions, config, "hang"))
    assert error == "MCP server 'bad' did not answer within 1 s; the session was restarted"
    assert before != after


def test_the_tools_own_timeout_cancels_the_call_and_the_session_restarts(
        sessions: McpSessions) -> None:
    config = misbehaving()
    service = ToolService(default_timeout=0.5)
    service.register(RegisteredTool(
        specification=ToolSpecification(name="hang", description="",
                                        parameters={"type": "object", "properties": {}}),
        executor=McpToolExecutor(config, "hang", sessions=sessions)))
    model = ScriptedChatModel([{"tool_calls": [{"name": "hang", "arguments": {}}]},
                               {"text": "{last_results}"}])

    async def scenario() -> tuple[str, str, str]:
        before = await call(sessions, config, "pid")
        result = await service.chat(model, [UserMessage(text="go")])
        after = await call(sessions, config, "pid")
        return before, result.final_response.ai_message.text or "", after

    before, text, after = run(scenario())
    assert "timed out after 0.5 s" in text
    assert before != after


def test_a_slow_start_past_the_startup_timeout_is_a_tool_error(
        sessions: McpSessions) -> None:
    slow = misbehaving("--start-delay", "3600", startup_timeout=0.5)
    error = run(failure(sessions, slow, "pid"))
    assert error == "MCP server 'bad' did not start within 0.5 s"
    # The next call starts it again (and a server that starts in time works).
    assert run(call(sessions, misbehaving("--start-delay", "0.2"), "echo", {"text": "hi"})) == "hi"


def test_a_server_that_cannot_start_is_a_tool_error(sessions: McpSessions) -> None:
    missing = McpServerConfig(name="ghost", transport="stdio",
                              command="/nonexistent/mcp-server")
    error = run(failure(sessions, missing, "anything"))
    assert error.startswith("MCP server 'ghost' could not be started: ")
    assert "No such file" in error


def test_a_banner_before_the_handshake_is_tolerated(sessions: McpSessions) -> None:
    assert run(call(sessions, misbehaving("--banner"), "echo", {"text": "hi"})) == "hi"


# -- content -------------------------------------------------------------------------------

def test_an_image_reaches_the_model_as_a_description_and_the_audit_without_bytes(
        sessions: McpSessions) -> None:
    executor = McpToolExecutor(misbehaving(), "image", sessions=sessions)
    result = run(executor.execute_with_result(request("image", {"size": 200_000})))
    assert result.text == "a picture:\n[image/png, 200000 bytes]"
    assert result.result["content"][1] == {"type": "image", "mime_type": "image/png",
                                           "bytes": 200_000}
    assert len(json.dumps(result.result)) < 1000


def test_a_huge_text_is_capped(sessions: McpSessions) -> None:
    text = run(call(sessions, misbehaving(), "huge", {"size": 5000}, max_text_bytes=1000))
    assert text == "x" * 1000 + "[truncated 4000 bytes]"


# -- the child's environment -----------------------------------------------------------------

def test_the_child_gets_only_its_configured_environment(
        sessions: McpSessions, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-parent-secret")
    config = misbehaving(env=(("GIVEN", "given-value"),))
    assert run(call(sessions, config, "environment", {"name": "OPENAI_API_KEY"})) == "(unset)"
    assert run(call(sessions, config, "environment", {"name": "GIVEN"})) == "given-value"


def test_the_configuration_repr_keeps_env_and_headers_out() -> None:
    config = replace(misbehaving(env=(("TOKEN", "secret-value"),)),
                     headers=(("Authorization", "Bearer secret-header"),))
    assert "secret" not in repr(config)


# -- streamable HTTP -------------------------------------------------------------------------

def test_an_http_server_on_loopback_is_called_when_loopback_is_allowed(
        sessions: McpSessions) -> None:
    with http_server() as url:
        config = McpServerConfig(name="web", transport="http", url=url, outbound=LOOPBACK,
                                 headers=(("X-Team", "docs"),))
        assert run(call(sessions, config, "echo", {"text": "over http"})) == "over http"
        hints = {t.name: t.annotations for t in tool_definitions(
            run(sessions.list_tools(config)))}
        assert hints["echo"] == {"read_only_hint": True, "idempotent_hint": True}


def test_an_http_server_on_a_refused_address_is_never_connected(
        sessions: McpSessions) -> None:
    with http_server() as url:
        config = McpServerConfig(name="web", transport="http", url=url,
                                 outbound=OutboundPolicy())
        error = run(failure(sessions, config, "echo"))
    assert error.startswith("MCP server 'web' could not be started: ")
    assert "refused to connect to 127.0.0.1 (127.0.0.1: loopback)" in error


def test_an_http_server_that_goes_away_is_a_tool_error_and_the_next_call_reconnects(
        sessions: McpSessions) -> None:
    with http_server() as url:
        config = McpServerConfig(name="web", transport="http", url=url, outbound=LOOPBACK)
        assert run(call(sessions, config, "echo", {"text": "one"})) == "one"
    error = run(failure(sessions, config, "echo"))
    assert "'web'" in error
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with http_server(port) as again:
        assert again == url
        assert run(call(sessions, config, "echo", {"text": "two"})) == "two"


# -- cleaning up -----------------------------------------------------------------------------

def test_closing_ends_every_server_process_even_a_hung_one() -> None:
    host = McpSessions()
    try:
        live = int(run(call(host, misbehaving(name="live"), "pid")))
        hung_config = misbehaving(name="hung", call_timeout=0.5)
        hung = int(run(call(host, hung_config, "pid")))
        run(failure(host, hung_config, "hang"))  # retired, still shutting down
        assert process_exists(live)
    finally:
        host.close()
    assert not process_exists(live)
    assert not process_exists(hung)


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/status").read_text().count("State:\tZ")


def test_the_guard_checks_the_addresses_a_name_resolves_to() -> None:
    backend = GuardedBackend(OutboundPolicy())
    with pytest.raises(httpcore2.ConnectError, match=r"refused to connect to localhost \("):
        run(backend.checked_address("localhost", 80))
    allowed = GuardedBackend(OutboundPolicy(allow_loopback=True))
    assert run(allowed.checked_address("localhost", 80)) in ("127.0.0.1", "::1")
