"""MCP servers through the JSON API (issue 44): registered with a token, synced against
the real time server (mcp-server-time, the one the admin's tests sync) by the admin's
own sync, with the admin's permission; the synced tools listed and read-only."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser, Permission

from tests.web.support import error_of
from tools_app.models import McpServer, ToolRegistration
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db

TIME_SERVER = {"name": "time", "command": sys.executable,
               "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}


def call(token: str, method: str, path: str, body: Any = None) -> Any:
    from django.test import Client

    return Client().generic(method, path, json.dumps(body or {}),
                            content_type="application/json",
                            headers={"Authorization": f"Bearer {token}"})


def test_a_token_registers_and_syncs_a_server(alice: AbstractUser, bob: AbstractUser) -> None:
    staff, plain = create_token(alice, "ci")[1], create_token(bob, "ci")[1]
    response = call(staff, "POST", "/api/mcp-servers", TIME_SERVER)
    assert response.status_code == 201, response.content
    server = response.json()
    assert server["tools"] == []
    assert error_of(call(plain, "POST", f"/api/mcp-servers/{server['id']}/sync"),
                    403)["code"] == "forbidden"

    response = call(staff, "POST", f"/api/mcp-servers/{server['id']}/sync")

    assert response.status_code == 200, response.content
    report = response.json()
    assert report["summary"] == "time: created 2, updated 0, unchanged 0, disabled 0"
    assert sorted(report["created"]) == ["convert_time", "get_current_time"]
    listed = call(plain, "GET", "/api/mcp-servers/time").json()
    assert sorted(listed["tools"]) == ["convert_time", "get_current_time"]
    assert listed["last_synced_at"] is not None
    tools = {t["name"]: t for t in call(plain, "GET", "/api/tools").json()["tools"]}
    assert tools["get_current_time"]["kind"] == "mcp"
    assert tools["get_current_time"]["read_only"] is True
    assert tools["get_current_time"]["config"]["server"] == "time"
    assert error_of(call(staff, "PATCH", "/api/tools/get_current_time", {"enabled": False}),
                    409)["code"] == "read_only"

    again = call(staff, "POST", "/api/mcp-servers/time/sync").json()  # by name too
    assert again["summary"] == "time: created 0, updated 0, unchanged 2, disabled 0"


def test_a_failed_sync_says_why_and_changes_nothing(alice: AbstractUser) -> None:
    McpServer.objects.create(name="ghost", command="/nonexistent/mcp-server")
    error = error_of(call(create_token(alice, "ci")[1], "POST", "/api/mcp-servers/ghost/sync"),
                     502)
    assert error["code"] == "sync_failed"
    assert error["message"].startswith("ghost: sync failed: MCP server 'ghost' could not be "
                                       "started")
    assert not ToolRegistration.objects.exists()


@pytest.mark.parametrize(("permissions", "status"), [
    (("view_mcpserver",), 403),
    (("view_mcpserver", "change_mcpserver"), 200),
])
def test_a_sync_needs_the_change_permission_as_in_the_admin(
        db: None, monkeypatch: pytest.MonkeyPatch, permissions: tuple[str, ...],
        status: int) -> None:
    """A sync starts the server's command: staff who may only look at MCP servers may
    not start it here either (the admin's rule, tests/mcp/test_mcp_admin.py)."""
    from types import SimpleNamespace

    from tools_app.web.api import registry

    started: list[str] = []

    def sync(server: McpServer) -> Any:
        started.append(server.name)
        return SimpleNamespace(server=server.name, created=[], updated=[], unchanged=[],
                               disabled=[], skipped=[], summary=lambda: "synced")

    monkeypatch.setattr(registry, "sync_server", sync)
    McpServer.objects.create(name="time", command="uvx", args=["mcp-server-time"])
    vera = get_user_model().objects.create_user("vera", is_staff=True)
    vera.user_permissions.set(Permission.objects.filter(
        content_type__app_label="tools_app", codename__in=permissions))

    response = call(create_token(vera, "ci")[1], "POST", "/api/mcp-servers/time/sync")

    assert response.status_code == status, response.content
    assert started == (["time"] if status == 200 else [])
