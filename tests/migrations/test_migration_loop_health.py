"""Migration 0023: existing policies get loop health's defaults and existing runs a
count of 0; on SQLite the run table is not rebuilt (its triggers stay as they were); the
"loop detected" filter reads a partial index; going back removes the column."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.migration_support import migrate, run_columns, sqlite_triggers
from tools_app.models import Run

BEFORE = [("tools_app", "0022_toolcall_sort_indexes")]
AFTER = [("tools_app", "0023_loop_health")]


@pytest.mark.both
@pytest.mark.django_db(transaction=True)
def test_stored_rows_get_the_defaults_and_the_run_table_keeps_its_triggers() -> None:
    before_triggers = sqlite_triggers() if connection.vendor == "sqlite" else set()
    old_state = migrate(BEFORE).loader.project_state(BEFORE)
    try:
        assert "loop_detections" not in run_columns()
        old_state.apps.get_model("tools_app", "Run").objects.create(
            title="stored before", status="succeeded", snapshot={})
        old_state.apps.get_model("tools_app", "ErrorPolicy").objects.create(name="Old")
        # the run as it is at 0023 (later migrations add columns today's model has)
        after = migrate(AFTER).loader.project_state(AFTER).apps
        assert after.get_model("tools_app", "Run").objects.get(
            title="stored before").loop_detections == 0
        policy = after.get_model("tools_app", "ErrorPolicy").objects.get(name="Old")
        assert (policy.loop_repeat_at, policy.loop_repeat_action, policy.loop_repeat_stop_at,
                policy.loop_no_progress_action) == (3, "tell_model", 5, "note")
        if connection.vendor == "sqlite":
            assert sqlite_triggers() == before_triggers
        migrate(BEFORE)
        assert "loop_detections" not in run_columns()
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


@pytest.mark.django_db
def test_the_loop_detected_filter_reads_the_partial_index() -> None:
    assert connection.vendor == "sqlite"
    plan = Run.objects.filter(loop_detections__gt=0).order_by("-created_at", "-pk").explain()
    assert "run_loop_keyset" in plan, plan
