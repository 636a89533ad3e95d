""""Save as a test case" on calls ticked in /calls/ (issue 41): the ticked calls of one
run become one case (its conversation, those calls as expectations), calls from several
runs one case per run, numbered; calls that are not the user's are refused."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.runs.support import execute, fake_llm_server, start
from tests.suites.support import SUM_CALL, WEATHER_CALL
from tests.suites.world import endpoints, fake_models, suite_world
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, Suite, SuiteCase, ToolRegistration

__all__ = ["endpoints", "fake_models", "suite_world"]  # fixtures of the suites' world


@pytest.fixture
def two_calls(suite_world: dict[str, ModelEndpoint]) -> Iterator[ModelEndpoint]:
    """An endpoint whose model calls get_weather then calculator in one round."""
    script = {"steps": [{"tool_calls": [WEATHER_CALL, SUM_CALL]}, {"text": "Done."}]}
    with fake_llm_server({"scripts": {"twice": script}}) as server:
        yield ModelEndpoint.objects.create(name="twice", kind="openai_compatible",
                                           base_url=server.base_urls()["openai"],
                                           model="twice")


def finished_run(owner: User, endpoint: ModelEndpoint, question: str) -> Run:
    tools = ToolRegistration.objects.filter(name__in=["get_weather", "calculator"])
    run = start(endpoint, list(tools.order_by("name")),
                ErrorPolicy.objects.get(is_default=True), question)
    Run.objects.filter(pk=run.pk).update(created_by=owner)
    assert execute(run) == "succeeded"
    run.refresh_from_db()
    return run


def call_id(run: Run, tool: str) -> int:
    pk: int = run.tool_calls.get(tool_name=tool).pk
    return pk


def test_the_calls_page_offers_a_tick_per_call_for_a_case(
        client: Client, bob: User, two_calls: ModelEndpoint) -> None:
    run = finished_run(bob, two_calls, "Weather and a sum?")
    client.force_login(bob)

    page = client.get("/calls/").content.decode()

    assert '<form id="save-calls-case" class="save-calls-case" method="post" ' \
           'action="/calls/save-case/">' in page
    for tool in ("get_weather", "calculator"):
        assert (f'<input type="checkbox" name="call" value="{call_id(run, tool)}" '
                'form="save-calls-case"') in page


def test_ticked_calls_of_one_run_become_its_case_with_those_calls_expected(
        client: Client, bob: User, two_calls: ModelEndpoint) -> None:
    run = finished_run(bob, two_calls, "Weather and a sum?")
    client.force_login(bob)

    response = client.post("/calls/save-case/", {
        "call": [call_id(run, "calculator")], "suite": "tools", "case": "sum"})

    case = SuiteCase.objects.get(suite__name="tools", name="sum")
    assert response["Location"] == f"/suites/{case.suite_id}/cases/{case.pk}/"
    assert case.source_run_id == run.pk
    assert case.messages == [{"role": "user", "content": "Weather and a sum?"}]
    assert case.assertions == [
        {"kind": "call_sequence", "tools": ["calculator"], "match": "in_order"},
        {"kind": "arguments_match", "tool": "calculator", "pointer": "",
         "check": {"kind": "equals", "value": {"expression": "2+3"}}, "calls": "any"},
        {"kind": "no_error", "error_type": ""}]
    # Every call of the run ticked: the exact sequence, as "Save as a test case" on the run.
    client.post("/calls/save-case/", {"call": [call_id(run, "get_weather"),
                                               call_id(run, "calculator")],
                                      "suite": "tools", "case": "both"})
    both = SuiteCase.objects.get(name="both")
    assert both.assertions[0] == {"kind": "call_sequence", "match": "exact",
                                  "tools": ["get_weather", "calculator"]}


def test_calls_from_several_runs_become_one_case_per_run(
        client: Client, bob: User, suite_world: dict[str, ModelEndpoint]) -> None:
    first = finished_run(bob, suite_world["good"], "Weather in Paris?")
    second = finished_run(bob, suite_world["bad"], "Paris?")
    client.force_login(bob)

    response = client.post("/calls/save-case/", {
        "call": [call_id(second, "get_weather"), call_id(first, "get_weather")],
        "suite": "weather", "case": "paris"})

    suite = Suite.objects.get(name="weather")
    assert response["Location"] == f"/suites/{suite.pk}/"
    cases = {c.name: c for c in suite.cases.all()}
    assert set(cases) == {"paris 1", "paris 2"}
    assert cases["paris 1"].source_run_id == first.pk  # the runs in their calls' order
    assert cases["paris 2"].source_run_id == second.pk
    assert cases["paris 2"].assertions[1]["check"]["value"] == {"city": "Lima"}
    # A name taken by one of them: neither is saved.
    client.post("/calls/save-case/", {"call": [call_id(first, "get_weather"),
                                               call_id(second, "get_weather")],
                                      "suite": "weather", "case": "paris"})
    assert suite.cases.count() == 2
    page = client.get(response["Location"]).content.decode()
    assert "came from 2 runs: saved one case per run" in page


def test_someone_elses_calls_are_refused_and_nothing_is_saved(
        client: Client, bob: User, charlie: User,
        suite_world: dict[str, ModelEndpoint]) -> None:
    mine = finished_run(bob, suite_world["good"], "Weather in Paris?")
    theirs = finished_run(charlie, suite_world["good"], "Paris?")
    client.force_login(bob)

    response: Any = client.post("/calls/save-case/", {
        "call": [call_id(mine, "get_weather"), call_id(theirs, "get_weather")],
        "suite": "weather", "filters": "tool=get_weather"}, follow=True)

    assert response.redirect_chain[0][0] == "/calls/?tool=get_weather"
    assert "Some ticked calls are not yours or no longer exist" in response.content.decode()
    assert not Suite.objects.exists()
    assert not SuiteCase.objects.exists()


def test_nothing_ticked_says_so(client: Client, bob: User,
                                suite_world: dict[str, ModelEndpoint]) -> None:
    client.force_login(bob)

    response: Any = client.post("/calls/save-case/", {"suite": "weather"}, follow=True)

    assert "Tick the calls to save as a test case" in response.content.decode()
    assert not Suite.objects.exists()  # the new suite is not kept without its case
