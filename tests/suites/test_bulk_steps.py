"""A driver's step in bulk: the due runs started together (`run_create_many`, all or
none) and the ended runs evaluated together (their rows read in a few queries)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.runs.support import execute
from tools_app.engine import UserMessage
from tools_app.models import (
    ErrorPolicy,
    ModelEndpoint,
    Run,
    RunEvent,
    RunStatus,
    SuiteCell,
    SuiteCellRun,
    SuiteRunStatus,
    ToolRegistration,
)
from tools_app.runs.services import RunRequest, RunRequestError, run_create_many
from tools_app.suites import runner
from tools_app.suites.files import SuiteFile, save_suite_file

from .support import execute_inline, weather_case

pytestmark = pytest.mark.both

QUESTIONS = {"paris": "Weather in Paris?", "paris-again": "How warm is Paris now?",
             "paris-short": "Paris?"}


def weather_suite(name: str = "bulk") -> Any:
    return save_suite_file(SuiteFile.model_validate({
        "name": name, "cases": [weather_case(c, q) for c, q in QUESTIONS.items()]}))


def weather_request(endpoint: ModelEndpoint, question: str, **fields: Any) -> RunRequest:
    return RunRequest(endpoint=endpoint, tools=[ToolRegistration.objects.get(name="get_weather")],
                      policy=ErrorPolicy.objects.get(), messages=[UserMessage(text=question)],
                      **fields)


def test_run_create_many_stores_every_run_queued_with_its_first_event(
        suite_world: dict[str, ModelEndpoint],
        django_capture_on_commit_callbacks: Any) -> None:
    requests = [weather_request(suite_world["good"], q) for q in QUESTIONS.values()]

    with django_capture_on_commit_callbacks() as callbacks:
        runs = run_create_many(user=None, requests=requests)

    assert [r.title for r in runs] == list(QUESTIONS.values())
    assert set(Run.objects.values_list("status", flat=True)) == {RunStatus.QUEUED}
    assert RunEvent.objects.filter(run__in=runs, seq=1, kind="run_status").count() == 3
    assert all(r.snapshot["tools"][0]["name"] == "get_weather" for r in runs)
    assert len(callbacks) >= len(runs)  # each enqueued once the transaction commits


def test_run_create_many_starts_none_when_one_cannot_start(
        suite_world: dict[str, ModelEndpoint]) -> None:
    good = suite_world["good"]
    requests = [weather_request(good, "Paris?"), weather_request(good, "Lima?"),
                weather_request(good, "Rome?", breakpoints="not a list of breakpoints")]

    with pytest.raises(RunRequestError) as raised:
        run_create_many(user=None, requests=requests)

    assert raised.value.index == 2
    assert raised.value.field == "breakpoints"
    assert not Run.objects.exists()


def test_a_step_starts_its_due_runs_together_each_linked_to_its_cell(
        suite_world: dict[str, ModelEndpoint]) -> None:
    suite_run = runner.suite_run_start(suite=weather_suite(), config={
        "endpoints": ["good", "bad"], "repeat": 2, "concurrency": 8})

    started = runner.start_due_runs(suite_run)

    assert len(started) == 8
    links = SuiteCellRun.objects.filter(cell__suite_run=suite_run)
    assert sorted(links.values_list("run_id", flat=True)) == sorted(r.pk for r in started)
    # every cell's first repetition before any second one
    assert sorted(links.values_list("repetition", flat=True)) == [1] * 6 + [2] * 2
    for link in links.select_related("cell", "run"):
        assert link.run.endpoint_id == link.cell.endpoint_id
        assert link.run.title == QUESTIONS[link.cell.case_name]
    assert runner.start_due_runs(suite_run) == []  # the concurrency is full


def test_a_run_that_cannot_start_fails_the_suite_run_and_none_of_its_step_starts(
        suite_world: dict[str, ModelEndpoint]) -> None:
    suite_run = runner.suite_run_start(suite=weather_suite(), config={
        "endpoints": ["good"], "concurrency": 3})
    case = suite_run.suite.cases.get(name="paris-short")  # the step's last run
    case.messages = [{"role": "system", "content": "No question at all"}]
    case.save()

    assert runner.start_due_runs(suite_run) == []

    suite_run.refresh_from_db()
    assert suite_run.status == SuiteRunStatus.FAILED
    assert suite_run.error_message == (
        "paris-short on good: A run needs at least one user message")
    assert not Run.objects.exists()
    assert not SuiteCellRun.objects.exists()


def ended_runs(count: int, suite_world: dict[str, ModelEndpoint]) -> Any:
    """A suite run with `count` ended runs not yet evaluated (good and bad alternating)."""
    suite_run = runner.suite_run_start(suite=weather_suite(f"bulk-{count}"), config={
        "endpoints": ["good", "bad"], "repeat": 2, "concurrency": count})
    execute_inline(suite_run, runner.start_due_runs(suite_run))
    return suite_run


def selects_evaluating(suite_run: Any) -> tuple[int, int]:
    with CaptureQueriesContext(connection) as queries:
        evaluated = runner.evaluate_finished(suite_run)
    return evaluated, sum(q["sql"].lstrip().upper().startswith("SELECT")
                          for q in queries.captured_queries)


def test_ended_runs_are_read_in_the_same_few_queries_however_many(
        suite_world: dict[str, ModelEndpoint]) -> None:
    few, few_selects = selects_evaluating(ended_runs(2, suite_world))
    many, many_selects = selects_evaluating(ended_runs(12, suite_world))

    assert (few, many) == (2, 12)
    assert many_selects == few_selects


def test_bulk_verdicts_count_once_per_cell_and_only_once(
        suite_world: dict[str, ModelEndpoint]) -> None:
    suite_run = ended_runs(12, suite_world)

    assert runner.evaluate_finished(suite_run) == 12
    assert runner.evaluate_finished(suite_run) == 0  # already evaluated: not counted again

    cells = {(c.case_name, c.endpoint_name): (c.evaluated, c.passed)
             for c in SuiteCell.objects.filter(suite_run=suite_run)}
    assert cells == {(case, endpoint): (2, 2 if endpoint == "good" else 0)
                     for case in QUESTIONS for endpoint in ("good", "bad")}
    bad = SuiteCellRun.objects.filter(cell__suite_run=suite_run, cell__endpoint_name="bad")
    assert all(not link.passed and link.failures for link in bad)
    assert not SuiteCellRun.objects.filter(cell__suite_run=suite_run,
                                           evaluated_at__isnull=True).exists()


def test_a_step_fills_the_room_a_run_left_while_the_step_evaluated(
        suite_world: dict[str, ModelEndpoint], monkeypatch: pytest.MonkeyPatch) -> None:
    suite_run = runner.suite_run_start(suite=weather_suite(), config={
        "endpoints": ["good"], "repeat": 2, "concurrency": 2})
    first, second = runner.advance(suite_run)
    execute(first)
    evaluate = runner.evaluate_finished

    def the_second_ends_meanwhile(suite_run: Any) -> int:
        evaluated = evaluate(suite_run)
        if not Run.objects.get(pk=second.pk).is_terminal:
            execute(second)
        return evaluated

    monkeypatch.setattr(runner, "evaluate_finished", the_second_ends_meanwhile)
    started = runner.advance(suite_run)

    assert len(started) == 2  # one in the first's room, one in the second's
    assert SuiteCellRun.objects.filter(cell__suite_run=suite_run).count() == 4
    assert SuiteCellRun.objects.filter(cell__suite_run=suite_run,
                                       passed__isnull=False).count() == 1


def test_the_next_runs_are_the_cells_with_the_fewest_started(
        suite_world: dict[str, ModelEndpoint]) -> None:
    suite_run = runner.suite_run_start(suite=weather_suite(), config={
        "endpoints": ["good"], "repeat": 2, "concurrency": 2})
    execute_inline(suite_run, runner.start_due_runs(suite_run))
    runner.evaluate_finished(suite_run)

    runner.start_due_runs(suite_run)

    links = SuiteCellRun.objects.filter(cell__suite_run=suite_run).order_by("pk")
    assert [(link.cell.case_name, link.repetition) for link in links] == [
        ("paris", 1), ("paris-again", 1), ("paris-short", 1), ("paris", 2)]
