"""What a person sets on a Python tool in the admin (approval, timeout, idempotency,
enabled) survives every sync, `seed_demo` (run by each `make run`) included; the code
still updates what it defines, and its own option changes still apply where no one set
the field."""

from __future__ import annotations

import io
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib import admin
from django.core.management import call_command
from django.test import RequestFactory

from tools_app.models import ToolRegistration
from tools_app.tools.registry import compute_version_hash, sync_tools

pytestmark = pytest.mark.django_db

DEMO = ["tools_app.tools.example_tools"]


def edit_in_admin(name: str, **changes: Any) -> ToolRegistration:
    """Save the tool as the admin's change form does (its clean() sets the version hash),
    `changes` as the changed fields."""
    tool = ToolRegistration.objects.get(name=name)
    for field, value in changes.items():
        setattr(tool, field, value)
    tool.version_hash = compute_version_hash(tool)
    model_admin = admin.site._registry[ToolRegistration]
    request = RequestFactory().post("/admin/")
    model_admin.save_model(request, tool, SimpleNamespace(changed_data=list(changes)),
                           change=True)
    return tool


def test_admin_edits_survive_a_sync() -> None:
    sync_tools(DEMO)
    edit_in_admin("get_weather", requires_approval=True, timeout_seconds=5.0)
    edit_in_admin("lookup_order", enabled=False)

    report = sync_tools(DEMO)

    weather = ToolRegistration.objects.get(name="get_weather")
    assert (weather.requires_approval, weather.timeout_seconds) == (True, 5.0)
    assert ToolRegistration.objects.get(name="lookup_order").enabled is False
    assert report.kept == {"get_weather": ["requires_approval", "timeout_seconds"],
                           "lookup_order": ["enabled"]}
    assert "kept as set in the admin: get_weather (requires_approval, timeout_seconds)" in (
        report.summary())


def test_seed_demo_keeps_them_too() -> None:
    call_command("seed_demo", stdout=io.StringIO())
    edit_in_admin("get_weather", requires_approval=True)

    call_command("seed_demo", stdout=io.StringIO())

    assert ToolRegistration.objects.get(name="get_weather").requires_approval is True


def test_a_field_no_one_set_still_follows_the_code() -> None:
    sync_tools(DEMO)
    ToolRegistration.objects.filter(name="get_weather").update(
        requires_approval=True, description="edited behind sync's back")

    report = sync_tools(DEMO)

    weather = ToolRegistration.objects.get(name="get_weather")
    assert weather.requires_approval is False  # never set in the admin: the code's value
    assert weather.description.startswith("Current weather")
    assert report.kept == {}
    assert "get_weather" in report.updated


def test_a_kept_value_is_part_of_the_tools_version() -> None:
    sync_tools(DEMO)
    before = ToolRegistration.objects.get(name="get_weather").version_hash
    after = edit_in_admin("get_weather", requires_approval=True).version_hash
    assert after != before

    sync_tools(DEMO)
    assert ToolRegistration.objects.get(name="get_weather").version_hash == after
