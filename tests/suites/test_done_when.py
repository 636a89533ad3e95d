"""Issue 41's "Done when", end to end: a suite of 10 cases built from runs through
"Save as a test case" runs on three endpoints (the fake provider with three scripts of
different quality) x 5 repetitions; its matrix page shows the pass rates the seeded
scripts give; a regression introduced in one endpoint's script shows as a regression when
the two suite runs are compared. The fake provider answers at once (no latency)."""

from __future__ import annotations

import re

import httpx
from django.contrib.auth.models import User
from django.test import Client

from tests.runs.support import execute, start
from tools_app.fake_llm import BackgroundServer
from tools_app.fake_llm.script import draw
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, Suite, SuiteRun, ToolRegistration
from tools_app.suites import runner
from tools_app.suites.matrix import compare_suite_runs

from .support import SEED, WEATHER_CALL, WRONG_CITY, execute_inline, sloppy_passes

REPEAT = 5
QUESTIONS = [f"Weather in Paris, question {n}?" for n in range(1, 11)]
REGRESSED = 0.4
"""The good script's probability of the right call once it regressed."""


def saved_from_a_run(client: Client, owner: User, good: ModelEndpoint, number: int) -> None:
    """A run on the good endpoint, saved from its page as case-N of the suite."""
    run = start(good, [ToolRegistration.objects.get(name="get_weather")],
                ErrorPolicy.objects.get(is_default=True), QUESTIONS[number - 1])
    Run.objects.filter(pk=run.pk).update(created_by=owner)
    assert execute(run) == "succeeded"
    response = client.post(f"/runs/{run.pk}/save-case/",
                           {"suite": "weather", "case": f"case-{number}"})
    assert response.status_code == 302


def run_suite(client: Client, suite: Suite) -> SuiteRun:
    """Started from the suite's page, driven with its runs executed here."""
    client.post(f"/suites/{suite.pk}/runs/", {
        "endpoints": ["good", "sloppy", "bad"], "repeat": str(REPEAT), "tools": "",
        "concurrency": "15", "min_pass_rate": "100"})
    suite_run = SuiteRun.objects.order_by("-created_at").first()
    assert suite_run is not None
    return runner.drive(suite_run, wait=execute_inline)


def shown_rates(client: Client, suite_run: SuiteRun) -> dict[tuple[str, str], str]:
    """Each cell's "passed/evaluated" as the matrix page shows it."""
    page = client.get(f"/suite-runs/{suite_run.pk}/").content.decode()
    return {(case, endpoint): figures for case, endpoint, figures in re.findall(
        r'data-case="([^"]+)" data-endpoint="([^"]+)">.*?class="muted figures">'
        r"(\d+/\d+) of 5", page, re.S)}


def passes(script: str, probability: float, question: str) -> int:
    return sum(draw(SEED, script, 0, question, n) < probability for n in range(REPEAT))


def test_a_suite_built_from_runs_shows_its_pass_rates_and_a_regression(
        client: Client, bob: User, suite_world: dict[str, ModelEndpoint],
        fake_models: BackgroundServer) -> None:
    client.force_login(bob)
    for number in range(1, 11):
        saved_from_a_run(client, bob, suite_world["good"], number)
    suite = Suite.objects.get(name="weather")
    assert suite.cases.count() == 10

    before = run_suite(client, suite)

    expected = {}
    for number, question in enumerate(QUESTIONS, start=1):
        case = f"case-{number}"
        expected |= {(case, "good"): f"{REPEAT}/{REPEAT}", (case, "bad"): f"0/{REPEAT}",
                     (case, "sloppy"): f"{sloppy_passes(question, REPEAT)}/{REPEAT}"}
    assert shown_rates(client, before) == expected
    sloppy = [int(expected[(f"case-{n}", "sloppy")].split("/")[0]) for n in range(1, 11)]
    assert 0 < sum(sloppy) < 10 * REPEAT  # the seeds give a mix: the test means it

    # The good endpoint's script regresses: its right call now only 40% of the time.
    httpx.post(f"{fake_models.url}/_fake/reset").raise_for_status()  # the same draws
    worse = {"seed": SEED, "when_exhausted": "repeat_last", "steps": [
        {"tool_calls": [WEATHER_CALL], "probability": REGRESSED,
         "otherwise": {"tool_calls": [WRONG_CITY]}}, {"text": "Done: {last_result}"}]}
    httpx.put(f"{fake_models.url}/_fake/scripts/good", json=worse).raise_for_status()
    after = run_suite(client, suite)

    regressed = {(f"case-{n}", "good", 1.0, passes("good", REGRESSED, q) / REPEAT)
                 for n, q in enumerate(QUESTIONS, start=1)
                 if passes("good", REGRESSED, q) < REPEAT}
    assert regressed  # the regression is there to be seen
    comparison = compare_suite_runs(before, after)
    assert {(c.case_name, c.endpoint_name, c.before, c.after)
            for c in comparison.regressed} == regressed
    assert list(comparison.fixed) == []
    page = client.get(f"/suite-runs/{after.pk}/compare/?with={before.pk}").content.decode()
    listed = re.search(r'<ul id="regressed">(.*?)</ul>', page, re.S)
    assert listed is not None
    shown = re.findall(r'<li class="fail">(case-\d+) on (\w+):', listed.group(1))
    assert sorted(shown) == sorted((case, endpoint) for case, endpoint, _, _ in regressed)

