"""A suite on the fake provider: three models of different quality x repeats give the
pass rates the seeded scripts say; each execution is an ordinary run linked to its cell."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.prices_support import set_price
from tests.runs.support import execute, start
from tools_app.fake_llm import BackgroundServer
from tools_app.models import (
    ErrorPolicy,
    ModelEndpoint,
    Run,
    Suite,
    SuiteCellRun,
    SuiteRunStatus,
    ToolCall,
    ToolRegistration,
)
from tools_app.suites import runner
from tools_app.suites.files import SuiteFile, save_suite_file
from tools_app.suites.matrix import compare_suite_runs, suite_matrix
from tools_app.suites.services import case_save_from_run

from .support import (
    SUM_CALL,
    WEATHER_CALL,
    execute_inline,
    sloppy_passes,
    weather_case,
)

pytestmark = pytest.mark.both

REPEAT = 5
QUESTIONS = {"paris": "Weather in Paris?", "paris-again": "How warm is Paris now?",
             "paris-short": "Paris?"}


def weather_suite(name: str = "weather") -> Any:
    return save_suite_file(SuiteFile.model_validate({
        "name": name, "cases": [weather_case(c, q) for c, q in QUESTIONS.items()]}))


def run_to_the_end(suite: Any, endpoints: list[str], **config: Any) -> Any:
    suite_run = runner.suite_run_start(
        suite=suite, config={"endpoints": endpoints, "repeat": REPEAT, **config})
    return runner.drive(suite_run, wait=execute_inline)


def test_pass_rates_per_case_and_endpoint_follow_the_models_quality(
        suite_world: dict[str, ModelEndpoint]) -> None:
    suite_run = run_to_the_end(weather_suite(), ["good", "sloppy", "bad"], concurrency=3)

    assert suite_run.status == SuiteRunStatus.FINISHED
    matrix = suite_matrix(suite_run)
    rates = {key: (c.passed, c.evaluated) for key, c in matrix.cells.items()}
    for case, question in QUESTIONS.items():
        assert rates[(case, "good")] == (REPEAT, REPEAT)
        assert rates[(case, "bad")] == (0, REPEAT)
        assert rates[(case, "sloppy")] == (sloppy_passes(question, REPEAT), REPEAT)
    sloppy = [matrix.cells[(case, "sloppy")] for case in QUESTIONS]
    assert any(cell.flaky for cell in sloppy)  # the seeds give a mix: the test means it
    assert not any(matrix.cells[(case, "good")].flaky for case in QUESTIONS)
    assert {c.endpoint_name for c in matrix.failing()} == {"sloppy", "bad"}
    assert not matrix.passed


def test_every_execution_is_an_ordinary_run_linked_to_its_cell(
        suite_world: dict[str, ModelEndpoint]) -> None:
    suite_run = run_to_the_end(weather_suite(), ["good", "bad"])

    cell_runs = SuiteCellRun.objects.filter(cell__suite_run=suite_run)
    assert cell_runs.count() == len(QUESTIONS) * 2 * REPEAT
    assert Run.objects.count() == cell_runs.count()
    assert set(Run.objects.values_list("status", flat=True)) == {"succeeded"}
    bad = cell_runs.filter(cell__endpoint_name="bad").first()
    assert bad is not None
    assert bad.passed is False
    reasons = [f["reason"] for f in bad.failures]
    assert any('"Lima" is not equal to "Paris"' in r for r in reasons), reasons
    good = cell_runs.filter(cell__endpoint_name="good").first()
    assert good is not None
    assert (good.passed, good.failures) == (True, [])
    assert good.run.tool_calls.get().tool_name == "get_weather"


def test_concurrency_bounds_the_runs_started_at_once(
        suite_world: dict[str, ModelEndpoint]) -> None:
    suite_run = runner.suite_run_start(suite=weather_suite(),
                                       config={"endpoints": ["good"], "repeat": 4,
                                               "concurrency": 2})
    batches: list[int] = []

    def record_then_execute(run: Any, started: list[Run]) -> None:
        batches.append(len(started))
        execute_inline(run, started)

    runner.drive(suite_run, wait=record_then_execute)

    assert batches == [2] * 6  # 3 cases x 4 repeats, two at a time
    assert suite_matrix(suite_run).passed


def test_a_regression_in_one_endpoints_model_shows_when_two_suite_runs_are_compared(
        suite_world: dict[str, ModelEndpoint], fake_models: BackgroundServer) -> None:
    suite = weather_suite()
    before = run_to_the_end(suite, ["good", "sloppy"])
    ModelEndpoint.objects.filter(name="good").update(model="bad")  # its script got worse
    httpx.post(f"{fake_models.url}/_fake/reset").raise_for_status()  # the same draws again
    after = run_to_the_end(suite, ["good", "sloppy"])

    comparison = compare_suite_runs(before, after)

    assert {(c.case_name, c.endpoint_name, c.before, c.after)
            for c in comparison.regressed} == {(case, "good", 1.0, 0.0) for case in QUESTIONS}
    assert comparison.fixed == []


def test_tools_are_live_or_mocked_per_tool(suite_world: dict[str, ModelEndpoint],
                                           fake_models: BackgroundServer) -> None:
    # calculator is not idempotent: mocked by default; get_weather is: live.
    httpx.put(f"{fake_models.url}/_fake/scripts/good", json={"steps": [
        {"tool_calls": [WEATHER_CALL, SUM_CALL]}, {"text": "{last_results}"}]}).raise_for_status()
    suite = save_suite_file(SuiteFile.model_validate({"name": "modes", "cases": [{
        "name": "both", "messages": [{"role": "user", "content": "Weather and a sum"}],
        "tools": ["get_weather", "calculator"],
        "assertions": [{"kind": "final_text_contains", "text": "mock result"},
                       {"kind": "final_text_contains", "text": "Paris"}]}]}))

    suite_run = run_to_the_end(suite, ["good"])
    assert suite_matrix(suite_run).passed
    live = run_to_the_end(suite, ["good"], tools="live")
    assert suite_matrix(live).cells[("both", "good")].passed == 0  # 2+3 computed for real


@pytest.mark.parametrize(("config", "message"), [
    ({"endpoints": ["nope"]}, "no endpoint named 'nope'"),
    ({"endpoints": []}, "endpoints"),
    ({"endpoints": ["good"], "repeat": 0}, "repeat"),
    ({"endpoints": ["good"], "tools": "recorded"}, "recorded tools need the run"),
])
def test_a_configuration_it_cannot_use_is_refused_before_anything_runs(
        suite_world: dict[str, ModelEndpoint], config: dict[str, Any], message: str) -> None:
    with pytest.raises(runner.SuiteConfigError, match=message):
        runner.suite_run_start(suite=weather_suite(), config=config)
    assert not Run.objects.exists()


def test_a_case_can_bound_what_a_run_costs(suite_world: dict[str, ModelEndpoint]) -> None:
    set_price(suite_world["good"], input_per_million="1000", output_per_million="1000")
    suite = save_suite_file(SuiteFile.model_validate({"name": "cost", "cases": [
        weather_case("cheap", "Weather in Paris?") | {"assertions": [
            {"kind": "cost_at_most", "dollars": "1"}]},
        weather_case("dear", "Weather in Paris?!") | {"assertions": [
            {"kind": "cost_at_most", "dollars": "0.000001"}]}]}))

    suite_run = run_to_the_end(suite, ["good", "bad"])

    cells = suite_matrix(suite_run).cells
    assert (cells[("cheap", "good")].passed, cells[("dear", "good")].passed) == (REPEAT, 0)
    assert cells[("cheap", "good")].mean_cost_usd is not None
    assert cells[("cheap", "good")].mean_cost_usd > 0
    assert cells[("cheap", "bad")].passed == 0  # no price: no cost to bound
    dear = SuiteCellRun.objects.filter(cell__case_name="dear", cell__endpoint_name="good")
    reason = dear.first().failures[0]["reason"]  # type: ignore[union-attr]
    assert reason.startswith("expected a cost of at most $0.000001, the run cost $")
    run_cost = dear.first().run.cost_usd  # type: ignore[union-attr]
    assert reason.endswith(f"${run_cost}")


def test_recorded_tools_answer_from_the_run_the_case_was_saved_from(
        suite_world: dict[str, ModelEndpoint]) -> None:
    source = start(suite_world["good"], [ToolRegistration.objects.get(name="get_weather")],
                   ErrorPolicy.objects.get(), "Weather in Paris?")
    assert execute(source) == "succeeded"
    ToolCall.objects.filter(run=source).update(result_text="recorded: sunny")
    suite = Suite.objects.create(name="recorded")
    case = case_save_from_run(run=source, suite=suite, name="paris")
    case.assertions = [*case.assertions,
                       {"kind": "final_text_contains", "text": "Done: recorded: sunny"}]
    case.save()

    recorded = run_to_the_end(suite, ["good"], tools="recorded")
    live = run_to_the_end(suite, ["good"], tools="live")

    assert suite_matrix(recorded).cells[("paris", "good")].passed == REPEAT
    assert suite_matrix(live).cells[("paris", "good")].passed == 0  # the tool really ran
    first = SuiteCellRun.objects.filter(cell__suite_run=live).first()
    assert first is not None
    [failure] = first.failures
    assert failure["sentence"] == 'The final answer contains "Done: recorded: sunny".'


def test_a_tool_that_needs_approval_must_not_run_live(
        suite_world: dict[str, ModelEndpoint]) -> None:
    ToolRegistration.objects.filter(name="get_weather").update(requires_approval=True)

    with pytest.raises(runner.SuiteConfigError, match="get_weather need a person's approval"):
        runner.suite_run_start(suite=weather_suite(), config={"endpoints": ["good"]})
    mocked = runner.suite_run_start(suite=weather_suite("mocked"),
                                    config={"endpoints": ["good"], "tools": "mock"})
    assert mocked.cells.count() == len(QUESTIONS)


def test_the_default_wait_returns_once_one_of_its_runs_has_ended(
        suite_world: dict[str, ModelEndpoint], monkeypatch: pytest.MonkeyPatch) -> None:
    suite_run = runner.suite_run_start(suite=weather_suite(),
                                       config={"endpoints": ["good"], "concurrency": 2})
    first, second = runner.advance(suite_run)
    pauses: list[float] = []

    def a_worker_ends_a_run_meanwhile(seconds: float) -> None:
        pauses.append(seconds)
        execute(second)

    monkeypatch.setattr(runner, "sleep", a_worker_ends_a_run_meanwhile)
    runner.wait_for_a_finished_run(suite_run, [first, second])
    assert pauses == [runner.POLL_SECONDS]  # nothing had ended: it waited once
    runner.wait_for_a_finished_run(suite_run, [])
    assert pauses == [runner.POLL_SECONDS]  # one had ended: it returned at once

    runner.advance(suite_run)  # evaluates the ended run, starts the next
    assert SuiteCellRun.objects.filter(cell__suite_run=suite_run,
                                       passed__isnull=False).count() == 1
    assert SuiteCellRun.objects.filter(cell__suite_run=suite_run).count() == 3


def test_only_who_may_see_the_source_run_replays_its_recording(
        suite_world: dict[str, ModelEndpoint], bob: Any, charlie: Any) -> None:
    source = start(suite_world["good"], [ToolRegistration.objects.get(name="get_weather")],
                   ErrorPolicy.objects.get(), "Weather in Paris?")
    source.created_by = bob
    source.save(update_fields=["created_by"])
    assert execute(source) == "succeeded"
    suite = Suite.objects.create(name="recorded")
    case_save_from_run(run=source, suite=suite, name="paris")
    recorded = {"endpoints": ["good"], "tools": "recorded"}

    with pytest.raises(runner.SuiteConfigError, match="which is not yours"):
        runner.suite_run_start(suite=suite, config=recorded, user=charlie)
    assert runner.suite_run_start(suite=suite, config=recorded, user=bob)
    assert runner.suite_run_start(suite=suite, config=recorded | {"tools": "mock"},
                                  user=charlie)
