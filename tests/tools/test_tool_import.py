"""Tool kinds in the admin and tool import (#12): each kind's config checked field by
field, definitions imported all or nothing with every problem listed, staff only."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from tools_app.models import ToolRegistration
from tools_app.tools.importing import ToolImportError, import_tools
from tools_app.tools.registry import compute_version_hash

pytestmark = pytest.mark.django_db

IMPORT_URL = "admin:tools_app_toolregistration_import"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
OPENAI_TOOLS = [
    {"type": "function", "function": {"name": "weather", "description": "Forecast",
                                      "parameters": SCHEMA}},
    {"type": "function", "function": {"name": "now", "description": "Time"}},
]


def tool_data(**overrides: str) -> dict[str, str]:
    data = {"name": "forecast", "kind": "mock", "python_path": "", "description": "d",
            "json_schema": json.dumps(SCHEMA), "config": '{"result": "Sunny"}',
            "return_behavior": "to_llm", "timeout_seconds": "", "enabled": "on"}
    return data | overrides


def config_errors(response: Any) -> list[str]:
    return list(response.context["adminform"].form.errors.get("config", []))


@pytest.mark.parametrize(("overrides", "message"), [
    ({"config": '{"result": "a", "error": "b"}'}, "either a result or an error"),
    ({"config": '{"latency_seconds": -2}'}, "latency_seconds: Input should be greater"),
    ({"config": '{"reslt": 1}'}, "reslt: Extra inputs are not permitted"),
    ({"kind": "http", "config": "{}"}, "url: Field required"),
    ({"kind": "http", "config": '{"url": "http://{host}/"}'}, "host cannot come from"),
    ({"kind": "http", "config": json.dumps({"url": "https://api.example.com/",
                                            "headers": {"Authorization": "Bearer abc"}})},
     "headers.Authorization: it carries a credential"),
    ({"kind": "http", "config": json.dumps({"url": "https://api.example.com/",
                                            "headers": {"X-Key": "env:DATABASE_URL"}})},
     "DATABASE_URL is not one endpoints may read"),
    ({"kind": "python", "python_path": "tools_app.tools.example_tools.calculator",
      "config": '{"a": 1}'}, "Python tools have no configuration"),
])
def test_config_is_checked_by_the_kinds_model(alice_client: Client, overrides: dict[str, str],
                                               message: str) -> None:
    response = alice_client.post(reverse("admin:tools_app_toolregistration_add"),
                                 tool_data(**overrides))
    assert response.status_code == 200
    assert any(message in error for error in config_errors(response)), config_errors(response)
    assert not ToolRegistration.objects.exists()


def test_a_valid_http_tool_is_saved_and_the_help_documents_the_shape(
        alice_client: Client) -> None:
    page = alice_client.get(reverse("admin:tools_app_toolregistration_add"))
    assert "max_response_bytes" in page.content.decode()
    assert "after_sequence" in page.content.decode()
    config = {"url": "https://api.example.com/w/{city}",
              "headers": {"Authorization": "env:WEATHER_API_TOKEN"}}
    response = alice_client.post(reverse("admin:tools_app_toolregistration_add"),
                                 tool_data(kind="http", config=json.dumps(config)))
    assert response.status_code == 302
    assert ToolRegistration.objects.get().config == config


def test_a_schema_must_be_valid_against_the_meta_schema(alice_client: Client) -> None:
    schema = {"type": "object", "properties": {"x": {"type": "text"}}}
    response = alice_client.post(reverse("admin:tools_app_toolregistration_add"),
                                 tool_data(json_schema=json.dumps(schema)))
    errors = response.context["adminform"].form.errors["json_schema"]
    assert "not a valid JSON Schema (Draft 2020-12) at /properties/x/type" in errors[0]


def test_import_creates_every_tool_with_its_hash() -> None:
    created = import_tools(OPENAI_TOOLS, kind="mock")
    assert [t.name for t in created] == ["weather", "now"]
    weather = ToolRegistration.objects.get(name="weather")
    assert (weather.kind, weather.description, weather.json_schema, weather.config) == (
        "mock", "Forecast", SCHEMA, {})
    assert weather.version_hash == compute_version_hash(weather)
    # The tool page's versions start with the imported definition.
    assert list(weather.versions.values_list("version_hash", flat=True)) == [
        weather.version_hash]


def test_import_takes_each_tools_own_config() -> None:
    tools = [{"name": "weather", "inputSchema": SCHEMA,
              "x-agentforge-config": {"url": "https://api.example.com/w/{city}"}}]
    [tool] = import_tools({"tools": tools}, kind="http")
    assert tool.config == {"url": "https://api.example.com/w/{city}"}


def test_import_lists_every_problem_and_imports_nothing() -> None:
    ToolRegistration.objects.create(name="now", kind="mock", json_schema=SCHEMA,
                                    version_hash="x")
    with pytest.raises(ToolImportError) as caught:
        import_tools(OPENAI_TOOLS, kind="mock")
    assert caught.value.problems == [("now", "a tool of this name is already registered")]

    bad = [*OPENAI_TOOLS, {"name": "bad name", "input_schema": {"type": "string"}}]
    with pytest.raises(ToolImportError) as caught:
        import_tools(bad, kind="mock")
    reasons = dict(caught.value.problems)["tool 3 ('bad name')"]
    assert "providers reject" in reasons or "not an object schema" in reasons
    assert len(caught.value.problems) == 2  # both problems of that tool

    with pytest.raises(ToolImportError) as caught:
        import_tools(OPENAI_TOOLS, kind="http", default_config={"url": "ftp://x"})
    assert [tool for tool, _ in caught.value.problems] == ["tool 1 ('weather')",
                                                           "tool 2 ('now')"]
    assert "configuration: url:" in caught.value.problems[0][1]
    assert ToolRegistration.objects.count() == 1


def test_the_command_imports_a_file(tmp_path: Any) -> None:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(OPENAI_TOOLS))
    out = io.StringIO()
    call_command("import_tools", str(path), "--kind", "http", "--config",
                 '{"url": "https://api.example.com/x"}', stdout=out)
    assert "created 2 http tools: weather, now" in out.getvalue()
    with pytest.raises(CommandError, match="nothing imported:\n  now: a tool of this name"):
        call_command("import_tools", str(path))


def test_the_admin_import_page_reports_problems_escaped(alice_client: Client) -> None:
    bad = [{"name": "<script>alert(1)</script>", "inputSchema": SCHEMA}]
    response = alice_client.post(reverse(IMPORT_URL), {
        "definitions": json.dumps(bad), "kind": "mock", "config": "{}"})
    body = response.content.decode()
    assert "Nothing was imported: 1 problem" in body
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;" in body
    assert not ToolRegistration.objects.exists()


def test_the_admin_import_page_takes_an_upload(alice_client: Client) -> None:
    upload = io.BytesIO(json.dumps(OPENAI_TOOLS).encode())
    upload.name = "tools.json"
    response = alice_client.post(reverse(IMPORT_URL), {
        "file": upload, "kind": "mock", "config": '{"result": "canned"}'})
    assert response.status_code == 302
    assert ToolRegistration.objects.get(name="now").config == {"result": "canned"}


def test_only_staff_import(bob_client: Client) -> None:
    response = bob_client.post(reverse(IMPORT_URL), {
        "definitions": json.dumps(OPENAI_TOOLS), "kind": "mock", "config": "{}"})
    assert response.status_code == 302  # to the admin login
    assert "/login/" in response["Location"]
    assert not ToolRegistration.objects.exists()


def test_definition_and_configuration_problems_are_listed_together() -> None:
    tools = [{"name": "bad name", "inputSchema": SCHEMA},
             {"name": "no_url", "inputSchema": SCHEMA, "x-agentforge-config": {}}]
    with pytest.raises(ToolImportError) as caught:
        import_tools(tools, kind="http", default_config={"url": "https://api.example.com/"})
    assert [tool for tool, _ in caught.value.problems] == ["tool 1 ('bad name')",
                                                           "tool 2 ('no_url')"]
    assert "configuration: url: Field required" in caught.value.problems[1][1]
    assert not ToolRegistration.objects.exists()


def test_a_tools_member_that_is_not_a_list_is_one_problem() -> None:
    with pytest.raises(ToolImportError) as caught:
        import_tools({"tools": 5}, kind="mock")
    assert caught.value.problems == [("(document)", '"tools" must be a list of tools')]


# A mock template may name only the tool's arguments: a placeholder no call can fill is
# refused where the tool is defined, not found out when a run calls it.
TEMPLATED = {"template": True, "result": {"forecast": "Sunny in {town}", "city": "{city}"}}


def test_import_refuses_a_template_naming_an_argument_the_tool_does_not_have() -> None:
    tools = [{"name": "weather", "inputSchema": SCHEMA, "x-agentforge-config": TEMPLATED},
             {"name": "echo", "inputSchema": SCHEMA,
              "x-agentforge-config": {"template": True, "result": "{city.name} ok"}},
             {"name": "plain", "inputSchema": SCHEMA,  # not a template: literal braces
              "x-agentforge-config": {"result": "Sunny in {town}"}}]
    with pytest.raises(ToolImportError) as caught:
        import_tools(tools, kind="mock")

    assert caught.value.problems == [
        ("tool 1 ('weather')", "configuration: result: the placeholder {town} names no "
                               "argument of this tool (its arguments are city)")]
    assert not ToolRegistration.objects.exists()


def test_a_default_template_is_checked_against_each_tool_and_sequence_steps_too() -> None:
    config = {"sequence": [{"result": "first"},
                           {"template": True, "error": "{city} and {units} are down"}]}
    with pytest.raises(ToolImportError) as caught:
        import_tools(OPENAI_TOOLS, kind="mock", default_config=config)

    assert caught.value.problems == [
        ("tool 1 ('weather')", "configuration: sequence.1.error: the placeholder {units} "
                               "names no argument of this tool (its arguments are city)"),
        ("tool 2 ('now')", "configuration: sequence.1.error: the placeholder {city} names "
                           "no argument of this tool (it has no arguments)"),
        ("tool 2 ('now')", "configuration: sequence.1.error: the placeholder {units} "
                           "names no argument of this tool (it has no arguments)")]


def test_the_command_names_the_placeholder_and_the_tools_arguments(tmp_path: Any) -> None:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps([{"name": "weather", "inputSchema": SCHEMA}]))
    with pytest.raises(CommandError) as caught:
        call_command("import_tools", str(path), "--config", json.dumps(TEMPLATED))
    assert str(caught.value) == (
        "nothing imported:\n  tool 1 ('weather'): configuration: result: the placeholder "
        "{town} names no argument of this tool (its arguments are city)")
    assert not ToolRegistration.objects.exists()


def test_the_admin_form_and_the_models_clean_refuse_such_a_template(
    alice_client: Client,
) -> None:
    response = alice_client.post(reverse("admin:tools_app_toolregistration_add"),
                                 tool_data(config=json.dumps(TEMPLATED)))
    assert response.status_code == 200
    assert config_errors(response) == [
        "result: the placeholder {town} names no argument of this tool (its arguments "
        "are city)"]
    assert not ToolRegistration.objects.exists()

    tool = ToolRegistration(name="forecast", kind="mock", json_schema=SCHEMA,
                            config=TEMPLATED)
    with pytest.raises(ValidationError) as caught:
        tool.full_clean()
    assert caught.value.message_dict == {"config": [
        "result: the placeholder {town} names no argument of this tool (its arguments "
        "are city)"]}
    tool.config = {"template": True, "result": {"forecast": "Sunny in {city}"}}
    tool.full_clean()  # fits: no error


def test_a_schema_composed_of_others_is_not_second_guessed() -> None:
    composed = {"type": "object", "allOf": [{"properties": {"town": {"type": "string"}}}]}
    [tool] = import_tools([{"name": "composed", "inputSchema": composed}], kind="mock",
                          default_config=TEMPLATED)
    assert tool.config == TEMPLATED
