"""Migration 0017: the round's, event's and call's foreign keys have no index of their
own (the unique constraint leading with each serves them), rows stored before are kept,
and going back restores the indexes. On SQLite the call table is not rebuilt: its
triggers (search, per-tool counts) stay as they were."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.migration_support import migrate, sqlite_triggers
from tools_app.models import Round, Run, RunEvent, ToolCall

BEFORE = [("tools_app", "0016_auditscale2_run_filter_stats")]
AFTER = [("tools_app", "0017_fk_indexes_covered_by_unique")]
# (table, the key's column, the columns of the unique constraint that covers it)
COVERED = [("tools_app_round", "run_id", ["run_id", "index"]),
           ("tools_app_runevent", "run_id", ["run_id", "seq"]),
           ("tools_app_toolcall", "round_id", ["round_id", "call_index"])]


def indexes_of(table: str) -> list[list[str]]:
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    return [info["columns"] for info in constraints.values()
            if info["index"] or info["unique"]]


@pytest.mark.both
@pytest.mark.django_db
def test_each_key_is_served_by_its_unique_constraint_alone() -> None:
    for table, column, unique in COVERED:
        indexes = indexes_of(table)
        assert [column] not in indexes, table
        assert unique in indexes, table


@pytest.mark.django_db
def test_sqlite_reads_a_runs_events_rounds_and_calls_through_the_unique_indexes() -> None:
    assert connection.vendor == "sqlite"
    run = Run.objects.create(title="t", status="queued", snapshot={})
    round_ = Round.objects.create(run=run, index=0)
    for query in (RunEvent.objects.filter(run=run), Round.objects.filter(run=run),
                  ToolCall.objects.filter(round=round_)):
        plan = query.explain()
        assert "SCAN" not in plan.replace("SCAN CONSTANT ROW", ""), plan
        assert "sqlite_autoindex" in plan, plan


@pytest.mark.both
@pytest.mark.django_db(transaction=True)
def test_rows_stored_before_are_kept_and_going_back_restores_the_indexes() -> None:
    before_triggers = sqlite_triggers() if connection.vendor == "sqlite" else set()
    old_state = migrate(BEFORE).loader.project_state(BEFORE)
    run_model = old_state.apps.get_model("tools_app", "Run")
    round_model = old_state.apps.get_model("tools_app", "Round")
    call_model = old_state.apps.get_model("tools_app", "ToolCall")
    event_model = old_state.apps.get_model("tools_app", "RunEvent")
    try:
        for table, column, _ in COVERED:
            assert [column] in indexes_of(table), table
        run = run_model.objects.create(title="stored before", status="succeeded",
                                       snapshot={})
        round_ = round_model.objects.create(run=run, index=0)
        call_model.objects.create(run=run, round=round_, call_index=0, call_id="c0",
                                  tool_name="t", arguments_raw="{}")
        event_model.objects.create(run=run, seq=1, kind="chat_started", payload={})
        # the models as they are at AFTER (later migrations add columns today's have)
        after = migrate(AFTER).loader.project_state(AFTER).apps
        for table, column, _ in COVERED:
            assert [column] not in indexes_of(table), table
        assert after.get_model("tools_app", "RunEvent").objects.filter(
            run_id=run.pk).count() == 1
        assert after.get_model("tools_app", "ToolCall").objects.get(
            round_id=round_.pk).call_id == "c0"
        if connection.vendor == "sqlite":
            assert sqlite_triggers() == before_triggers  # the tables were not rebuilt
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
