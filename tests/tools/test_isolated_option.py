"""The "isolated" option of a tool in the registry: set by @tool(isolated=True) or in
the admin (and kept by sync as any person's edit), only for Python tools (the admin's
form and the API refuse it for the others, with the same message), shown by the API,
and part of the version hash only when set (existing definitions keep their hashes)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import AbstractUser
from django.test import Client, RequestFactory
from django.urls import reverse

from tests.runs.support import CITY_SCHEMA
from tests.web.support import Api, error_of
from tools_app.models import ToolRegistration
from tools_app.tools.registry import compute_version_hash, sync_tools, tool_definition
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db

MODULE = "tests.engine.isolated_tools"
REFUSAL = ("Only Python tools run in an isolated worker process (the other kinds never "
           "run code of this server).")
MOCK = {"name": "weather", "kind": "mock", "json_schema": CITY_SCHEMA,
        "config": {"result": "Sunny"}}


def registered(name: str) -> ToolRegistration:
    return ToolRegistration.objects.get(name=name)


def test_the_decorator_s_option_is_registered() -> None:
    sync_tools([MODULE])
    assert registered("sandboxed_sum").isolated is True
    assert registered("add").isolated is False


def test_the_hash_covers_the_option_only_when_set() -> None:
    sync_tools([MODULE])
    tool = registered("add")
    assert "isolated" not in tool_definition(tool)
    before = compute_version_hash(tool)
    tool.isolated = True
    assert tool_definition(tool)["isolated"] is True
    assert compute_version_hash(tool) != before


def test_an_admin_s_choice_survives_a_sync() -> None:
    sync_tools([MODULE])
    tool = registered("add")
    tool.isolated = True
    tool.version_hash = compute_version_hash(tool)
    admin.site._registry[ToolRegistration].save_model(
        RequestFactory().post("/admin/"), tool, SimpleNamespace(changed_data=["isolated"]),
        change=True)

    report = sync_tools([MODULE])

    assert registered("add").isolated is True
    assert report.kept == {"add": ["isolated"]}
    assert registered("add").versions.filter(definition__isolated=True).exists()


def test_the_admin_sets_it_on_a_python_tool_and_refuses_it_for_a_mock_one(
        alice_client: Client) -> None:
    sync_tools([MODULE])
    tool = registered("add")
    page = alice_client.get(reverse("admin:tools_app_toolregistration_change",
                                    args=[tool.pk]))
    assert 'name="isolated"' in page.content.decode()
    form = page.context["adminform"].form
    data: dict[str, Any] = {name: value for name, value in form.initial.items()
                            if value is not None and name in form.fields}
    data |= {"json_schema": page.context["adminform"].form["json_schema"].value(),
             "config": "{}", "isolated": "on", "timeout_seconds": ""}
    data = {name: value for name, value in data.items() if value is not False}
    saved = alice_client.post(reverse("admin:tools_app_toolregistration_change",
                                      args=[tool.pk]), data)
    assert saved.status_code == 302, saved.context["adminform"].form.errors
    assert registered("add").isolated is True

    refused = alice_client.post(reverse("admin:tools_app_toolregistration_add"), {
        "name": "weather", "kind": "mock", "python_path": "", "description": "",
        "json_schema": '{"type": "object", "properties": {}}', "config": '{"result": "x"}',
        "return_behavior": "to_llm", "timeout_seconds": "", "isolated": "on",
        "enabled": "on"})
    assert refused.status_code == 200
    assert refused.context["adminform"].form.errors["isolated"] == [REFUSAL]


def test_the_api_shows_it_and_refuses_it_for_a_mock_tool(alice: AbstractUser) -> None:
    sync_tools([MODULE])
    api = Api(create_token(alice, "ci")[1])
    shown = api.get("/api/tools/sandboxed_sum").json()
    assert shown["isolated"] is True

    error = error_of(api.post("/api/tools", MOCK | {"isolated": True}), 400)
    assert (error["field"], error["message"]) == ("isolated", f"isolated: {REFUSAL}")
    assert not ToolRegistration.objects.filter(name="weather").exists()
