"""MCP tools in runs: sync registers a server's tools with their annotations, a run calls
them end to end (one event loop per run, as db_worker runs them), failures are recorded
on the timeline and the next call works, and env: values never reach storage."""

from __future__ import annotations

import json
import logging
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from tools_app.engine.sources.mcp import MCP_SESSIONS
from tools_app.models import ErrorPolicy, McpServer, ModelEndpoint, Run, ToolRegistration
from tools_app.runs.snapshot.engine import engine_for_snapshot
from tools_app.runs.snapshot.mcp import (
    McpSyncError,
    annotation_words,
    mcp_config_problems,
    sync_server,
)
from tools_app.runs.snapshot.model import RunSnapshot

from ..runs.support import calls, events, execute, start, stored_strings
from .servers import http_server

ROOT = Path(__file__).resolve().parents[2]
CANARY = "mcp-canary-5d1e9b7a3c"


@pytest.fixture
def time_server(db: None) -> McpServer:
    return McpServer.objects.create(
        name="time", transport="stdio", command=sys.executable,
        args=["-m", "mcp_server_time", "--local-timezone", "UTC"])


@pytest.fixture
def bad_server(db: None) -> McpServer:
    return McpServer.objects.create(
        name="bad", transport="stdio", command=sys.executable,
        args=["-m", "tests.mcp.misbehaving_server"], env={"PYTHONPATH": str(ROOT)},
        tool_prefix="bad_", call_timeout=2.0)


def tools_of(server: McpServer) -> dict[str, ToolRegistration]:
    return {t.name: t for t in ToolRegistration.objects.filter(config__server=server.name)}


# -- sync --------------------------------------------------------------------------------

def test_sync_registers_the_servers_tools_with_their_annotations(
        time_server: McpServer) -> None:
    report = sync_server(time_server)

    assert sorted(report.created) == ["convert_time", "get_current_time"]
    tool = tools_of(time_server)["get_current_time"]
    assert tool.kind == "mcp"
    assert tool.config == {"server": "time", "tool": "get_current_time", "annotations": {
        "read_only_hint": True, "destructive_hint": False, "idempotent_hint": True,
        "open_world_hint": False}}
    assert tool.idempotent  # crash-resume may re-run it
    assert tool.json_schema["required"] == ["timezone"]
    assert tool.version_hash
    # The tool page's versions start with the synced definition.
    assert list(tool.versions.values_list("version_hash", flat=True)) == [tool.version_hash]
    assert mcp_config_problems(tool.config) == []
    time_server.refresh_from_db()
    assert time_server.last_synced_at is not None


def test_a_second_sync_changes_nothing_and_a_vanished_tool_is_disabled(
        time_server: McpServer) -> None:
    sync_server(time_server)
    gone = ToolRegistration.objects.create(
        name="old_tool", kind="mcp", config={"server": "time", "tool": "old_tool"},
        version_hash="x")

    report = sync_server(time_server)

    assert sorted(report.unchanged) == ["convert_time", "get_current_time"]
    assert report.disabled == ["old_tool"]
    gone.refresh_from_db()
    assert not gone.enabled


def test_sync_skips_a_name_another_tool_has(time_server: McpServer) -> None:
    ToolRegistration.objects.create(name="convert_time", kind="python",
                                    python_path="x.y", version_hash="x")
    report = sync_server(time_server)
    assert report.created == ["get_current_time"]
    assert report.skipped == ["convert_time: the name 'convert_time' is taken by another "
                              "tool (set a tool prefix)"]


def test_sync_of_a_server_that_cannot_start_fails_clearly_and_changes_nothing(
        db: None) -> None:
    server = McpServer.objects.create(name="ghost", command="/nonexistent/mcp-server")
    with pytest.raises(McpSyncError, match="'ghost' could not be started"):
        sync_server(server)
    assert not ToolRegistration.objects.exists()


def test_the_sync_mcp_command(time_server: McpServer, bad_server: McpServer) -> None:
    out = StringIO()
    call_command("sync_mcp", "time", stdout=out)
    assert "time: created 2" in out.getvalue()
    assert not tools_of(bad_server)
    call_command("sync_mcp", stdout=out)  # every enabled server
    assert "bad_echo" in tools_of(bad_server)
    with pytest.raises(CommandError, match="No MCP server named nope"):
        call_command("sync_mcp", "nope")


# -- runs ----------------------------------------------------------------------------------

def time_script() -> list[dict[str, Any]]:
    return [{"tool_calls": [{"name": "get_current_time", "arguments": {"timezone": "UTC"}}]},
            {"text": "The time: {last_results}"}]


def test_a_run_calls_the_time_server_end_to_end(
        time_server: McpServer, make_endpoint: Any, policy: ErrorPolicy) -> None:
    sync_server(time_server)
    tool = tools_of(time_server)["get_current_time"]
    run = start(make_endpoint(time_script()), [tool], policy)

    assert execute(run) == "succeeded"

    [call] = calls(run)
    assert call.state == "succeeded"
    assert json.loads(call.result_text or "")["timezone"] == "UTC"
    assert call.result_json["structured_content"]["timezone"] == "UTC"
    assert "The time:" in (run.final_text or "")
    # The server's configuration is frozen into the snapshot.
    [frozen] = run.snapshot["tools"]
    assert frozen["mcp_server"]["args"] == ["-m", "mcp_server_time", "--local-timezone", "UTC"]


def test_failures_are_recorded_and_the_next_call_works(
        bad_server: McpServer, make_endpoint: Any, policy: ErrorPolicy) -> None:
    sync_server(bad_server)
    tools = tools_of(bad_server)
    script = [{"tool_calls": [{"name": "bad_crash", "arguments": {}}]},
              {"tool_calls": [{"name": "bad_garbage", "arguments": {}}]},
              {"tool_calls": [{"name": "bad_hang", "arguments": {}}]},
              {"tool_calls": [{"name": "bad_fail", "arguments": {}}]},
              {"tool_calls": [{"name": "bad_echo", "arguments": {"text": "still here"}}]},
              {"text": "done: {last_results}"}]
    run = start(make_endpoint(script),
                [tools[n] for n in ("bad_crash", "bad_garbage", "bad_hang", "bad_fail",
                                    "bad_echo")], policy)

    assert execute(run) == "succeeded"

    crash, garbage, hang, fail, echo = calls(run)
    assert crash.state == "execution_error"
    assert "closed the connection during the call" in crash.error_message
    assert garbage.state == "execution_error"
    assert "not a JSON-RPC message" in garbage.error_message
    assert hang.state == "execution_error"
    assert hang.error_message == ("MCP server 'bad' did not answer within 2 s; the session "
                                  "was restarted")
    assert fail.state == "execution_error"
    assert "the <b>fail</b> tool failed on purpose" in fail.error_message
    assert echo.state == "succeeded"
    assert echo.result_text == "still here"
    assert run.final_text == "done: still here"
    finished = [e.payload for e in events(run) if e.kind == "tool_call_finished"]
    assert [p.get("outcome") for p in finished][:4] == ["execution_error"] * 4


def test_a_run_of_a_tool_whose_server_is_gone_fails_saying_so(
        time_server: McpServer, make_endpoint: Any, policy: ErrorPolicy) -> None:
    sync_server(time_server)
    tool = tools_of(time_server)["get_current_time"]
    time_server.delete()
    run = start(make_endpoint(time_script()), [tool], policy)

    assert execute(run) == "failed"
    assert run.error_message == ("Tool 'get_current_time': its MCP server 'time' does not "
                                 "exist")


def test_a_disabled_server_fails_the_run(
        time_server: McpServer, make_endpoint: Any, policy: ErrorPolicy) -> None:
    sync_server(time_server)
    McpServer.objects.filter(pk=time_server.pk).update(enabled=False)
    run = start(make_endpoint(time_script()), [tools_of(time_server)["get_current_time"]],
                policy)
    assert execute(run) == "failed"
    assert "is disabled" in run.error_message


# -- secrets ---------------------------------------------------------------------------------

def test_env_values_are_read_at_run_time_and_never_stored(
        bad_server: McpServer, make_endpoint: Any, policy: ErrorPolicy,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("MCP_CANARY_TOKEN", CANARY)
    bad_server.env = {**bad_server.env, "SERVICE_TOKEN": "env:MCP_CANARY_TOKEN"}
    bad_server.save()
    sync_server(bad_server)
    tools = tools_of(bad_server)
    script = [{"tool_calls": [{"name": "bad_crash", "arguments": {}}]},
              {"tool_calls": [{"name": "bad_has_environment",
                               "arguments": {"name": "SERVICE_TOKEN"}}]},
              {"text": "{last_results}"}]
    run = start(make_endpoint(script), [tools["bad_crash"], tools["bad_has_environment"]],
                policy)

    assert execute(run) == "succeeded"

    assert run.final_text == "set"  # the server got the value...
    # ...which no stored row, event or log line holds: only the reference is stored.
    assert run.snapshot["tools"][0]["mcp_server"]["env"]["SERVICE_TOKEN"] == \
        "env:MCP_CANARY_TOKEN"
    assert [s for s in stored_strings(run) if CANARY in s] == []
    assert CANARY not in caplog.text


def test_the_values_a_server_reads_are_redacted_from_the_runs_records(
        bad_server: McpServer, make_endpoint: Any, policy: ErrorPolicy,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_CANARY_TOKEN", CANARY)
    bad_server.env = {**bad_server.env, "SERVICE_TOKEN": "env:MCP_CANARY_TOKEN",
                      "PLAIN": "not-a-secret"}
    bad_server.save()
    sync_server(bad_server)
    run = start(make_endpoint([{"text": "-"}]), [tools_of(bad_server)["bad_echo"]], policy)

    engine = engine_for_snapshot(RunSnapshot.load(Run.objects.get(pk=run.pk).snapshot))

    # A server that echoes its token into a result or an error is redacted like a key.
    assert CANARY in engine.secrets
    assert "not-a-secret" not in engine.secrets


def test_an_env_reference_outside_the_allowed_variables_fails_the_run(
        bad_server: McpServer, make_endpoint: Any, policy: ErrorPolicy) -> None:
    sync_server(bad_server)
    bad_server.env = {**bad_server.env, "DB": "env:DATABASE_URL"}
    bad_server.save()
    script = [{"tool_calls": [{"name": "bad_echo", "arguments": {"text": "x"}}]},
              {"text": "{last_results}"}]
    run = start(make_endpoint(script), [tools_of(bad_server)["bad_echo"]], policy)
    assert execute(run) == "failed"
    assert "DATABASE_URL is not one endpoints may read credentials from" in run.error_message


def test_a_registration_names_an_existing_server_and_its_tool(time_server: McpServer) -> None:
    assert mcp_config_problems({"server": "time", "tool": "get_current_time"}) == []
    assert mcp_config_problems({"server": "nope", "tool": "x", "extra": 1}) == [
        "There is no MCP server named 'nope'.", "Unknown keys: extra."]
    assert mcp_config_problems({}) == ['"server" must name an MCP server.',
                                       '"tool" must name the server\'s tool.']
    assert mcp_config_problems([]) == [
        'Give a JSON object: {"server": "<MCP server name>", "tool": "<its tool>"}.']


def test_building_the_engine_touches_no_database(
        time_server: McpServer, make_endpoint: Any, policy: ErrorPolicy,
        django_assert_num_queries: Any) -> None:
    sync_server(time_server)
    run = start(make_endpoint(time_script()), [tools_of(time_server)["get_current_time"]],
                policy)
    snapshot = RunSnapshot.load(Run.objects.get(pk=run.pk).snapshot)
    with django_assert_num_queries(0):
        engine = engine_for_snapshot(snapshot)
    assert list(engine.service.registered_tools) == ["get_current_time"]
    assert ModelEndpoint.objects.count() == 1


# -- streamable HTTP -------------------------------------------------------------------------

def test_a_run_calls_an_http_server_with_a_header_from_the_environment(
        make_endpoint: Any, policy: ErrorPolicy, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("MCP_CANARY_TOKEN", CANARY)
    with http_server() as url:
        server = McpServer.objects.create(
            name="web", transport="http", url=url,
            headers={"Authorization": "env:MCP_CANARY_TOKEN"})
        sync_server(server)
        script = [{"tool_calls": [{"name": "has_header",
                                   "arguments": {"name": "Authorization"}}]},
                  {"text": "{last_results}"}]
        run = start(make_endpoint(script), [tools_of(server)["has_header"]], policy)

        assert execute(run) == "succeeded"

    assert run.final_text == "set"
    assert [s for s in stored_strings(run) if CANARY in s] == []
    assert CANARY not in caplog.text


def test_an_http_server_the_outbound_policy_refuses_is_a_recorded_tool_error(
        make_endpoint: Any, policy: ErrorPolicy, settings: Any) -> None:
    settings.AGENTFORGE_OUTBOUND_ALLOW_LOOPBACK = False
    McpServer.objects.create(name="inside", transport="http", url="http://127.0.0.1:9/mcp")
    tool = ToolRegistration.objects.create(
        name="inside_tool", kind="mcp", config={"server": "inside", "tool": "echo"},
        json_schema={"type": "object", "properties": {}}, version_hash="x")
    script = [{"tool_calls": [{"name": "inside_tool", "arguments": {}}]},
              {"text": "{last_results}"}]
    run = start(make_endpoint(script), [tool], policy)

    assert execute(run) == "succeeded"

    [call] = calls(run)
    assert call.state == "execution_error"
    assert call.error_message.startswith("MCP server 'inside' could not be started: ")
    assert "refused to connect to 127.0.0.1 (127.0.0.1: loopback)" in call.error_message


def test_annotations_read_as_words() -> None:
    assert annotation_words({"annotations": {"read_only_hint": True,
                                             "destructive_hint": False}}) == [
        "read-only", "not destructive"]
    assert annotation_words({"annotations": "junk"}) == []
    assert annotation_words(None) == []


def test_runs_on_their_own_event_loops_share_the_servers_session(
        bad_server: McpServer, make_endpoint: Any, policy: ErrorPolicy) -> None:
    sync_server(bad_server)
    script = [{"tool_calls": [{"name": "bad_pid", "arguments": {}}]},
              {"text": "{last_results}"}]
    endpoint = make_endpoint(script)
    first = start(endpoint, [tools_of(bad_server)["bad_pid"]], policy)
    second = start(endpoint, [tools_of(bad_server)["bad_pid"]], policy)

    # Each execute() runs the task in an event loop of its own, as db_worker does.
    assert execute(first) == "succeeded"
    assert execute(second) == "succeeded"

    assert first.final_text == second.final_text  # the same server process
    assert MCP_SESSIONS.session_count() == 1
