"""The registry pages (`/registry/`): who may change what (staff with the admin's
permission; others read or get 403), the shared forms' refusals shown field by field,
the rows written, and untrusted names and descriptions escaped."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from tools_app.models import McpServer, ToolKind, ToolRegistration, ToolVersion
from tools_app.tools.registry import compute_version_hash

pytestmark = pytest.mark.django_db

HOSTILE = '<img src=x onerror=alert(1)><script>alert(2)</script>'
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}},
          "required": ["city"]}


def tool_post(**fields: Any) -> dict[str, Any]:
    data = {"name": "forecast", "kind": "mock", "description": "The forecast.",
            "json_schema": json.dumps(SCHEMA),
            "config": json.dumps({"template": True, "result": {"sky": "Sunny in {city}"}}),
            "return_behavior": "to_llm", "timeout_seconds": "", "enabled": "on"}
    return data | fields


def server_post(**fields: Any) -> dict[str, Any]:
    data = {"name": "clock", "transport": "stdio", "command": "uvx",
            "args": '["mcp-server-time"]', "env": "{}", "url": "", "headers": "{}",
            "tool_prefix": "", "startup_timeout": "30", "call_timeout": "60",
            "enabled": "on"}
    return data | fields


def mock_tool(name: str = "forecast", **fields: Any) -> ToolRegistration:
    tool = ToolRegistration(name=name, kind=ToolKind.MOCK, json_schema=SCHEMA,
                            config={"template": True, "result": "Sunny in {city}"},
                            **fields)
    tool.version_hash = compute_version_hash(tool)
    tool.save()
    return tool


def field_errors(html: str, field: str) -> str:
    """The text of the page's block for one form field (its errors are in it)."""
    start = html.index(f'data-field="{field}"')
    return html[start:html.index('data-field="', start + 12)
                if 'data-field="' in html[start + 12:] else len(html)]


@pytest.fixture
def dave(db: None) -> User:
    """Staff, with no permission on the registry."""
    user: User = get_user_model().objects.create_user("dave", is_staff=True)
    return user


# -- who may do what ---------------------------------------------------------------------

def test_a_plain_user_reads_the_registry_but_changes_nothing(bob_client: Client) -> None:
    server = McpServer.objects.create(name="clock", command="uvx")
    tool = mock_tool()

    home = bob_client.get(reverse("registry"))
    assert home.status_code == 200
    assert reverse("mcp_server_detail", args=[server.pk]) in home.text
    assert reverse("registry_tool_add") not in home.text
    detail = bob_client.get(reverse("mcp_server_detail", args=[server.pk]))
    assert detail.status_code == 200
    assert 'id="sync-form"' not in detail.text

    for url in (reverse("registry_tool_add"), reverse("registry_tools_import"),
                reverse("registry_tool_edit", args=[tool.pk]), reverse("mcp_server_add"),
                reverse("mcp_server_edit", args=[server.pk])):
        assert bob_client.get(url).status_code == 403, url
    assert bob_client.post(reverse("registry_tool_add"),
                           tool_post(name="sneaky")).status_code == 403
    assert bob_client.post(reverse("mcp_server_sync", args=[server.pk])).status_code == 403
    assert not ToolRegistration.objects.filter(name="sneaky").exists()
    assert McpServer.objects.get(pk=server.pk).last_sync == {}


def test_staff_need_the_admins_permission_for_each_change(dave: User) -> None:
    client = Client()
    client.force_login(dave)
    server = McpServer.objects.create(name="clock", command="uvx")
    assert client.get(reverse("registry_tool_add")).status_code == 403
    assert client.post(reverse("mcp_server_sync", args=[server.pk])).status_code == 403

    dave.user_permissions.add(Permission.objects.get(codename="add_toolregistration"),
                              Permission.objects.get(codename="view_mcpserver"))
    client.force_login(get_user_model().objects.get(pk=dave.pk))
    assert client.get(reverse("registry_tool_add")).status_code == 200
    assert client.get(reverse("registry_tools_import")).status_code == 200
    assert client.get(reverse("mcp_server_add")).status_code == 403
    # Sync is a change of the server, as in the admin: viewing it is not enough.
    assert client.post(reverse("mcp_server_sync", args=[server.pk])).status_code == 403


def test_the_nav_and_the_tools_index_link_the_registry_for_staff(
        alice_client: Client, bob_client: Client) -> None:
    staff = alice_client.get(reverse("tool_index")).text
    assert f'href="{reverse("registry")}"' in staff
    assert f'href="{reverse("registry_tool_add")}"' in staff
    assert f'href="{reverse("registry_tools_import")}"' in staff
    plain = bob_client.get(reverse("tool_index")).text
    assert reverse("registry") not in plain


# -- HTTP and mock tools -----------------------------------------------------------------

@pytest.mark.both
def test_staff_add_a_mock_tool(alice_client: Client) -> None:
    response = alice_client.post(reverse("registry_tool_add"), tool_post())

    assert response.status_code == 302
    assert response["Location"] == reverse("tool_detail", args=["forecast"])
    tool = ToolRegistration.objects.get(name="forecast")
    assert (tool.kind, tool.json_schema, tool.config["result"]) == (
        "mock", SCHEMA, {"sky": "Sunny in {city}"})
    assert tool.version_hash == compute_version_hash(tool)
    assert ToolVersion.objects.filter(registration=tool).count() == 1
    page = alice_client.get(response["Location"]).text
    assert "Registered the Mock tool forecast." in page
    assert f'href="{reverse("registry_tool_edit", args=[tool.pk])}"' in page


def test_a_template_naming_an_unknown_argument_is_refused_on_its_field(
        alice_client: Client) -> None:
    config = json.dumps({"template": True, "result": "Sunny in {town}"})
    response = alice_client.post(reverse("registry_tool_add"), tool_post(config=config))

    assert response.status_code == 400
    assert "town" in field_errors(response.text, "config")
    assert "Not saved: 1 field to correct" in response.text
    assert not ToolRegistration.objects.exists()


def test_an_http_tools_credential_must_be_an_env_reference(alice_client: Client) -> None:
    config = {"method": "GET", "url": "https://api.example.com/w/{city}",
              "headers": {"Authorization": "Bearer s3cret-literal"}}
    refused = alice_client.post(reverse("registry_tool_add"),
                                tool_post(name="weather", kind="http",
                                          config=json.dumps(config)))
    assert refused.status_code == 400
    assert "headers.Authorization: it carries a credential" in field_errors(
        refused.text, "config")
    assert not ToolRegistration.objects.exists()

    config["headers"] = {"Authorization": "env:WEATHER_API_TOKEN"}
    saved = alice_client.post(reverse("registry_tool_add"),
                              tool_post(name="weather", kind="http", config=json.dumps(config)))
    assert saved.status_code == 302
    assert ToolRegistration.objects.get(name="weather").config["headers"] == {
        "Authorization": "env:WEATHER_API_TOKEN"}


def test_python_and_mcp_tools_are_not_registered_here(alice_client: Client) -> None:
    response = alice_client.post(reverse("registry_tool_add"),
                                 tool_post(kind="python", config="{}"))
    assert response.status_code == 400
    assert "Select a valid choice" in field_errors(response.text, "kind")
    python_tool = ToolRegistration.objects.create(
        name="py", kind=ToolKind.PYTHON, python_path="tools_app.tools.example_tools.add")
    page = alice_client.get(reverse("registry_tool_edit", args=[python_tool.pk]))
    assert page.status_code == 409
    assert "Python tools come from code" in page.text


def test_staff_edit_a_mock_tool(alice_client: Client) -> None:
    tool = mock_tool(description="Old words.")
    before = tool.version_hash
    form = alice_client.get(reverse("registry_tool_edit", args=[tool.pk]))
    assert form.status_code == 200
    assert "Old words." in form.text

    response = alice_client.post(
        reverse("registry_tool_edit", args=[tool.pk]),
        tool_post(description="New words.", requires_approval="on",
                  config=json.dumps({"template": True, "result": "Rain in {city}"})))

    assert response.status_code == 302
    tool.refresh_from_db()
    assert (tool.description, tool.config["result"], tool.requires_approval) == (
        "New words.", "Rain in {city}", True)
    assert tool.version_hash != before
    assert "requires_approval" in tool.edited_fields  # sync keeps what a person set
    assert ToolVersion.objects.filter(registration=tool, version_hash=tool.version_hash).exists()


def test_a_stored_credential_is_never_shown_and_never_lost(alice_client: Client) -> None:
    tool = ToolRegistration(name="legacy", kind=ToolKind.HTTP, json_schema=SCHEMA,
                            config={"method": "GET", "url": "https://api.example.com/",
                                    "headers": {"X-Team": "docs"},
                                    "api_token": "literal-secret-1234"})
    tool.version_hash = compute_version_hash(tool)
    tool.save()

    page = alice_client.get(reverse("registry_tool_edit", args=[tool.pk])).text
    assert "literal-secret-1234" not in page
    assert "[redacted]" in page


def test_hostile_names_and_descriptions_are_escaped(alice_client: Client) -> None:
    tool = mock_tool(name="hostile", description=HOSTILE)
    page = alice_client.get(reverse("registry_tool_edit", args=[tool.pk])).text
    assert HOSTILE not in page
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page


# -- import ------------------------------------------------------------------------------

def openai_tool(name: str, **extra: Any) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": f"The {name} tool.", "parameters": SCHEMA, **extra}}


def test_staff_import_a_tools_file(alice_client: Client) -> None:
    payload = [openai_tool("first"), openai_tool("second")]
    upload = SimpleUploadedFile("tools.json", json.dumps(payload).encode(),
                                content_type="application/json")
    response = alice_client.post(reverse("registry_tools_import"), {
        "file": upload, "kind": "mock",
        "config": json.dumps({"result": "ok"})}, follow=True)

    assert response.status_code == 200
    assert "Imported 2 tools: first, second" in response.text
    assert sorted(ToolRegistration.objects.values_list("name", "kind")) == [
        ("first", "mock"), ("second", "mock")]


def test_an_import_with_problems_imports_nothing_and_names_each(
        alice_client: Client) -> None:
    mock_tool(name="taken")
    payload = [openai_tool("fine"), openai_tool("taken"),
               {"type": "function", "function": {"name": "bad name!", "parameters": SCHEMA}},
               {**openai_tool("templated"),
                "x-agentforge-config": {"template": True, "result": "{nope}"}}]
    response = alice_client.post(reverse("registry_tools_import"), {
        "definitions": json.dumps(payload), "kind": "mock", "config": "{}"})

    assert response.status_code == 400
    problems = response.text[response.text.index('id="import-problems"'):]
    problems = problems[:problems.index("</div>")]
    assert "Nothing was imported" in problems
    assert "bad name!" in problems
    assert "templated" in problems
    assert not ToolRegistration.objects.filter(name="fine").exists()
    # A clean file whose one name is taken: that is the problem named.
    second = alice_client.post(reverse("registry_tools_import"), {
        "definitions": json.dumps([openai_tool("fine"), openai_tool("taken")]),
        "kind": "mock", "config": "{}"})
    assert second.status_code == 400
    assert "<strong>taken</strong>: a tool of this name is already registered" in second.text
    assert not ToolRegistration.objects.filter(name="fine").exists()


@pytest.mark.parametrize(("definitions", "words"), [
    ("[{oops", "Not JSON: Expecting property name"),
    ("[" * 5000 + "]" * 5000, "Not JSON: nested too deeply"),
])
def test_an_import_that_is_not_json_says_so(alice_client: Client, definitions: str,
                                            words: str) -> None:
    response = alice_client.post(reverse("registry_tools_import"), {
        "definitions": definitions, "kind": "mock", "config": "{}"})
    assert response.status_code == 400
    assert words in response.text


def test_json_nested_too_deeply_is_a_field_error_in_every_registry_form(
        alice_client: Client) -> None:
    deep = "[" * 5000 + "]" * 5000
    posts = [
        (reverse("registry_tools_import"), {"definitions": "[]", "kind": "mock",
                                            "config": deep}, "config"),
        (reverse("registry_tool_add"), tool_post(json_schema=deep), "json_schema"),
        (reverse("mcp_server_add"), server_post(args=deep), "args"),
    ]
    for url, post, field in posts:
        response = alice_client.post(url, post)
        assert response.status_code == 400, (url, response.status_code)
        assert "Enter a valid JSON." in field_errors(response.text, field), url


# -- MCP servers -------------------------------------------------------------------------

def test_staff_add_an_mcp_server(alice_client: Client) -> None:
    response = alice_client.post(reverse("mcp_server_add"), server_post())

    server = McpServer.objects.get(name="clock")
    assert response.status_code == 302
    assert response["Location"] == reverse("mcp_server_detail", args=[server.pk])
    assert (server.command, server.args) == ("uvx", ["mcp-server-time"])
    page = alice_client.get(response["Location"]).text
    assert 'id="sync-form"' in page
    assert "Never synced." in page


def test_an_mcp_server_is_refused_field_by_field(alice_client: Client) -> None:
    stdio = alice_client.post(reverse("mcp_server_add"), server_post(command=""))
    assert stdio.status_code == 400
    assert "A stdio server needs the command that starts it." in field_errors(
        stdio.text, "command")
    http = alice_client.post(reverse("mcp_server_add"), server_post(
        transport="http", command="", url="https://mcp.example.com/mcp",
        headers=json.dumps({"Authorization": "Bearer abc"})))
    assert http.status_code == 400
    assert "Authorization carries a credential" in field_errors(http.text, "headers")
    assert not McpServer.objects.exists()


def test_editing_a_server_keeps_a_value_it_did_not_show(alice_client: Client) -> None:
    server = McpServer.objects.create(name="clock", command="uvx",
                                      env={"TZ": "UTC", "SERVICE_TOKEN": "kept-1234"})
    page = alice_client.get(reverse("mcp_server_edit", args=[server.pk])).text
    assert "kept-1234" not in page

    response = alice_client.post(reverse("mcp_server_edit", args=[server.pk]), server_post(
        env=json.dumps({"TZ": "Europe/Oslo", "SERVICE_TOKEN": "[redacted]"})))

    assert response.status_code == 302
    server.refresh_from_db()
    assert server.env == {"TZ": "Europe/Oslo", "SERVICE_TOKEN": "kept-1234"}


@pytest.mark.both
def test_a_servers_page_escapes_what_the_server_said(alice_client: Client) -> None:
    server = McpServer.objects.create(name="clock", command="uvx", last_sync={
        "at": "2026-12-06T02:00:00+00:00", "ok": True, "error": "",
        "server": {"name": HOSTILE, "version": "1", "protocol": "2026-07-28"},
        "resources": [{"uri": "notes://x", "name": "x", "title": HOSTILE,
                       "description": HOSTILE, "mime_type": "text/plain"}],
        "prompts": [{"name": "p", "title": "", "description": HOSTILE,
                     "arguments": [{"name": HOSTILE, "description": "", "required": True}]}],
        "log": [{"direction": "sent", "message": {"jsonrpc": "2.0", "id": 1,
                                                   "method": "tools/list"}},
                {"direction": "received", "message": {"jsonrpc": "2.0", "id": 1,
                                                       "result": {"note": HOSTILE}}},
                {"direction": "received", "fault": HOSTILE}]})

    page = alice_client.get(reverse("mcp_server_detail", args=[server.pk])).text

    assert HOSTILE not in page
    assert "<script>alert(2)" not in page
    assert page.count("&lt;script&gt;alert(2)&lt;/script&gt;") >= 6
    log = page[page.index('id="wire-log"'):]
    assert "<code>tools/list</code>" in log
    assert "<code>answer to #1</code>" in log
    assert "<code>transport fault</code>" in log
