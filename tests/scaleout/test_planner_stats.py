"""The run path's tables analyzed as they first grow (runs.store.planner_stats): PostgreSQL's
foreign-key checks are planned per connection against the statistics of their day, and
a plan made when the runs table held a few rows scanned all of it for every event."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from tools_app.models import Run
from tools_app.runs.store.planner_stats import MIN_ROWS, analyze_grown_tables

pytestmark = [pytest.mark.scaleout, pytest.mark.django_db(transaction=True)]

RUNS = Run._meta.db_table


@pytest.fixture
def runs_table_left_to_us() -> Iterator[None]:
    """Autovacuum off on the runs table while the test counts analyses (it could
    analyze it first, at any minute), and its statistics fresh at the start."""
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {RUNS} SET (autovacuum_enabled = false)")
        cursor.execute(f"ANALYZE {RUNS}")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {RUNS} RESET (autovacuum_enabled)")


def _add_runs(count: int) -> None:
    Run.objects.bulk_create([Run(snapshot={}) for _ in range(count)])
    with connection.cursor() as cursor:
        # This backend's counts reach the statistics at the end of its next statement
        # (not once a second at most), and the next read takes a fresh snapshot of them.
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")


def _analyses() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT analyze_count FROM pg_stat_user_tables WHERE relname = %s",
                       [RUNS])
        return int(cursor.fetchone()[0])


def _counted_rows() -> float:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE relname = %s", [RUNS])
        return float(cursor.fetchone()[0])


def _runs_table_analyzed() -> bool:
    """Whether the sweep's step analyzed the runs table. Only it is looked at: the other
    run-path tables' counts can still be growing from earlier tests (a backend sends
    its counts to the statistics up to a second after its commit, or when it exits, so
    a table emptied since may be counted as grown)."""
    return RUNS in analyze_grown_tables()


def test_a_table_that_more_than_doubled_is_analyzed_once(runs_table_left_to_us: None) -> None:
    before = _analyses()
    _add_runs(MIN_ROWS + 10)

    assert _runs_table_analyzed()
    assert _analyses() == before + 1
    assert _counted_rows() == MIN_ROWS + 10

    # Counted again now: not analyzed until it doubles once more.
    assert not _runs_table_analyzed()
    _add_runs(MIN_ROWS)  # 110 rows against 60 counted: under twice
    assert not _runs_table_analyzed()
    _add_runs(20)
    assert _runs_table_analyzed()
    assert _analyses() == before + 2


def test_a_small_table_is_left_to_autovacuum(runs_table_left_to_us: None) -> None:
    before = _analyses()
    _add_runs(MIN_ROWS - 1)
    assert not _runs_table_analyzed()
    assert _analyses() == before
