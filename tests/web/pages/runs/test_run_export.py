"""Exporting a run as a fixture from its page and the API (only for those who may see
it), and an imported fixture's run page, its untrusted text escaped."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.contrib.auth.models import AbstractUser
from django.core.management import call_command
from django.test import Client

from tests.web.support import Api, Tree, error_of, inside_hx_disable
from tools_app.models import Run
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db


def test_the_run_page_links_its_export(bob_client: Client, finished: Run) -> None:
    tree = Tree(bob_client.get(f"/runs/{finished.pk}/").content.decode())
    assert tree.by_id("export-run").attrs["href"] == f"/runs/{finished.pk}/export.json"

    response = bob_client.get(f"/runs/{finished.pk}/export.json")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json; charset=utf-8"
    assert response["Content-Disposition"] == (
        f'attachment; filename="run-{finished.pk}.agentforge.json"')
    fixture = json.loads(response.content)
    assert (fixture["format"], fixture["version"], fixture["run"]["id"]) == (
        "agentforge-run", 1, str(finished.pk))
    assert [c["tool_name"] for c in fixture["rounds"][0]["calls"]] == ["get_weather"] * 2


def test_the_api_exports_the_same(bob: AbstractUser, finished: Run) -> None:
    response = Api(create_token(bob, "ci")[1]).get(f"/api/runs/{finished.pk}/export")

    assert response.status_code == 200
    fixture = response.json()
    assert fixture["format"] == "agentforge-run"
    assert len(fixture["rounds"]) == 2


def test_only_those_who_may_see_a_run_may_export_it(
    finished: Run, charlie: AbstractUser, alice_client: Client,
) -> None:
    other = Client()
    other.force_login(charlie)
    assert other.get(f"/runs/{finished.pk}/export.json").status_code == 404
    api = Api(create_token(charlie, "ci")[1])
    assert error_of(api.get(f"/api/runs/{finished.pk}/export"), 404)["code"] == "not_found"
    assert alice_client.get(f"/runs/{finished.pk}/export.json").status_code == 200  # staff


def test_an_imported_run_renders_escaped(
    finished: Run, bob: AbstractUser, bob_client: Client, tmp_path: Path,
) -> None:
    fixture = json.loads(bob_client.get(f"/runs/{finished.pk}/export.json").content)
    hostile = "<img src=x onerror=alert(1)>"
    fixture["run"]["title"] = hostile
    fixture["run"]["final_text"] = hostile
    fixture["rounds"][0]["calls"][0]["result_text"] = hostile
    fixture["rounds"][0]["ai_text"] = hostile
    fixture["exported_at"] = hostile
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(fixture), encoding="utf-8")

    call_command("import_run", str(path), "--user", "bob", stdout=io.StringIO())

    imported = Run.objects.exclude(pk=finished.pk).get()
    page = bob_client.get(f"/runs/{imported.pk}/").content.decode()
    assert hostile not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    shown = Tree(page).texts_containing("onerror")
    assert shown
    # The page's <title> (escaped, and never parsed as HTML) is outside htmx's reach.
    assert [(element.tag if element else None) for _, element in shown
            if not inside_hx_disable(element)] == ["title"]
    assert "Imported from a fixture" in page
