"""The runs filter loop_detected: runs in which loop health flagged a round (the count the
recorder keeps with the LoopDetected events), in the API, the exports and the /runs/
page; a bad value is a 400 naming the filter. A flagged run's row in /runs/ has a
"loop detected" badge."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.runs.support import execute
from tests.web.support import Api, Element, Tree, error_of, start_run
from tools_app.models import ErrorPolicy, Run, ToolRegistration
from tools_app.web.api.tokens import create_token

pytestmark = [pytest.mark.django_db, pytest.mark.both]

PARIS = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}


@pytest.fixture
def runs(bob: AbstractUser, make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
         policy: ErrorPolicy) -> dict[str, Run]:
    """bob's runs: one whose model repeats a call (told, then stopped by the default
    policy), one noted only (the policy's action for repeated calls is a note), one
    that asks different things, one still queued."""
    weather = [demo_tools["get_weather"]]
    looping = start_run(bob, make_endpoint([PARIS] * 6 + [{"text": "done"}], name="loop"),
                        weather, policy, "Looping")
    noting = ErrorPolicy.objects.create(name="Notes only", loop_repeat_action="note",
                                        loop_repeat_stop_at=None)
    noted = start_run(bob, make_endpoint([PARIS] * 3 + [{"text": "done"}], name="noted"),
                      weather, noting, "Noted")
    varied = start_run(bob, make_endpoint(
        [{"tool_calls": [{"name": "get_weather", "arguments": {"city": city}}]}
         for city in ("Paris", "London", "Tokyo")] + [{"text": "done"}], name="varied"),
        weather, policy, "Varied")
    queued = start_run(bob, make_endpoint([{"text": "hi"}], name="queued"), [], policy,
                       "Queued")
    for run in (looping, noted, varied):
        execute(run)
    return {name: Run.objects.get(pk=run.pk) for name, run in (
        ("looping", looping), ("noted", noted), ("varied", varied), ("queued", queued))}


def test_the_recorder_counts_the_flagged_rounds(runs: dict[str, Run]) -> None:
    assert {name: run.loop_detections for name, run in runs.items()} == {
        "looping": 5, "noted": 1, "varied": 0, "queued": 0}


def names(api: Api, runs: dict[str, Run], query: str) -> list[str]:
    response = api.get(f"/api/runs?{query}")
    assert response.status_code == 200, response.content
    by_id = {str(run.pk): name for name, run in runs.items()}
    return sorted(by_id[r["id"]] for r in response.json()["runs"])


def test_the_api_filters_on_loop_detected(bob: AbstractUser, runs: dict[str, Run]) -> None:
    api = Api(create_token(bob, "ci")[1])

    assert names(api, runs, "loop_detected=true") == ["looping", "noted"]
    assert names(api, runs, "loop_detected=false") == ["queued", "varied"]
    assert names(api, runs, "loop_detected=true&status=failed") == ["looping"]
    assert names(api, runs, "loop_detected=true&error_type=LoopDetectedError") == ["looping"]


@pytest.mark.parametrize("value", ["yes", "True", ""])
def test_a_bad_value_names_the_filter(bob: AbstractUser, runs: dict[str, Run],
                                      value: str) -> None:
    error = error_of(Api(create_token(bob, "ci")[1]).get(f"/api/runs?loop_detected={value}"),
                     400)
    assert error["field"] == "loop_detected"
    assert "loop_detected must be true or false" in error["message"]


def test_the_export_filters_on_loop_detected(bob: AbstractUser, runs: dict[str, Run]) -> None:
    response = Api(create_token(bob, "ci")[1]).get("/api/runs/export.jsonl?loop_detected=true")
    assert response.status_code == 200
    rows = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert sorted(row["id"] for row in rows) == sorted(
        str(runs[name].pk) for name in ("looping", "noted"))


def test_the_page_filters_and_keeps_the_choice(alice_client: Client,
                                               runs: dict[str, Run]) -> None:
    response = alice_client.get("/runs/?loop_detected=true")
    assert response.status_code == 200
    html = response.content.decode()
    assert sorted(re.findall(r'<a href="/runs/[0-9a-f-]{36}/">([^<]+)</a>', html)) == [
        "Looping", "Noted"]
    assert '<option value="true" selected>loop detected</option>' in html
    assert 'href="/runs/export.csv?loop_detected=true&amp;tryit=false"' in html


def test_the_bad_value_is_said_on_the_page(alice_client: Client, runs: dict[str, Run]) -> None:
    response = alice_client.get("/runs/?loop_detected=maybe")
    assert "loop_detected must be true or false" in response.content.decode()



def loop_badges(tree: Tree, run: Run) -> list[Element]:
    row = tree.by_id(f"run-row-{run.pk}")
    return [e for e in tree.elements if "loop-badge" in (e.attrs.get("class") or "")
            and row in e.ancestors_or_self()]


def badge_text(tree: Tree, badge: Element) -> str:
    return "".join(text for text, element in tree.texts if element is badge)


def test_a_flagged_runs_row_has_the_loop_badge(alice_client: Client,
                                               runs: dict[str, Run]) -> None:
    tree = Tree(alice_client.get("/runs/").content.decode())
    badges = {name: loop_badges(tree, run) for name, run in runs.items()}
    assert {name: len(found) for name, found in badges.items()} == {
        "looping": 1, "noted": 1, "varied": 0, "queued": 0}
    [looping] = badges["looping"]
    assert looping.attrs["data-loop-detections"] == "5"
    assert badge_text(tree, looping) == "loop detected"
    assert (looping.attrs["title"] or "").startswith("Loop health flagged this run 5 times")
    [noted] = badges["noted"]
    assert (noted.attrs["title"] or "").startswith("Loop health flagged this run 1 time ")
    # the row a live row polls for is the same
    row = alice_client.get(f"/runs/{runs['looping'].pk}/row/").content.decode()
    assert 'data-loop-detections="5"' in row
