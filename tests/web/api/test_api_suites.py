"""Suites in the JSON API (issue 41): a script holding only a token creates a suite and a
case, starts a suite run on two endpoints and reads its matrix; bad cases and
configurations are 400s naming the case and the field; a suite run is its starter's."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.tasks import default_task_backend

from tests.suites.support import execute_inline, weather_case
from tests.suites.world import endpoints, fake_models, suite_world
from tests.web.support import Api, error_of
from tools_app.models import ModelEndpoint, SuiteRun
from tools_app.suites import runner
from tools_app.suites.tasks import drive_suite_run
from tools_app.web.api.tokens import create_token

__all__ = ["endpoints", "fake_models", "suite_world"]  # fixtures of the suites' world


@pytest.fixture
def api(bob: User) -> Api:
    return Api(create_token(bob, "ci")[1])


def answer(response: Any, status: int) -> Any:
    assert response.status_code == status, response.content
    return response.json()


def test_a_token_creates_a_suite_and_a_case_runs_it_and_reads_the_matrix(
        api: Api, suite_world: dict[str, ModelEndpoint],
        django_capture_on_commit_callbacks: Any) -> None:
    created = answer(api.post("/api/suites", {
        "name": "weather", "cases": [weather_case("paris", "Weather in Paris?")]}), 201)
    assert created["cases"][0]["assertions"][1]["check"] == {"kind": "equals",
                                                             "value": "Paris"}
    answer(api.post("/api/suites/weather/cases", weather_case("lima", "Lima?")), 201)
    assert [c["name"] for c in answer(api.get("/api/suites/weather"), 200)["cases"]] == [
        "paris", "lima"]

    with django_capture_on_commit_callbacks(execute=True):
        started = answer(api.post("/api/suites/weather/runs",
                                  {"endpoints": ["good", "bad"], "repeat": 2}), 201)

    assert started["url"] == f"/suite-runs/{started['id']}/"
    [enqueued] = default_task_backend.results  # type: ignore[attr-defined]
    assert (enqueued.task.name, enqueued.args) == (drive_suite_run.name, [started["id"]])
    matrix = answer(api.get(f"/api/suite-runs/{started['id']}"), 200)
    assert (matrix["status"], matrix["passed"]) == ("running", None)
    assert {c["evaluated"] for c in matrix["cells"]} == {0}
    runner.drive(SuiteRun.objects.get(pk=started["id"]), wait=execute_inline)

    matrix = answer(api.get(f"/api/suite-runs/{started['id']}"), 200)
    assert (matrix["status"], matrix["passed"]) == ("finished", False)
    assert matrix["cases"] == ["paris", "lima"]
    assert matrix["endpoints"] == ["good", "bad"]
    cells = {(c["case"], c["endpoint"]): c for c in matrix["cells"]}
    assert cells[("paris", "good")]["pass_rate"] == 1.0
    assert cells[("paris", "bad")]["pass_rate"] == 0.0
    assert cells[("lima", "good")]["meets_bar"] is True
    assert cells[("paris", "good")]["mean_tokens"] > 0


def test_a_bad_case_is_refused_naming_the_case_and_field(
        api: Api, suite_world: dict[str, ModelEndpoint]) -> None:
    bad = weather_case("paris", "Weather?") | {"assertions": [
        {"kind": "arguments_match", "tool": "get_weather", "pointer": "city",
         "check": {"kind": "equals", "value": "Paris"}}]}

    error = error_of(api.post("/api/suites", {"name": "s", "cases": [bad]}), 400)

    assert error["message"].startswith("case 'paris' (cases[0]), field assertions[0].pointer")
    assert "not a JSON pointer" in error["message"]
    answer(api.post("/api/suites", {"name": "s"}), 201)
    error = error_of(api.post("/api/suites/s/cases", bad), 400)
    assert "assertions[0].pointer" in error["message"]


def test_names_in_use_and_unknown_suites(api: Api, suite_world: dict[str, ModelEndpoint]
                                         ) -> None:
    answer(api.post("/api/suites", {"name": "s", "cases": [weather_case("a", "A?")]}), 201)

    assert error_of(api.post("/api/suites", {"name": "s"}), 409)["field"] == "name"
    assert error_of(api.post("/api/suites/s/cases", weather_case("a", "A?")), 409)
    assert error_of(api.get("/api/suites/nope"), 404)
    assert error_of(api.post("/api/suites/nope/runs", {"endpoints": ["good"]}), 404)
    error = error_of(api.post("/api/suites/s/runs", {"endpoints": ["nope"]}), 400)
    assert (error["field"], error["message"]) == ("endpoints", "no endpoint named 'nope'")


def test_a_suite_run_is_read_by_its_starter_and_staff_only(
        api: Api, alice: User, charlie: User,
        suite_world: dict[str, ModelEndpoint]) -> None:
    answer(api.post("/api/suites", {"name": "s", "cases": [weather_case("a", "A?")]}), 201)
    started = answer(api.post("/api/suites/s/runs", {"endpoints": ["good"]}), 201)
    path = f"/api/suite-runs/{started['id']}"

    assert error_of(Api(create_token(charlie, "ci")[1]).get(path), 404)
    answer(Api(create_token(alice, "ci")[1]).get(path), 200)
    assert error_of(api.get("/api/suite-runs/not-a-uuid"), 404)
