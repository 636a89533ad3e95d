"""The suites' pages (issue 41): "Save as a test case" on a run, the case's edit page with
its errors, starting a suite run, the matrix (and its htmx partial), a cell's failing
runs, and two suite runs compared."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.tasks import default_task_backend
from django.test import Client

from tests.runs.support import execute, start
from tests.suites.support import execute_inline, weather_case
from tests.suites.world import endpoints, fake_models, suite_world
from tools_app.models import (
    ErrorPolicy,
    ModelEndpoint,
    Suite,
    SuiteCase,
    SuiteCellRun,
    SuiteRun,
    ToolRegistration,
)
from tools_app.suites import runner
from tools_app.suites.files import SuiteFile, save_suite_file

__all__ = ["endpoints", "fake_models", "suite_world"]  # fixtures of the suites' world


@pytest.fixture
def bob_client(client: Client, bob: User) -> Client:
    client.force_login(bob)
    return client


def finished_run(owner: User, endpoint: ModelEndpoint, question: str = "Weather in Paris?"
                 ) -> Any:
    run = start(endpoint, [ToolRegistration.objects.get(name="get_weather")],
                ErrorPolicy.objects.get(is_default=True),
                question)
    run.created_by = owner
    run.save(update_fields=["created_by"])
    assert execute(run) == "succeeded", run.error_message
    return run


def test_a_run_saved_as_a_test_case_gets_its_conversation_and_calls_as_expectations(
        bob_client: Client, bob: User, suite_world: dict[str, ModelEndpoint]) -> None:
    run = finished_run(bob, suite_world["good"])
    page = bob_client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="save-case-form"' in page
    assert f'action="/runs/{run.pk}/save-case/"' in page

    response = bob_client.post(f"/runs/{run.pk}/save-case/",
                               {"suite": "weather", "case": "paris"})

    case = SuiteCase.objects.get(suite__name="weather", name="paris")
    assert response["Location"] == f"/suites/{case.suite_id}/cases/{case.pk}/"
    assert case.source_run_id == run.pk
    assert case.messages == [{"role": "user", "content": "Weather in Paris?"}]
    assert case.tools == ["get_weather"]
    assert case.assertions == [
        {"kind": "call_sequence", "tools": ["get_weather"], "match": "exact"},
        {"kind": "arguments_match", "tool": "get_weather", "pointer": "",
         "check": {"kind": "equals", "value": {"city": "Paris"}}, "calls": "any"},
        {"kind": "no_error", "error_type": ""}]
    edit = bob_client.get(response["Location"]).content.decode()
    assert "The model makes exactly these calls, in this order: get_weather." in edit
    assert "In a call of get_weather, the arguments are equal to {&quot;city&quot;: " in edit
    # A second save goes into the same suite, chosen by name.
    bob_client.post(f"/runs/{run.pk}/save-case/", {"suite": "weather", "case": "again"})
    assert Suite.objects.get().cases.count() == 2
    names = bob_client.get("/suites/names/").content.decode()
    assert '<option value="weather">' in names


def test_saving_needs_a_suite_name_and_a_free_case_name(
        bob_client: Client, bob: User, suite_world: dict[str, ModelEndpoint]) -> None:
    run = finished_run(bob, suite_world["good"])

    page = bob_client.post(f"/runs/{run.pk}/save-case/", {"suite": " ", "case": "x"},
                           follow=True).content.decode()
    assert "Cannot save the run as a test case: A suite needs a name" in page
    bob_client.post(f"/runs/{run.pk}/save-case/", {"suite": "s", "case": "x"})
    page = bob_client.post(f"/runs/{run.pk}/save-case/", {"suite": "s", "case": "x"},
                           follow=True).content.decode()
    assert "already has a case named &#x27;x&#x27;" in page
    assert SuiteCase.objects.count() == 1
    # A new suite whose case is refused is not left behind, empty.
    page = bob_client.post(f"/runs/{run.pk}/save-case/", {"suite": "new", "case": "c" * 5000},
                           follow=True).content.decode()
    assert "Cannot save the run as a test case" in page
    assert list(Suite.objects.values_list("name", flat=True)) == ["s"]


def test_someone_elses_run_cannot_be_saved(client: Client, charlie: User, bob: User,
                                           suite_world: dict[str, ModelEndpoint]) -> None:
    run = finished_run(bob, suite_world["good"])
    client.force_login(charlie)

    assert client.post(f"/runs/{run.pk}/save-case/", {"suite": "s"}).status_code == 404
    assert not Suite.objects.exists()


def case_form(case: SuiteCase, **changes: Any) -> dict[str, str]:
    values = {"name": case.name, "messages": case.messages, "tools": case.tools,
              "tool_modes": case.tool_modes, "assertions": case.assertions} | changes
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}


@pytest.mark.parametrize(("changes", "message"), [
    ({"assertions": "[{"}, "assertions is not valid JSON"),
    ({"assertions": [{"kind": "rounds_at_most", "rounds": 0}]},
     "assertions[0].rounds: Input should be greater than or equal to 1"),
    ({"assertions": [{"kind": "arguments_match", "tool": "t", "pointer": "/a",
                      "check": {"kind": "regex", "pattern": "(("}}]},
     "assertions[0].check.pattern: Value error, not a regular expression"),
    ({"messages": [{"role": "assistant", "content": "hi"}]}, "messages: Value error"),
    ({"tool_modes": {"get_weather": "maybe"}}, "tool_modes.get_weather: Input should be"),
])
def test_the_case_page_refuses_a_bad_edit_with_the_field_and_keeps_the_input(
        bob_client: Client, suite_world: dict[str, ModelEndpoint],
        changes: dict[str, Any], message: str) -> None:
    suite = save_suite_file(SuiteFile.model_validate(
        {"name": "s", "cases": [weather_case("paris", "Weather?")]}))
    case = suite.cases.get()
    before = case.assertions

    response = bob_client.post(f"/suites/{suite.pk}/cases/{case.pk}/", case_form(case, **changes))

    assert response.status_code == 400
    page = response.content.decode()
    assert message.replace("'", "&#x27;") in page
    submitted = case_form(case, **changes)
    field = next(iter(changes))
    kept = re.escape(submitted[field].replace('"', "&quot;"))
    assert re.search(rf'name="{field}"[^>]*>{kept}</textarea>', page)
    case.refresh_from_db()
    assert case.assertions == before


def test_the_case_page_saves_an_edit(bob_client: Client,
                                     suite_world: dict[str, ModelEndpoint]) -> None:
    suite = save_suite_file(SuiteFile.model_validate(
        {"name": "s", "cases": [weather_case("paris", "Weather?")]}))
    case = suite.cases.get()
    assertions = [{"kind": "tool_not_called", "tool": "calculator"}]

    response = bob_client.post(f"/suites/{suite.pk}/cases/{case.pk}/",
                               case_form(case, name="renamed", assertions=assertions))

    assert response.status_code == 302
    case.refresh_from_db()
    assert (case.name, case.assertions) == ("renamed", assertions)
    assert "The model never calls calculator." in bob_client.get(
        f"/suites/{suite.pk}/").content.decode()


def test_a_suite_run_started_from_its_page_shows_its_matrix_and_cells(
        bob_client: Client, suite_world: dict[str, ModelEndpoint],
        django_capture_on_commit_callbacks: Any) -> None:
    suite = save_suite_file(SuiteFile.model_validate(
        {"name": "weather", "cases": [weather_case("paris", "Weather in Paris?")]}))

    response = bob_client.post(f"/suites/{suite.pk}/runs/", {
        "endpoints": ["good", "bad"], "repeat": "2", "tools": "", "concurrency": "4",
        "min_pass_rate": "100"})

    suite_run = SuiteRun.objects.get()
    assert response["Location"] == f"/suite-runs/{suite_run.pk}/"
    running = bob_client.get(response["Location"]).content.decode()
    assert 'hx-trigger="every 2s"' in running  # polls while active
    runner.drive(suite_run, wait=execute_inline)

    page = bob_client.get(response["Location"]).content.decode()
    assert 'hx-trigger="every 2s"' not in page
    assert "1 cell below the bar." in page
    good = re.search(r'data-case="paris" data-endpoint="good">(.*?)</td>', page, re.S)
    bad = re.search(r'data-case="paris" data-endpoint="bad">(.*?)</td>', page, re.S)
    assert good is not None
    assert bad is not None
    assert "100%" in good.group(1)
    assert "0%" in bad.group(1)
    partial = bob_client.get(response["Location"], headers={"HX-Request": "true"})
    assert partial.content.decode().lstrip().startswith('<div id="suite-matrix"')
    cell = suite_run.cells.get(endpoint_name="bad")
    cell_page = bob_client.get(f"/suite-runs/{suite_run.pk}/cells/{cell.pk}/").content.decode()
    assert cell_page.count('class="badge status-failed">failed') == 2
    assert "&quot;Lima&quot; is not equal to &quot;Paris&quot;" in cell_page


def test_a_suite_run_is_its_starters(client: Client, bob: User, charlie: User,
                                     suite_world: dict[str, ModelEndpoint]) -> None:
    suite = save_suite_file(SuiteFile.model_validate(
        {"name": "weather", "cases": [weather_case("paris", "Weather in Paris?")]}))
    suite_run = runner.suite_run_start(suite=suite, config={"endpoints": ["good"]}, user=bob)
    client.force_login(charlie)

    assert client.get(f"/suite-runs/{suite_run.pk}/").status_code == 404
    assert client.get(f"/suite-runs/{suite_run.pk}/compare/?with=x").status_code == 404


def test_two_suite_runs_compared_show_what_regressed(
        bob_client: Client, bob: User, suite_world: dict[str, ModelEndpoint],
        fake_models: Any) -> None:
    suite = save_suite_file(SuiteFile.model_validate(
        {"name": "weather", "cases": [weather_case("paris", "Weather in Paris?")]}))
    before = runner.drive(runner.suite_run_start(
        suite=suite, config={"endpoints": ["good"]}, user=bob), wait=execute_inline)
    ModelEndpoint.objects.filter(name="good").update(model="bad")
    after = runner.drive(runner.suite_run_start(
        suite=suite, config={"endpoints": ["good"]}, user=bob), wait=execute_inline)

    page = bob_client.get(f"/suite-runs/{after.pk}/compare/?with={before.pk}").content.decode()

    assert re.search(r'<ul id="regressed"><li class="fail">paris on good: 100% → 0%</li>', page)
    assert "Nothing newly fixed." in page


def test_the_suites_pages_list_suites_and_cases_and_offer_the_endpoints(
        bob_client: Client, suite_world: dict[str, ModelEndpoint]) -> None:
    assert 'id="no-suites"' in bob_client.get("/suites/").content.decode()
    suite = save_suite_file(SuiteFile.model_validate(
        {"name": "weather <b>x</b>", "cases": [weather_case("paris", "Weather?")]}))

    listing = bob_client.get("/suites/").content.decode()
    assert f'<a href="/suites/{suite.pk}/">weather &lt;b&gt;x&lt;/b&gt;</a></td><td>1</td>' in (
        listing)
    page = bob_client.get(f"/suites/{suite.pk}/").content.decode()
    assert "The model makes exactly these calls, in this order: get_weather." in page
    assert 'In a call of get_weather, /city is equal to &quot;Paris&quot;.' in page
    assert "The run takes at most 2 model rounds." in page
    for name in ("good", "sloppy", "bad"):
        assert f'name="endpoints" value="{name}"' in page


@pytest.mark.parametrize(("form", "message"), [
    ({"repeat": "2"}, "endpoints: List should have at least 1 item"),
    ({"endpoints": ["good"], "repeat": "many"}, "repeat: Input should be a valid integer"),
    ({"endpoints": ["good"], "min_pass_rate": "150"},
     "min_pass_rate: Input should be less than or equal to 1"),
    ({"endpoints": ["nope"]}, "no endpoint named &#x27;nope&#x27;"),
])
def test_a_suite_run_the_form_cannot_start_says_why(
        bob_client: Client, suite_world: dict[str, ModelEndpoint], form: dict[str, Any],
        message: str) -> None:
    suite = save_suite_file(SuiteFile.model_validate(
        {"name": "s", "cases": [weather_case("paris", "Weather?")]}))

    page = bob_client.post(f"/suites/{suite.pk}/runs/", form, follow=True).content.decode()

    assert f"Cannot run the suite: {message}" in page
    assert not SuiteRun.objects.exists()


def test_an_active_suite_run_can_be_driven_again_without_running_more_at_once(
        bob_client: Client, bob: User, suite_world: dict[str, ModelEndpoint],
        django_capture_on_commit_callbacks: Any) -> None:
    suite = save_suite_file(SuiteFile.model_validate(
        {"name": "weather", "cases": [weather_case("paris", "Weather in Paris?")]}))
    suite_run = runner.suite_run_start(
        suite=suite, config={"endpoints": ["good", "bad"], "repeat": 3, "concurrency": 2},
        user=bob)
    first_two = runner.advance(suite_run)  # a first driver started two, then stopped
    assert len(first_two) == 2
    page = bob_client.get(f"/suite-runs/{suite_run.pk}/").content.decode()
    assert 'id="suite-run-resume"' in page

    with django_capture_on_commit_callbacks(execute=True):
        response = bob_client.post(f"/suite-runs/{suite_run.pk}/resume/")

    assert response["Location"] == f"/suite-runs/{suite_run.pk}/"
    [enqueued] = default_task_backend.results  # type: ignore[attr-defined]
    assert enqueued.args == [str(suite_run.pk)]
    assert runner.advance(suite_run) == []  # two still in flight: none more
    execute_inline(suite_run, first_two)  # the workers finish them
    finished = runner.drive(suite_run, wait=execute_inline)
    assert finished.status == "finished"
    assert SuiteCellRun.objects.filter(cell__suite_run=suite_run).count() == 6
    assert 'id="suite-run-resume"' not in bob_client.get(
        f"/suite-runs/{suite_run.pk}/").content.decode()
