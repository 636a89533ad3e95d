"""The registry in the JSON API (issue 44): tools, endpoints, MCP servers and policies
listed for any token, created and changed by staff only, validated by the admin's own
forms (the same input gets the same messages as the admin's page), secrets only as
env:NAME references; and a script holding only a token registers an HTTP tool and an
endpoint, starts a run with them and reads it to its end."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser, Permission
from django.test import Client
from django.urls import reverse

from tests.runs.support import CANARY, CITY_SCHEMA, EchoHeaders, calling, execute, http_server
from tests.web.support import Api, error_of
from tools_app.models import ErrorPolicy, McpServer, ModelEndpoint, ToolRegistration
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db

MOCK = {"name": "weather", "kind": "mock", "json_schema": CITY_SCHEMA,
        "config": {"template": True, "result": {"forecast": "Sunny in {city}"}}}
SCRIPTED = {"name": "ci-script", "kind": "scripted", "script": [{"text": "Hello"}]}
STDIO = {"name": "time", "command": "uvx", "args": ["mcp-server-time"]}
LITERAL_KEY = "sk-live-literal-3f9a1c7e"


class RegistryApi(Api):
    def patch(self, path: str, body: Any) -> Any:
        return self.client.patch(path, json.dumps(body), content_type="application/json",
                                 headers=self.headers)


@pytest.fixture
def staff(alice: AbstractUser) -> RegistryApi:
    return RegistryApi(create_token(alice, "ci")[1])


@pytest.fixture
def plain(bob: AbstractUser) -> RegistryApi:
    return RegistryApi(create_token(bob, "ci")[1])


def created(response: Any) -> dict[str, Any]:
    assert response.status_code == 201, response.content
    return response.json()  # type: ignore[no-any-return]


def ok(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.content
    return response.json()  # type: ignore[no-any-return]


# -- tools -------------------------------------------------------------------------------


def test_staff_create_list_and_update_a_mock_tool(staff: RegistryApi,
                                                  plain: RegistryApi) -> None:
    tool = created(staff.post("/api/tools", MOCK))
    assert (tool["name"], tool["kind"], tool["read_only"]) == ("weather", "mock", False)
    row = ToolRegistration.objects.get(name="weather")
    assert row.version_hash == tool["version_hash"]
    assert row.versions.count() == 1

    for api in (staff, plain):  # reads for any token
        assert [t["name"] for t in ok(api.get("/api/tools"))["tools"]] == ["weather"]
        assert ok(api.get(f"/api/tools/{row.pk}"))["name"] == "weather"

    changed = ok(staff.patch("/api/tools/weather", {"enabled": False, "timeout_seconds": 2}))
    assert (changed["enabled"], changed["timeout_seconds"]) == (False, 2.0)
    assert changed["json_schema"] == CITY_SCHEMA  # what was not sent is kept
    row.refresh_from_db()
    assert not row.enabled
    assert row.edited_fields == ["enabled", "timeout_seconds"]  # as the admin records them
    changed = ok(staff.patch(f"/api/tools/{row.pk}", {"description": "Forecast"}))
    assert changed["version_hash"] != tool["version_hash"]
    assert row.versions.count() == 3  # each change of the definition is a version


def test_writes_are_for_staff_with_the_admins_permission(
        plain: RegistryApi, db: None) -> None:
    ToolRegistration.objects.create(name="weather", kind="mock", json_schema=CITY_SCHEMA,
                                    config=MOCK["config"])
    endpoint = ModelEndpoint.objects.create(**SCRIPTED)
    server = McpServer.objects.create(**STDIO)
    vera = get_user_model().objects.create_user("vera", is_staff=True)  # staff, no rights
    staff_only = RegistryApi(create_token(vera, "ci")[1])
    for api in (plain, staff_only):
        for path, body in [("/api/tools", MOCK | {"name": "other"}),
                           ("/api/endpoints", SCRIPTED | {"name": "other"}),
                           ("/api/mcp-servers", STDIO | {"name": "other"}),
                           ("/api/mcp-servers/time/sync", {})]:
            assert error_of(api.post(path, body), 403)["code"] == "forbidden"
        for path in ("/api/tools/weather", f"/api/endpoints/{endpoint.pk}",
                     f"/api/mcp-servers/{server.pk}"):
            assert error_of(api.patch(path, {"enabled": False} if "endpoints" not in path
                                      else {"stream": True}), 403)["code"] == "forbidden"
    assert ToolRegistration.objects.count() == ModelEndpoint.objects.count() == 1
    assert McpServer.objects.get().enabled

    vera.user_permissions.set(Permission.objects.filter(codename="add_toolregistration"))
    created(staff_only.post("/api/tools", MOCK | {"name": "other"}))
    assert error_of(staff_only.patch("/api/tools/other", {"enabled": False}), 403)


def test_python_and_mcp_tools_are_read_only(staff: RegistryApi) -> None:
    ToolRegistration.objects.create(name="calculator", kind="python",
                                    python_path="tools_app.tools.example_tools.calculator")
    ToolRegistration.objects.create(name="now", kind="mcp",
                                    config={"server": "time", "tool": "now"})
    for kind in ("python", "mcp"):
        error = error_of(staff.post("/api/tools", MOCK | {"kind": kind}), 400)
        assert (error["code"], error["field"]) == ("invalid_field", "kind")
    assert "come from code" in error_of(staff.post("/api/tools", MOCK | {"kind": "python"}),
                                        400)["message"]
    error = error_of(staff.patch("/api/tools/calculator", {"enabled": False}), 409)
    assert error["code"] == "read_only"
    assert "come from code" in error["message"]
    error = error_of(staff.patch("/api/tools/now", {"enabled": False}), 409)
    assert "POST /api/mcp-servers/<id>/sync" in error["message"]
    created(staff.post("/api/tools", MOCK))
    assert error_of(staff.patch("/api/tools/weather", {"kind": "python"}), 400)["field"] == "kind"
    listed = {t["name"]: t["read_only"] for t in ok(staff.get("/api/tools"))["tools"]}
    assert listed == {"calculator": True, "now": True, "weather": False}


def test_unknown_names_are_404(staff: RegistryApi) -> None:
    for path in ("/api/tools/nope", "/api/endpoints/nope", "/api/mcp-servers/nope",
                 "/api/mcp-servers/99/sync"):
        assert error_of(staff.get(path) if "sync" not in path else staff.post(path, {}),
                        404)["code"] == "not_found"
    assert error_of(staff.patch("/api/tools/nope", {}), 404)


# -- the admin's validation, through the API ---------------------------------------------


def admin_errors(client: Client, model: str, data: dict[str, Any]) -> dict[str, list[str]]:
    """What the admin's add page says about `data` (as its form posts it)."""
    response = client.post(reverse(f"admin:tools_app_{model}_add"), data)
    assert response.status_code == 200  # the page again, with its errors
    return {name: list(errors) for name, errors in
            response.context["adminform"].form.errors.items()}


TOOL_FORM = {"name": "weather", "kind": "mock", "python_path": "", "description": "",
             "json_schema": json.dumps(CITY_SCHEMA), "config": json.dumps(MOCK["config"]),
             "return_behavior": "to_llm", "timeout_seconds": "", "enabled": "on"}
ENDPOINT_FORM = {"name": "ci-script", "kind": "scripted", "model": "", "base_url": "",
                 "api_key_env": "", "extra_headers": "{}", "default_parameters": "{}",
                 "proxy_url": "", "timeout_seconds": "", "script": '[{"text": "Hello"}]'}
MCP_FORM = {"name": "docs", "transport": "http", "command": "", "args": "[]", "env": "{}",
            "url": "https://mcp.example.com/mcp", "headers": "{}", "tool_prefix": "",
            "startup_timeout": "30", "call_timeout": "60", "enabled": "on"}

CASES = [
    pytest.param("toolregistration", "/api/tools", MOCK | {"json_schema": {"type": "array"}},
                 TOOL_FORM | {"json_schema": '{"type": "array"}'}, id="schema-not-an-object"),
    pytest.param("toolregistration", "/api/tools",
                 MOCK | {"config": {"template": True, "result": "Sunny in {town}"}},
                 TOOL_FORM | {"config": '{"template": true, "result": "Sunny in {town}"}'},
                 id="template-names-no-argument"),
    pytest.param("toolregistration", "/api/tools",
                 {"name": "svc", "kind": "http", "json_schema": CITY_SCHEMA,
                  "config": {"url": "https://api.example.com/{city}",
                             "headers": {"Authorization": f"Bearer {LITERAL_KEY}"}}},
                 TOOL_FORM | {"name": "svc", "kind": "http", "config": json.dumps(
                     {"url": "https://api.example.com/{city}",
                      "headers": {"Authorization": f"Bearer {LITERAL_KEY}"}})},
                 id="http-literal-credential"),
    pytest.param("modelendpoint", "/api/endpoints", SCRIPTED | {"kind": "nope"},
                 ENDPOINT_FORM | {"kind": "nope"}, id="endpoint-unknown-kind"),
    pytest.param("modelendpoint", "/api/endpoints", SCRIPTED | {"api_key_env": LITERAL_KEY},
                 ENDPOINT_FORM | {"api_key_env": LITERAL_KEY}, id="endpoint-literal-key"),
    pytest.param("modelendpoint", "/api/endpoints",
                 SCRIPTED | {"extra_headers": {"X-Api-Key": LITERAL_KEY}},
                 ENDPOINT_FORM | {"extra_headers": json.dumps({"X-Api-Key": LITERAL_KEY})},
                 id="endpoint-literal-header"),
    pytest.param("modelendpoint", "/api/endpoints", SCRIPTED | {"script": [{"nope": 1}]},
                 ENDPOINT_FORM | {"script": '[{"nope": 1}]'}, id="endpoint-bad-script"),
    pytest.param("mcpserver", "/api/mcp-servers",
                 {"name": "docs", "transport": "http", "url": "https://mcp.example.com/mcp",
                  "headers": {"Authorization": LITERAL_KEY}},
                 MCP_FORM | {"headers": json.dumps({"Authorization": LITERAL_KEY})},
                 id="mcp-literal-header"),
    pytest.param("mcpserver", "/api/mcp-servers", {"name": "docs", "transport": "stdio"},
                 MCP_FORM | {"transport": "stdio"}, id="mcp-stdio-without-command"),
]


@pytest.mark.parametrize(("model", "path", "body", "form"), CASES)
def test_a_refusal_is_the_admins_own(staff: RegistryApi, alice_client: Client, model: str,
                                     path: str, body: dict[str, Any],
                                     form: dict[str, str]) -> None:
    expected = admin_errors(alice_client, model, form)
    assert expected  # the admin refuses it

    response = staff.post(path, body)

    error = error_of(response, 400)
    assert error["code"] == "invalid_field"
    assert error["problems"] == expected
    field, [first, *_] = next(iter(expected.items()))
    assert (error["field"], error["message"]) == (field, f"{field}: {first}")
    assert LITERAL_KEY not in response.content.decode()  # never echoed
    assert not ToolRegistration.objects.exists()
    assert not ModelEndpoint.objects.exists()
    assert not McpServer.objects.exists()


def test_an_update_is_validated_with_the_rows_other_values(staff: RegistryApi) -> None:
    """A PATCH is checked as the admin's change page would post it: the fields sent over
    what is stored (a new schema without the template's argument is refused)."""
    created(staff.post("/api/tools", MOCK))
    error = error_of(staff.patch("/api/tools/weather", {"json_schema": {
        "type": "object", "properties": {"town": {"type": "string"}}}}), 400)
    assert error["field"] == "config"
    assert "{city} names no argument of this tool" in error["message"]
    assert ToolRegistration.objects.get().json_schema == CITY_SCHEMA


def test_a_body_of_the_wrong_json_type_is_refused_before_the_form(staff: RegistryApi) -> None:
    error = error_of(staff.post("/api/tools", MOCK | {"enabled": "yes"}), 400)
    assert (error["code"], error["field"]) == ("invalid_field", "enabled")
    error = error_of(staff.post("/api/endpoints", {"kind": "scripted"}), 400)
    assert (error["code"], error["field"]) == ("missing_field", "name")
    error = error_of(staff.post("/api/endpoints", SCRIPTED | {"api_key": LITERAL_KEY}), 400)
    assert error["field"] == "api_key"
    assert LITERAL_KEY not in json.dumps(error)


# -- endpoints, MCP servers, policies ----------------------------------------------------


def test_endpoints_created_listed_and_updated_show_only_the_keys_variable(
        staff: RegistryApi, plain: RegistryApi, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    endpoint = created(staff.post("/api/endpoints", {
        "name": "openai", "kind": "openai", "model": "gpt-4o-mini",
        "api_key_env": "OPENAI_API_KEY", "extra_headers": {"X-Team": "docs"}}))
    assert endpoint["api_key_env"] == "OPENAI_API_KEY"
    changed = ok(staff.patch("/api/endpoints/openai", {"model": "gpt-4o", "stream": True}))
    assert (changed["model"], changed["stream"], changed["api_key_env"]) == (
        "gpt-4o", True, "OPENAI_API_KEY")
    texts = [staff.get("/api/endpoints").content.decode(),
             plain.get(f"/api/endpoints/{endpoint['id']}").content.decode()]
    assert [e["name"] for e in json.loads(texts[0])["endpoints"]] == ["openai"]
    for text in texts:
        assert CANARY not in text
    error = error_of(staff.patch("/api/endpoints/openai", {"model": ""}), 400)
    assert error["field"] == "model"  # a provider endpoint names its model, as in the admin
    assert ModelEndpoint.objects.get().model == "gpt-4o"


def test_mcp_servers_created_listed_and_updated_without_their_secrets(
        staff: RegistryApi, plain: RegistryApi) -> None:
    server = created(staff.post("/api/mcp-servers", STDIO | {
        "env": {"TZ": "UTC", "GITHUB_TOKEN": "env:MCP_GITHUB_TOKEN",
                "LEGACY_TOKEN": LITERAL_KEY}}))  # a literal the admin lets through
    assert server["env"] == {"TZ": "UTC", "GITHUB_TOKEN": "env:MCP_GITHUB_TOKEN",
                             "LEGACY_TOKEN": "[redacted]"}
    changed = ok(staff.patch(f"/api/mcp-servers/{server['id']}", {"tool_prefix": "t_"}))
    assert changed["tool_prefix"] == "t_"
    assert changed["args"] == ["mcp-server-time"]
    for api in (staff, plain):
        text = api.get("/api/mcp-servers").content.decode()
        assert [s["name"] for s in json.loads(text)["mcp_servers"]] == ["time"]
        assert LITERAL_KEY not in text
        assert LITERAL_KEY not in api.get("/api/mcp-servers/time").content.decode()
    McpServer.objects.filter(pk=server["id"]).update(enabled=False)
    assert error_of(staff.post("/api/mcp-servers/time/sync", {}), 409)["code"] == "disabled"


def test_policies_are_listed_for_any_token(plain: RegistryApi, policy: ErrorPolicy) -> None:
    [listed] = ok(plain.get("/api/policies"))["policies"]
    assert (listed["id"], listed["name"], listed["is_default"]) == (policy.pk, policy.name,
                                                                    True)
    assert listed["max_round_trips"] == policy.max_round_trips
    assert any(name.startswith("loop_") for name in listed)  # every field the admin edits


# -- a script with only a token ----------------------------------------------------------


@pytest.fixture
def echo_url() -> Iterator[str]:
    with http_server(EchoHeaders, path="") as url:
        yield url


def test_a_token_registers_a_tool_and_an_endpoint_and_runs_them_to_the_end(
        staff: RegistryApi, policy: ErrorPolicy, echo_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's scenario: an HTTP tool on a local service (its credential read from
    the environment), an offline scripted endpoint calling it, a run started and read
    back until it has ended (the test plays the worker)."""
    monkeypatch.setenv("AGENTFORGE_TEST_WEATHER_TOKEN", CANARY)
    created(staff.post("/api/tools", {
        "name": "forecast", "kind": "http", "json_schema": CITY_SCHEMA,
        "config": {"url": echo_url + "/forecast/{city}",
                   "headers": {"Authorization": "env:AGENTFORGE_TEST_WEATHER_TOKEN"}}}))
    created(staff.post("/api/endpoints", {
        "name": "ci-script", "kind": "scripted",
        "script": calling("forecast", {"city": "Oslo"})}))
    run = created(staff.post("/api/runs", {
        "endpoint": "ci-script", "tools": ["forecast"],
        "messages": [{"role": "user", "content": "Weather in Oslo?"}]}))

    assert execute(run["id"]) == "succeeded"

    detail = ok(staff.get(f"/api/runs/{run['id']}"))
    assert detail["status"] == "succeeded"
    [first, _last] = detail["rounds"]
    [call] = first["tool_calls"]
    assert (call["name"], call["state"]) == ("forecast", "succeeded")
    assert json.loads(call["result"])["path"] == "/forecast/Oslo"
    assert "/forecast/Oslo" in detail["final_answer"]
    for path in ("/api/tools/forecast", "/api/endpoints/ci-script", f"/api/runs/{run['id']}"):
        assert CANARY not in staff.get(path).content.decode()
