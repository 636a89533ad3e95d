"""The audit log's SQLite triggers come back after a table rebuild dropped them (Django
rebuilds a SQLite table for many schema changes; PostgreSQL's triggers survive them):
the SQLite pass only."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection

from tests.audit.support import (
    T0,
    groups,
    make_copy_run,
    make_slot_run,
    quarter,
    recount,
    regroup,
    slots,
    stored,
)
from tools_app.audit.triggers import SQLITE_GROUP_TRIGGERS, SQLITE_SLOT_TRIGGERS, SQLITE_TRIGGERS
from tools_app.models import ToolCall


@pytest.mark.django_db(transaction=True)
def test_sqlite_triggers_a_table_rebuild_dropped_come_back_and_repair_the_columns() -> None:
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER tools_app_toolcall_run_copy_insert")
    run, round_ = make_copy_run()
    call = ToolCall.objects.create(run=run, round=round_, call_index=0, call_id="a",
                                   tool_name="t")
    assert stored(call) is None  # missed while the trigger was gone
    call_command("migrate", verbosity=0)  # nothing to apply: the post-migrate check runs
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        assert set(SQLITE_TRIGGERS) <= {row[0] for row in cursor.fetchall()}
    assert stored(call) == run.created_at


@pytest.mark.django_db(transaction=True)
def test_sqlite_triggers_a_table_rebuild_dropped_come_back_with_a_recount() -> None:
    run, round_ = make_slot_run(T0)
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER tools_app_toolcall_slot_insert")
        cursor.execute("DROP TRIGGER tools_app_toolcall_group_insert")
    ToolCall.objects.create(run=run, round=round_, call_index=0, call_id="a", tool_name="t",
                            started_at=T0, is_error=True, error_message="boom")
    assert slots() == {} == groups()  # missed while the triggers were gone
    call_command("migrate", verbosity=0)  # nothing to apply: the post-migrate check runs
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        assert set(SQLITE_SLOT_TRIGGERS) | set(SQLITE_GROUP_TRIGGERS) <= {
            row[0] for row in cursor.fetchall()}
    assert slots() == recount() == {("t", quarter(T0)): (1, 1)}
    assert groups() == regroup() != {}
