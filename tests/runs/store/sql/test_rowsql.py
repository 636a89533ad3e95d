"""rowsql's statements on both databases: a batch of more than psycopg's 50 cached
parameters, the placeholder style each cursor takes, database errors as Django's."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.runs.support import start
from tools_app.models import ErrorPolicy, ModelEndpoint, RunEvent, ToolRegistration
from tools_app.runs.store.sql import rowsql, rowsql_driver

pytestmark = pytest.mark.both


def _events(run_id: Any, seqs: range) -> list[dict[str, Any]]:
    now = timezone.now()
    return [{"run": run_id, "seq": seq, "kind": "note", "created_at": now,
             "payload": {"n": seq, "text": "ü%s$1"}} for seq in seqs]


@pytest.fixture
def run(make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> Any:
    endpoint: ModelEndpoint = make_endpoint([{"text": "done"}])
    return start(endpoint, [tools["lookup"]], policy)


def test_a_batch_of_many_parameters_is_stored_and_read_back_as_the_orm_would(run: Any) -> None:
    # 30 rows x 5 columns: well past the 50 parameters psycopg caches a rewrite for.
    returned = rowsql.insert(RunEvent, _events(run.pk, range(100, 130)), returning="seq")
    assert returned == list(range(100, 130))
    stored = RunEvent.objects.filter(run=run, seq__gte=100).order_by("seq")
    assert [(e.seq, e.payload) for e in stored] == [
        (seq, {"n": seq, "text": "ü%s$1"}) for seq in range(100, 130)]
    assert sorted(rowsql.select(RunEvent, ("seq",), {"run": run.pk, "kind": "note"})) == [
        (seq,) for seq in range(100, 130)]
    assert rowsql.update(RunEvent, {"run": run.pk, "seq": 101}, {"kind": "renamed"},
                         returning=("seq", "kind")) == (101, "renamed")


def test_a_failing_statement_raises_djangos_error_and_leaves_the_transaction_usable(
        run: Any) -> None:
    rowsql.insert(RunEvent, _events(run.pk, range(200, 201)))
    with pytest.raises(IntegrityError), transaction.atomic():
        rowsql.insert(RunEvent, _events(run.pk, range(199, 202)))
    assert rowsql.select(RunEvent, ("seq",), {"run": run.pk, "kind": "note"}) == [(200,)]


def test_each_cursor_gets_the_placeholders_it_takes(run: Any) -> None:
    with CaptureQueriesContext(connection) as logged:
        rowsql.update(RunEvent, {"run": run.pk, "seq": 0}, {"kind": "logged"})
    # Where Django logs queries, its own cursor runs the "%s" form and logs it rendered.
    assert "$1" not in logged.captured_queries[-1]["sql"]
    assert "logged" in logged.captured_queries[-1]["sql"]
    with rowsql_driver.executed(connection, "SELECT %s, %s", [1, "two"]) as cursor:
        assert cursor.fetchone() == (1, "two")
        if connection.vendor == "postgresql":
            import psycopg

            assert isinstance(cursor.cursor, psycopg.RawCursor)
    assert rowsql_driver.numbered("UPDATE t SET a = %s WHERE b = %s") == \
        "UPDATE t SET a = $1 WHERE b = $2"


def test_in_picks_the_rows_holding_one_of_its_values(run: Any) -> None:
    rowsql.insert(RunEvent, _events(run.pk, range(300, 306)))
    picked = rowsql.In((301, 303, 305))

    assert sorted(rowsql.select(RunEvent, ("seq",), {"run": run.pk, "seq": picked})) == [
        (301,), (303,), (305,)]
    assert rowsql.update(RunEvent, {"run": rowsql.In((run.pk,)), "seq": picked},
                         {"kind": "odd"}) == 3
    assert sorted(RunEvent.objects.filter(run=run, kind="odd").values_list(
        "seq", flat=True)) == [301, 303, 305]
    with pytest.raises(ValueError, match="at least one"):
        rowsql.select(RunEvent, ("seq",), {"seq": rowsql.In(())})


def test_each_value_is_prepared_as_its_field_prepares_it(run: Any) -> None:
    """Each column's way of preparing is chosen once (plain values as they are, ids and
    times prepared once a value, the rest by the field): whatever the kind of value, the
    result is what the field's own `get_db_prep_save` gives."""
    import uuid
    from datetime import UTC, datetime

    from tools_app.models import Run, RunStatus
    from tools_app.runs.store.sanitize import Encoded

    moment = datetime(2026, 12, 5, 6, 30, 1, 250, tzinfo=UTC)
    cases = [
        ("status", RunStatus.RUNNING), ("status", "queued"), ("title", None),
        ("last_seq", 7), ("cancel_requested", True), ("wall_ms", 12.5),
        ("id", run.pk), ("id", str(run.pk)), ("id", uuid.UUID(str(run.pk)).hex),
        ("created_at", moment), ("created_at", moment.isoformat()),
        ("created_by", None), ("snapshot", {"k": ["v", 1]}), ("snapshot", [1, None]),
    ]
    for name, value in cases:
        field = Run._meta.get_field(name)
        expected = field.get_db_prep_save(value, connection)  # type: ignore[union-attr]
        for _ in range(2):  # the first preparation and the remembered one
            prepared = rowsql_driver.prepared(Run, name, value, connection)
            if connection.vendor == "postgresql" and name == "snapshot":
                assert (prepared.obj, type(prepared)) == (expected.obj, type(expected))
            else:  # a plain value may be left to the driver (psycopg types an int itself)
                assert prepared == expected, name
                assert type(prepared) in (type(expected), type(value)), name
    assert rowsql_driver.prepared(Run, "last_seq", rowsql.Add(3), connection) == 3
    encoded = rowsql_driver.prepared(Run, "snapshot", Encoded({"a": 1}, '{"a": 1}'), connection)
    assert (encoded if connection.vendor != "postgresql" else encoded.obj) == '{"a": 1}'
