"""The run path's tables analyzed as they first grow (runs.store.planner_stats): PostgreSQL's
foreign-key checks are planned per connection against the statistics of their day, and
a plan made when the runs table held a few rows scanned all of it for every event.

The growth rule is checked on a table made for the test: the run path's own tables get
row counts from other connections of earlier tests (a backend sends its counts to the
statistics up to seconds after its commit, or when it exits), which would decide for
the test whether a table grew."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from tools_app.models import Run
from tools_app.runs.store.planner_stats import (
    MIN_ROWS,
    RUN_PATH_TABLES,
    analyze_grown_tables,
)

pytestmark = [pytest.mark.scaleout, pytest.mark.django_db(transaction=True)]

PROBE = "planner_stats_probe"


@pytest.fixture
def probe_table() -> Iterator[str]:
    """A table only this test writes, autovacuum off (it could analyze it first, at any
    minute), its statistics fresh at the start."""
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {PROBE} (id integer) WITH (autovacuum_enabled = false)")
        cursor.execute(f"ANALYZE {PROBE}")
    try:
        yield PROBE
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE {PROBE}")


def _add_rows(count: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {PROBE} SELECT generate_series(1, %s)", [count])
        # This backend's counts reach the statistics at the end of its next statement
        # (not once a second at most), and the next read takes a fresh snapshot of them.
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")


def _analyses() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT analyze_count FROM pg_stat_user_tables WHERE relname = %s",
                       [PROBE])
        return int(cursor.fetchone()[0])


def _counted_rows() -> float:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE relname = %s", [PROBE])
        return float(cursor.fetchone()[0])


def _probe_analyzed() -> bool:
    return analyze_grown_tables(tables=(PROBE,)) == [PROBE]


def test_the_sweep_looks_at_the_run_path_tables() -> None:
    assert Run._meta.db_table in RUN_PATH_TABLES


def test_a_table_that_more_than_doubled_is_analyzed_once(probe_table: str) -> None:
    before = _analyses()
    _add_rows(MIN_ROWS + 10)

    assert _probe_analyzed()
    assert _analyses() == before + 1
    assert _counted_rows() == MIN_ROWS + 10

    # Counted again now: not analyzed until it doubles once more.
    assert not _probe_analyzed()
    _add_rows(MIN_ROWS)  # 110 rows against 60 counted: under twice
    assert not _probe_analyzed()
    _add_rows(20)
    assert _probe_analyzed()
    assert _analyses() == before + 2


def test_a_small_table_is_left_to_autovacuum(probe_table: str) -> None:
    before = _analyses()
    _add_rows(MIN_ROWS - 1)
    assert not _probe_analyzed()
    assert _analyses() == before
    _add_rows(1)
    assert _probe_analyzed()
