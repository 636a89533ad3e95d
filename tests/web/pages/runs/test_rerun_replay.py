"""Replay modes of a rerun from the API and the run page; an imported run's code and
endpoint are never used live unless they are this server's."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.core.management import call_command
from django.test import Client

from tests.runs.support import execute
from tests.web.support import Api, Tree, error_of
from tools_app.models import Run, ToolCall
from tools_app.runs.debugger.run_files import export_run

pytestmark = pytest.mark.django_db


def test_the_api_reruns_with_replay_modes(bob_api: Api, finished: Run) -> None:
    ToolCall.objects.filter(run=finished, call_index=0).update(result_text="recorded: sunny")

    made = bob_api.post(f"/api/runs/{finished.pk}/rerun", {
        "snapshot": "same", "model": "recorded", "tools": "live", "on_divergence": "stop"})

    assert made.status_code == 201, made.content
    body = made.json()
    assert body["replay"] == {"model": "recorded", "tools": "live", "on_divergence": "stop"}
    new = Run.objects.get(pk=body["id"])
    assert new.parent_id == finished.pk
    assert execute(new) == "failed"
    detail = bob_api.get(f"/api/runs/{new.pk}").json()
    assert detail["error"]["type"] == "ReplayDivergence"
    assert "at round 1, call 1 (get_weather): the result differs" in detail["error"]["message"]


@pytest.mark.parametrize(("body", "field"), [
    ({"snapshot": "yesterday"}, "snapshot"),
    ({"model": "psychic"}, "model"),
    ({"tools": ["live"]}, "tools"),
    ({"on_divergence": "shrug"}, "on_divergence"),
])
def test_the_api_refuses_unknown_modes(bob_api: Api, finished: Run, body: dict[str, Any],
                                       field: str) -> None:
    error = error_of(bob_api.post(f"/api/runs/{finished.pk}/rerun", body), 400)
    assert (error["code"], error["field"]) == ("invalid_field", field)
    assert error["message"].startswith(f"{field} must be one of ")
    assert not Run.objects.filter(parent=finished).exists()


def test_the_run_page_offers_the_modes_and_shows_them(
    bob_client: Client, finished: Run,
) -> None:
    tree = Tree(bob_client.get(f"/runs/{finished.pk}/").content.decode())
    options = {e.parent.attrs.get("name") if e.parent else None: [] for e in tree.tags("option")}
    for element in tree.tags("option"):
        name = element.parent.attrs.get("name") if element.parent else None
        options[name].append(element.attrs.get("value"))
    assert options["model"] == ["live", "recorded"]
    assert options["tools"] == ["live", "recorded", "mock"]
    assert options["on_divergence"] == ["stop", "live"]

    response = bob_client.post(f"/runs/{finished.pk}/rerun/", {
        "mode": "as_it_was", "model": "recorded", "tools": "recorded",
        "on_divergence": "stop"})

    new = Run.objects.get(parent=finished)
    assert response["Location"] == f"/runs/{new.pk}/"
    assert execute(new) == "succeeded"
    assert new.final_text == finished.final_text
    page = bob_client.get(f"/runs/{new.pk}/").content.decode()
    assert "model <strong>recorded</strong>, tools <strong>recorded</strong>" in page


def test_a_divergence_gone_live_is_shown_on_the_page(bob_client: Client,
                                                     finished: Run) -> None:
    ToolCall.objects.filter(run=finished, call_index=0).update(result_text="<b>sunny</b>")
    bob_client.post(f"/runs/{finished.pk}/rerun/", {
        "mode": "as_it_was", "model": "recorded", "tools": "live", "on_divergence": "live"})
    new = Run.objects.get(parent=finished)
    assert execute(new) == "succeeded"

    page = bob_client.get(f"/runs/{new.pk}/").content.decode()

    box = Tree(page).by_id("replay-divergence")
    assert "hx-disable" in box.attrs
    assert "at round 1, call 1 (get_weather): the result differs" in page
    assert "<b>sunny</b>" not in page


def test_a_bad_mode_from_the_page_says_why(bob_client: Client, finished: Run) -> None:
    response = bob_client.post(f"/runs/{finished.pk}/rerun/", {
        "mode": "as_it_was", "model": "psychic"}, follow=True)
    assert "Cannot rerun: model must be one of recorded, live, not &#x27;psychic&#x27;" in (
        response.content.decode())


@pytest.fixture
def imported(finished: Run, bob: AbstractUser, tmp_path: Path) -> Run:
    fixture = export_run(finished)
    fixture["snapshot"]["tools"][0]["python_path"] = "os.system"
    fixture["snapshot"]["endpoint"]["kind"] = "openai"
    path = tmp_path / "fixture.json"
    path.write_text(json.dumps(fixture), encoding="utf-8")
    call_command("import_run", str(path), "--user", "bob", stdout=io.StringIO())
    return Run.objects.exclude(pk=finished.pk).get()


@pytest.mark.parametrize(("options", "words"), [
    ({}, "its tools get_weather are not registered here"),
    ({"model": "recorded", "tools": "recorded", "on_divergence": "live"},
     "its tools get_weather are not registered here"),
    ({"model": "live", "tools": "recorded"}, "its endpoint is not this server's"),
])
def test_an_imported_run_never_runs_foreign_code_or_endpoints(
    bob_api: Api, imported: Run, options: dict[str, str], words: str,
) -> None:
    error = error_of(bob_api.post(f"/api/runs/{imported.pk}/rerun", options), 409)
    assert words in error["message"]


def test_an_imported_run_replays_from_its_recording(bob_api: Api, imported: Run) -> None:
    made = bob_api.post(f"/api/runs/{imported.pk}/rerun",
                        {"model": "recorded", "tools": "recorded"})
    assert made.status_code == 201, made.content
    new = Run.objects.get(pk=made.json()["id"])
    assert "imported" in new.snapshot
    assert execute(new) == "succeeded"
    assert new.final_text == imported.final_text
