"""A suite run whose driver was lost (its server or db_worker stopped mid-run) is driven
again by the workers' sweeps and start (suites.recovery, registered by the app), and
ends with the cells it would have had."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.tasks import default_task_backend
from django.utils import timezone

from tools_app.models import (
    ModelEndpoint,
    Run,
    SuiteCellRun,
    SuiteRun,
    SuiteRunStatus,
)
from tools_app.runs import sweeps
from tools_app.suites import runner
from tools_app.suites.files import SuiteFile, save_suite_file
from tools_app.suites.matrix import suite_matrix
from tools_app.suites.recovery import lost_suite_runs
from tools_app.suites.tasks import drive_suite_run

from .support import execute_inline, sloppy_passes, weather_case

pytestmark = pytest.mark.both

QUESTIONS = {"paris": "Weather in Paris?", "paris-short": "Paris?"}
REPEAT = 3


def started_suite_run() -> SuiteRun:
    """A suite run whose driver took one step (two runs started, executed by the
    workers) and then was lost."""
    suite = save_suite_file(SuiteFile.model_validate({
        "name": "weather", "cases": [weather_case(c, q) for c, q in QUESTIONS.items()]}))
    suite_run = runner.suite_run_start(suite=suite, config={
        "endpoints": ["good", "sloppy"], "repeat": REPEAT, "concurrency": 2})
    execute_inline(suite_run, runner.advance(suite_run))
    return suite_run


def a_lease_passes() -> None:
    """Every timestamp a driver's liveness is read from, moved back past a lease."""
    back = timedelta(hours=1)
    SuiteRun.objects.update(created_at=timezone.now() - back)
    for run in Run.objects.all():
        Run.objects.filter(pk=run.pk).update(
            created_at=run.created_at - back,
            finished_at=run.finished_at - back if run.finished_at else None)
    for cell_run in SuiteCellRun.objects.exclude(evaluated_at=None):
        SuiteCellRun.objects.filter(pk=cell_run.pk).update(
            evaluated_at=cell_run.evaluated_at - back)


def queued_runs_of(suite_run: SuiteRun) -> list[Run]:
    return list(Run.objects.filter(suite_cell_run__cell__suite_run=suite_run,
                                   status="queued"))


def drivers_enqueued() -> list[Any]:
    return [r.args for r in default_task_backend.results  # type: ignore[attr-defined]
            if r.task.module_path == drive_suite_run.module_path]


def assert_cells_right(suite_run: SuiteRun) -> None:
    assert suite_run.status == SuiteRunStatus.FINISHED
    cells = suite_matrix(suite_run).cells
    for case, question in QUESTIONS.items():
        assert (cells[(case, "good")].passed, cells[(case, "good")].evaluated) == (
            REPEAT, REPEAT)
        assert (cells[(case, "sloppy")].passed, cells[(case, "sloppy")].evaluated) == (
            sloppy_passes(question, REPEAT), REPEAT)
    assert SuiteCellRun.objects.filter(cell__suite_run=suite_run).count() == (
        len(QUESTIONS) * 2 * REPEAT)  # each repetition ran once


def test_a_suite_run_whose_driver_was_lost_is_finished_by_the_sweeps(
        suite_world: dict[str, ModelEndpoint]) -> None:
    suite_run = started_suite_run()
    assert lost_suite_runs() == []  # its driver acted just now: not lost yet

    steps = 0
    while suite_run.is_active and steps < 20:
        a_lease_passes()
        sweeps.sweep()  # evaluates the ended runs, starts the next ones, enqueues a driver
        execute_inline(suite_run, queued_runs_of(suite_run))  # the workers run them
        suite_run.refresh_from_db()
        steps += 1

    assert_cells_right(suite_run)
    assert [str(suite_run.pk)] in [list(args) for args in drivers_enqueued()]


def test_a_sweep_leaves_a_suite_run_whose_driver_acts_alone(
        suite_world: dict[str, ModelEndpoint]) -> None:
    suite_run = started_suite_run()

    sweeps.sweep()

    assert drivers_enqueued() == []
    assert SuiteCellRun.objects.filter(cell__suite_run=suite_run,
                                       passed__isnull=True).count() == 2  # not evaluated


def test_a_workers_start_drives_every_active_suite_run_again(
        suite_world: dict[str, ModelEndpoint]) -> None:
    suite_run = started_suite_run()
    finished = runner.suite_run_start(suite=suite_run.suite, config={
        "endpoints": ["good"], "repeat": 1})
    runner.drive(finished, wait=execute_inline)

    sweeps.recover_at_start()  # at once: the server that drove it is gone

    assert [list(args) for args in drivers_enqueued()] == [[str(suite_run.pk)]]
    assert SuiteCellRun.objects.filter(cell__suite_run=suite_run,
                                       passed__isnull=False).count() == 2
    while suite_run.is_active:  # the driver enqueued, with the workers running its runs
        runner.advance(suite_run)
        execute_inline(suite_run, queued_runs_of(suite_run))
        suite_run.refresh_from_db()
    assert_cells_right(suite_run)
