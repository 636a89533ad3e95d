"""Migration 0011 builds the full-text index from the rows already stored (both
databases), and on SQLite the triggers that keep it in sync come back after a later
migration's table rebuild dropped them (the post-migrate check)."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.migration_support import migrate
from tools_app.audit.search import search_calls, search_runs
from tools_app.audit.search_index import SQLITE_TRIGGERS
from tools_app.models import Run, ToolCall

BEFORE = [("tools_app", "0010_timeline_raw_stream")]
AFTER = [("tools_app", "0011_auditscale_search")]


@pytest.mark.both
@pytest.mark.django_db(transaction=True)
def test_rows_stored_before_the_migration_are_searchable_after_it() -> None:
    old_state = migrate(BEFORE).loader.project_state(BEFORE)
    run_model = old_state.apps.get_model("tools_app", "Run")
    round_model = old_state.apps.get_model("tools_app", "Round")
    call_model = old_state.apps.get_model("tools_app", "ToolCall")
    run = run_model.objects.create(title="Old question about Lisbon", status="succeeded",
                                   snapshot={})
    round_ = round_model.objects.create(run=run, index=0)
    call_model.objects.create(run=run, round=round_, call_index=0, call_id="c0",
                              tool_name="t", arguments_raw='{"city": "Porto"}')
    try:
        migrate(AFTER)
        assert list(search_runs(Run.objects.all(), "lisbon").values_list("pk", flat=True)) \
            == [run.pk]
        assert list(search_runs(Run.objects.all(), "porto").values_list("pk", flat=True)) \
            == [run.pk]
        assert search_calls(ToolCall.objects.all(), "porto").count() == 1
        assert search_calls(ToolCall.objects.all(), "lisbon").count() == 0
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_sqlite_triggers_a_table_rebuild_dropped_come_back_with_a_rebuilt_index() -> None:
    assert connection.vendor == "sqlite"  # the SQLite pass; PostgreSQL has no triggers
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER tools_app_toolcall_fts_insert")
        cursor.execute("DROP TRIGGER tools_app_run_fts_insert")
    run = Run.objects.create(title="Missed by the index", status="queued", snapshot={})
    call_command("migrate", verbosity=0)  # nothing to apply: the post-migrate check runs
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        assert set(SQLITE_TRIGGERS) <= {row[0] for row in cursor.fetchall()}
    assert list(search_runs(Run.objects.all(), "missed").values_list("pk", flat=True)) \
        == [run.pk]
