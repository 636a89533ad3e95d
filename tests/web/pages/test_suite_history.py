"""A suite's history on its page (issue 41): each endpoint's pass rate per suite run as
a server-drawn SVG line chart, a dot per suite run linking to it, the starter's suite
runs only."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.suites.support import execute_inline, weather_case
from tests.suites.world import endpoints, fake_models, suite_world
from tools_app.models import ModelEndpoint, Suite, SuiteRun
from tools_app.suites import runner
from tools_app.suites.files import SuiteFile, save_suite_file

__all__ = ["endpoints", "fake_models", "suite_world"]  # fixtures of the suites' world


def weather_suite() -> Suite:
    return save_suite_file(SuiteFile.model_validate({"name": "weather", "cases": [
        weather_case("paris", "Weather in Paris?"), weather_case("short", "Paris?")]}))


def suite_run_by(user: User, suite: Suite, endpoint_names: list[str]) -> SuiteRun:
    return runner.drive(runner.suite_run_start(
        suite=suite, config={"endpoints": endpoint_names, "repeat": 2}, user=user),
        wait=execute_inline)


def dots(page: str, endpoint: str) -> list[tuple[str, str]]:
    """(suite run id, rate) of each dot of an endpoint's line, left to right."""
    series = re.search(rf'<g class="series series-\d" data-endpoint="{endpoint}">(.*?)</g>',
                       page, re.S)
    assert series, f"no line for {endpoint}"
    return re.findall(r'<a href="/suite-runs/([0-9a-f-]+)/"><circle [^>]*data-rate="(\d+)"',
                      series.group(1))


@pytest.mark.both
def test_the_suite_page_charts_each_endpoints_pass_rate_per_suite_run(
        client: Client, bob: User, charlie: User,
        suite_world: dict[str, ModelEndpoint]) -> None:
    suite = weather_suite()
    first = suite_run_by(bob, suite, ["good", "bad"])
    ModelEndpoint.objects.filter(name="good").update(model="bad")  # good regressed
    second = suite_run_by(bob, suite, ["good", "bad"])
    suite_run_by(charlie, suite, ["bad"])  # not bob's: not in his chart
    client.force_login(bob)

    page = client.get(f"/suites/{suite.pk}/").content.decode()

    assert 'id="suite-history"' in page
    assert "2 suite runs from" in page
    assert dots(page, "good") == [(str(first.pk), "100"), (str(second.pk), "0")]
    assert dots(page, "bad") == [(str(first.pk), "0"), (str(second.pk), "0")]
    assert re.search(r"<title>good, [^<]*: 4 of 4 passed \(100%\)</title>", page)
    points = re.findall(r'<polyline points="([^"]+)"/>', page)
    assert [len(p.split()) for p in points] == [2, 2]  # a line of two dots per endpoint


def test_a_suite_without_evaluated_runs_has_no_chart(
        client: Client, bob: User, suite_world: dict[str, ModelEndpoint]) -> None:
    suite = weather_suite()
    runner.suite_run_start(suite=suite, config={"endpoints": ["good"]}, user=bob)
    client.force_login(bob)

    page: Any = client.get(f"/suites/{suite.pk}/").content.decode()

    assert 'id="suite-history"' not in page
