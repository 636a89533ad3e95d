"""What a sync keeps of a server (McpServer.last_sync) and the registry page that shows
it: the tools registered, the resources and prompts listed, the JSON-RPC messages of
the sync's session in order, a secret the server repeats redacted, and a failed sync's
reason. Real servers: the time server and the tests' misbehaving one (stdio)."""

from __future__ import annotations

import json
import sys

import pytest
from django.test import Client
from django.urls import reverse

from tools_app.engine.sources.mcp_listing import LOG_MESSAGES_CAP, WireLog
from tools_app.models import McpServer, ToolRegistration
from tools_app.runs.snapshot.mcp import McpSyncError, sync_server

from .servers import MISBEHAVING, ROOT

pytestmark = pytest.mark.django_db

MOTTO = "motto-s3cret-value-42"


def time_server_row() -> McpServer:
    return McpServer.objects.create(
        name="clock", command=sys.executable, tool_prefix="clock_",
        args=["-m", "mcp_server_time", "--local-timezone", "UTC"],
        startup_timeout=30, call_timeout=30)


def test_a_sync_from_the_page_shows_the_tools_and_the_json_rpc_log(
        alice_client: Client) -> None:
    server = time_server_row()

    response = alice_client.post(reverse("mcp_server_sync", args=[server.pk]), follow=True)

    assert response.status_code == 200
    page = response.text
    assert "clock: created 2, updated 0, unchanged 0, disabled 0" in page
    assert sorted(ToolRegistration.objects.filter(config__server="clock")
                  .values_list("name", flat=True)) == ["clock_convert_time",
                                                       "clock_get_current_time"]
    assert f'href="{reverse("tool_detail", args=["clock_get_current_time"])}"' in page
    record = McpServer.objects.get(pk=server.pk).last_sync
    assert record["ok"] is True
    assert record["server"]["name"] == "mcp-time"
    # The log in order: each request sent, then its answer received, ids matching.
    sent = [e["message"] for e in record["log"] if e["direction"] == "sent"]
    received = [e["message"] for e in record["log"] if e["direction"] == "received"]
    assert [m["method"] for m in sent if "method" in m][-3:] == [
        "tools/list", "resources/list", "prompts/list"]
    answers = {m["id"]: m for m in received if "id" in m}
    listed = next(m for m in sent if m.get("method") == "tools/list")
    assert {t["name"] for t in answers[listed["id"]]["result"]["tools"]} == {
        "get_current_time", "convert_time"}
    log = page[page.index('id="wire-log"'):]
    assert '<span class="badge dir-sent">sent</span> <code>tools/list</code>' in log
    assert f'<code>answer to #{listed["id"]}</code>' in log
    assert "The server offers none." in page  # its resources and prompts
    tool_page = alice_client.get(reverse("tool_detail", args=["clock_get_current_time"]))
    assert (f'<a href="{reverse("mcp_server_detail", args=[server.pk])}" '
            'id="tool-mcp-server">clock</a>') in tool_page.text


@pytest.mark.both
def test_resources_and_prompts_are_listed_and_a_repeated_secret_redacted(
        monkeypatch: pytest.MonkeyPatch, alice_client: Client) -> None:
    monkeypatch.setenv("MCP_MOTTO_TOKEN", MOTTO)
    server = McpServer.objects.create(
        name="bad", command=sys.executable, args=["-m", MISBEHAVING], tool_prefix="bad_",
        env={"PYTHONPATH": str(ROOT), "MISBEHAVING_MOTTO": "env:MCP_MOTTO_TOKEN"})

    report = sync_server(server)

    assert "bad_echo" in report.created
    record = McpServer.objects.get(pk=server.pk).last_sync
    assert record["resources"] == [{"uri": "notes://readme", "name": "readme",
                                    "title": "Read <b>me</b>",
                                    "description": "The server's notes.",
                                    "mime_type": "text/plain"}]
    assert record["prompts"] == [{"name": "greet", "title": "",
                                  "description": "Greets someone. Motto: [redacted]",
                                  "arguments": [{"name": "who", "description": "",
                                                 "required": True}]}]
    assert MOTTO not in json.dumps(record)
    page = alice_client.get(reverse("mcp_server_detail", args=[server.pk])).text
    assert MOTTO not in page
    assert "Read &lt;b&gt;me&lt;/b&gt;" in page
    assert "Read <b>me</b>" not in page
    assert "<code>greet</code>" in page
    assert "<code>who</code> (required)" in page


def test_a_failed_sync_is_kept_with_its_reason(alice_client: Client) -> None:
    server = McpServer.objects.create(name="gone", command="/nonexistent/mcp-server",
                                      startup_timeout=30)

    with pytest.raises(McpSyncError) as failed:
        sync_server(server)

    record = McpServer.objects.get(pk=server.pk).last_sync
    assert record["ok"] is False
    assert record["error"] == str(failed.value)
    assert "could not be started" in record["error"]
    response = alice_client.post(reverse("mcp_server_sync", args=[server.pk]), follow=True)
    assert "gone: sync failed: MCP server &#x27;gone&#x27; could not be started" in \
        response.text
    assert 'id="sync-error"' in response.text
    assert not ToolRegistration.objects.filter(config__server="gone").exists()


def test_a_log_keeps_its_first_messages_and_counts_the_rest() -> None:
    log = WireLog()
    for _ in range(LOG_MESSAGES_CAP + 3):
        log.record("received", ValueError("not JSON-RPC <b>"))

    kept = log.as_list()

    assert len(kept) == LOG_MESSAGES_CAP + 1
    assert kept[0] == {"direction": "received", "fault": "ValueError: not JSON-RPC <b>"}
    assert kept[-1]["fault"] == "3 more messages not kept"
