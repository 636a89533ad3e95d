"""A worker's periodic sweep (runs.worker.sweep): the reaping, then the run tables'
statistics (runs.store.planner_stats), each failure logged without stopping the other."""

from __future__ import annotations

import logging

import pytest
from django.db import connection

from tools_app.models import Run
from tools_app.runs import sweeps
from tools_app.runs.store.planner_stats import MIN_ROWS, analyze_grown_tables


def _fail(what: str) -> object:
    def fail() -> None:
        raise RuntimeError(what)
    return fail


def test_a_failed_reaping_still_analyzes_and_is_logged(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    analyzed: list[bool] = []
    monkeypatch.setattr(sweeps, "reap_and_enqueue", _fail("the database went away"))
    monkeypatch.setattr(sweeps, "analyze_grown_tables", lambda: analyzed.append(True) or [])
    with caplog.at_level(logging.ERROR, logger="tools_app.runs.sweeps"):
        sweeps.sweep()
    assert analyzed == [True]
    assert "run reaper failed" in caplog.text
    assert "the database went away" in caplog.text


def test_a_failed_analysis_is_logged_not_raised(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    reaped: list[bool] = []
    monkeypatch.setattr(sweeps, "reap_and_enqueue", lambda: reaped.append(True) or [])
    monkeypatch.setattr(sweeps, "analyze_grown_tables", _fail("permission denied"))
    with caplog.at_level(logging.ERROR, logger="tools_app.runs.sweeps"):
        sweeps.sweep()
    assert reaped == [True]
    assert "analyzing the run tables failed" in caplog.text


@pytest.mark.django_db
def test_sqlite_has_no_statistics_to_keep_up() -> None:
    """SQLite (this pass's database) checks a foreign key by its index, with no plan
    kept per connection: nothing to analyze (PostgreSQL: test_planner_stats.py)."""
    assert connection.vendor == "sqlite"
    Run.objects.bulk_create([Run(snapshot={}) for _ in range(MIN_ROWS * 3)])
    assert analyze_grown_tables() == []
