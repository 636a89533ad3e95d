"""The MCP server admin: staff only, validated (no stored credentials, no provider key
passed on), the "Sync tools" action, and registrations of kind mcp checked."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.urls import reverse

from tools_app.admin import ToolRegistrationForm
from tools_app.admin.mcp import McpServerForm
from tools_app.models import McpServer, ModelEndpoint, ToolRegistration


def server_form(**fields: Any) -> McpServerForm:
    data = {"name": "docs", "transport": "stdio", "command": "uvx", "args": "[]",
            "env": "{}", "url": "", "headers": "{}", "tool_prefix": "",
            "startup_timeout": "30", "call_timeout": "60", "enabled": "on"} | fields
    return McpServerForm(data=data)


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_a_stdio_server_needs_a_command(db: None) -> None:
    form = server_form(command="")
    assert not form.is_valid()
    assert form.errors["command"] == ["A stdio server needs the command that starts it."]


def test_an_http_server_needs_a_url_without_credentials(db: None) -> None:
    form = server_form(transport="http", url="https://user:pw@mcp.example.com/mcp")
    assert not form.is_valid()
    assert "Do not put credentials in the URL" in form.errors["url"][0]
    assert server_form(transport="http", url="https://mcp.example.com/mcp").is_valid()


def test_a_credential_header_must_come_from_the_environment(db: None) -> None:
    form = server_form(transport="http", url="https://mcp.example.com/mcp",
                       headers='{"Authorization": "Bearer abc"}')
    assert not form.is_valid()
    assert "Authorization carries a credential" in form.errors["headers"][0]
    assert server_form(transport="http", url="https://mcp.example.com/mcp",
                       headers='{"Authorization": "env:DOCS_TOKEN"}').is_valid()


def test_env_references_follow_the_secret_rules(db: None) -> None:
    form = server_form(env='{"DB": "env:DATABASE_URL"}')
    assert not form.is_valid()
    assert "DATABASE_URL is not one endpoints may read credentials from" in \
        form.errors["env"][0]


def test_a_model_endpoints_key_is_never_passed_on(db: None) -> None:
    ModelEndpoint.objects.create(name="openai", kind="openai", model="gpt",
                                 api_key_env="OPENAI_API_KEY")
    form = server_form(env='{"KEY": "env:OPENAI_API_KEY"}')
    assert not form.is_valid()
    assert form.errors["env"] == ["KEY: OPENAI_API_KEY holds a model endpoint's API key, "
                                  "which is never passed on to an MCP server."]


def test_malformed_arguments_and_environment_are_refused(db: None) -> None:
    form = server_form(args='"--x"', env='{"1BAD": "x"}')
    assert not form.is_valid()
    assert form.errors["args"] == ['Give a JSON list of strings, e.g. '
                                   '["--local-timezone", "UTC"].']
    assert form.errors["env"] == ["Not environment variable names: 1BAD."]


def test_an_mcp_registration_must_name_an_existing_server(db: None) -> None:
    form = ToolRegistrationForm(data={
        "name": "t", "kind": "mcp", "python_path": "", "description": "",
        "json_schema": '{"type": "object", "properties": {}}',
        "config": '{"server": "nope", "tool": "x"}', "return_behavior": "to_llm"})
    assert not form.is_valid()
    assert form.errors["config"] == ["There is no MCP server named 'nope'."]


def test_the_admin_is_staff_only(bob_client: Client) -> None:
    response = bob_client.get(reverse("admin:tools_app_mcpserver_changelist"))
    assert response.status_code == 302
    assert "/login/" in response["Location"]


def test_the_sync_action_registers_the_tools_and_shows_their_hints(
        alice_client: Client, alice: AbstractUser) -> None:
    server = McpServer.objects.create(
        name="time", command=sys.executable,
        args=["-m", "mcp_server_time", "--local-timezone", "UTC"])
    changelist = reverse("admin:tools_app_mcpserver_changelist")

    response = alice_client.post(changelist, {"action": "sync_tools", "index": "0",
                                              "_selected_action": [server.pk]}, follow=True)

    assert messages_of(response) == ["time: created 2, updated 0, unchanged 0, disabled 0"]
    assert ToolRegistration.objects.filter(kind="mcp").count() == 2
    page = alice_client.get(reverse("admin:tools_app_mcpserver_change", args=[server.pk]))
    text = page.content.decode()
    assert "get_current_time</a>: read-only, not destructive, idempotent, not open-world" in text
    registry = reverse("mcp_server_detail", args=[server.pk])
    assert f'ok · <a href="{registry}">resources, prompts and JSON-RPC log</a>' in text


def test_a_failed_sync_says_why(alice_client: Client) -> None:
    server = McpServer.objects.create(name="ghost", command="/nonexistent/mcp-server")
    response = alice_client.post(reverse("admin:tools_app_mcpserver_changelist"),
                                 {"action": "sync_tools", "index": "0",
                                  "_selected_action": [server.pk]},
                                 follow=True)
    [message] = messages_of(response)
    assert message.startswith("ghost: sync failed: MCP server 'ghost' could not be started")
    page = alice_client.get(reverse("admin:tools_app_mcpserver_change", args=[server.pk]))
    assert "failed: MCP server &#x27;ghost&#x27; could not be started" in page.text


@pytest.mark.parametrize("page", ["changelist", "add"])
def test_the_admin_pages_load(alice_client: Client, page: str) -> None:
    McpServer.objects.create(name="time", command="uvx", args=["mcp-server-time"])
    assert alice_client.get(reverse(f"admin:tools_app_mcpserver_{page}")).status_code == 200


def _staff_client(*permissions: str) -> Client:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    user = get_user_model().objects.create_user("vera", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="tools_app", codename__in=permissions))
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize(("permissions", "synced"), [
    (("view_mcpserver",), False),
    (("view_mcpserver", "change_mcpserver"), True),
])
def test_sync_tools_needs_the_change_permission(
        db: None, monkeypatch: pytest.MonkeyPatch, permissions: tuple[str, ...],
        synced: bool) -> None:
    """A sync starts the server's configured command: a staff member who may only look at
    MCP servers is neither offered the action nor able to post it (issue 42, finding 12)."""
    from tools_app.admin import mcp as mcp_admin

    started: list[str] = []

    def sync(server: McpServer) -> Any:
        started.append(server.name)
        return SimpleNamespace(summary=lambda: f"{server.name}: synced")

    monkeypatch.setattr(mcp_admin, "sync_server", sync)
    server = McpServer.objects.create(name="time", command="uvx", args=["mcp-server-time"])
    client = _staff_client(*permissions)
    changelist = reverse("admin:tools_app_mcpserver_changelist")

    page = client.get(changelist)
    assert page.status_code == 200
    assert ('value="sync_tools"' in page.content.decode()) is synced
    client.post(changelist, {"action": "sync_tools", "index": "0",
                             "_selected_action": [server.pk]}, follow=True)
    assert started == (["time"] if synced else [])
