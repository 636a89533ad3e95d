"""Migration 0024: the runs stored before are marked try-it or not from their snapshots;
on SQLite the run table is not rebuilt (its triggers stay as they were); going back
removes the column."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.migration_support import migrate, run_columns, sqlite_triggers
from tools_app.models import Run

BEFORE = [("tools_app", "0023_loop_health")]
AFTER = [("tools_app", "0024_run_tryit_and_sorts")]


@pytest.mark.both
@pytest.mark.django_db(transaction=True)
def test_stored_runs_are_marked_and_the_run_table_keeps_its_triggers() -> None:
    before_triggers = sqlite_triggers() if connection.vendor == "sqlite" else set()
    old_state = migrate(BEFORE).loader.project_state(BEFORE)
    try:
        assert "is_tryit" not in run_columns()
        old_run = old_state.apps.get_model("tools_app", "Run")
        old_run.objects.create(title="tried", status="succeeded",
                               snapshot={"tryit": {"tool": "calculator", "arguments": {}}})
        old_run.objects.create(title="played", status="succeeded",
                               snapshot={"endpoint": {"name": "tryit"}})
        migrate(AFTER)
        assert dict(Run.objects.values_list("title", "is_tryit")) == {
            "tried": True, "played": False}
        if connection.vendor == "sqlite":
            assert sqlite_triggers() == before_triggers
        migrate(BEFORE)
        assert "is_tryit" not in run_columns()
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
