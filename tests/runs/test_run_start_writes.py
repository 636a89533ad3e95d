"""What POST /api/runs writes, on both databases: the run, its first event and its task
in one transaction, the task's row as django-tasks-db's own `create` writes it
(`rowsql.insert_as_saved`), and on PostgreSQL those writes sent in one pipeline
(`runs.db.pipelined`) whose errors are Django's and roll the transaction back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.tasks import task_backends
from django.utils import timezone
from django_tasks_db import DatabaseBackend
from django_tasks_db.models import DBTaskResult, get_date_max
from psycopg.pq import PipelineStatus

from tools_app.models import ErrorPolicy, ModelEndpoint, Run, RunEvent, ToolRegistration
from tools_app.runs.loops.task_wakeup import WakingDatabaseBackend
from tools_app.runs.services import conversation, run_create
from tools_app.runs.store.db import pipelined
from tools_app.runs.store.sql import rowsql
from tools_app.runs.tasks import execute_run

pytestmark = [pytest.mark.both, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def database_backend(settings: Any) -> WakingDatabaseBackend:
    settings.TASKS = {"default": {
        "BACKEND": "tools_app.runs.loops.task_wakeup.WakingDatabaseBackend"}}
    backend = task_backends["default"]
    assert isinstance(backend, WakingDatabaseBackend)
    return backend


def _columns(task: DBTaskResult) -> dict[str, Any]:
    return {field.attname: getattr(task, field.attname)
            for field in DBTaskResult._meta.concrete_fields}


def test_the_task_row_is_the_one_django_tasks_db_writes(
        database_backend: WakingDatabaseBackend) -> None:
    before = timezone.now()
    ours = database_backend._task_to_db_task(execute_run, ["run-a"], {})
    theirs = DatabaseBackend._task_to_db_task(database_backend, execute_run, ["run-a"], {})

    stored_ours, stored_theirs = (DBTaskResult.objects.get(pk=ours.pk),
                                  DBTaskResult.objects.get(pk=theirs.pk))
    differing = {"id", "enqueued_at"}
    assert {k: v for k, v in _columns(stored_ours).items() if k not in differing} == \
        {k: v for k, v in _columns(stored_theirs).items() if k not in differing}
    # The instance returned is the row stored (its pre_save receiver and auto_now_add
    # applied), and an existing row from now on.
    assert _columns(ours) == _columns(stored_ours)
    assert stored_ours.run_after == get_date_max()  # django-tasks-db's receiver
    assert before <= stored_ours.enqueued_at <= timezone.now()
    assert (stored_ours.status, stored_ours.worker_ids) == ("READY", [])
    assert not ours._state.adding
    # What a worker reads back from it.
    result = stored_ours.task_result
    assert (result.args, result.task.module_path) == (["run-a"], execute_run.module_path)


def test_a_model_with_a_save_of_its_own_is_refused() -> None:
    class Saving(DBTaskResult):
        class Meta:
            proxy = True
            app_label = "tools_app"

        def save(self, *args: Any, **kwargs: Any) -> None:
            raise AssertionError("not called")

    with pytest.raises(TypeError, match="saves itself"):
        rowsql.insert_as_saved(Saving())
    assert not DBTaskResult.objects.exists()


def _in_pipeline() -> bool:
    return (connection.vendor == "postgresql"
            and PipelineStatus(connection.connection.pgconn.pipeline_status)
            != PipelineStatus.OFF)


def _statements_in_pipeline(action: Callable[[], Any]) -> list[tuple[str, bool, bool]]:
    """(statement, whether it was sent in a pipeline, whether in a transaction) for
    each statement `action` executes."""
    seen: list[tuple[str, bool, bool]] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append((sql, _in_pipeline(), connection.in_atomic_block))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        action()
    return seen


def test_a_run_and_its_task_are_written_in_one_pipeline_on_postgresql(
        database_backend: WakingDatabaseBackend, weather_endpoint: ModelEndpoint,
        demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> None:
    statements = _statements_in_pipeline(lambda: run_create(
        user=None, endpoint=weather_endpoint, tools=[demo_tools["get_weather"]],
        policy=policy, messages=conversation(user_message="Weather?")))

    writes = [sql.split("(")[0].strip() for sql, _, _ in statements
              if sql.startswith("INSERT")]
    assert writes == ['INSERT INTO "tools_app_run"', 'INSERT INTO "tools_app_runevent"',
                      'INSERT INTO "django_tasks_database_dbtaskresult"']
    # PostgreSQL: the writes in one pipeline (SQLite is in process: nothing to
    # pipeline), then the workers' wake-up, after the commit and alone (task_wakeup:
    # a transaction that NOTIFYs holds a cluster-wide lock through its commit's flush).
    writing = [(pipelined, in_transaction) for sql, pipelined, in_transaction in statements
               if sql.startswith("INSERT")]
    assert all(pipelined for pipelined, _ in writing) == (connection.vendor == "postgresql")
    assert all(in_transaction for _, in_transaction in writing)
    wake_ups = [(sql, pipelined, in_transaction) for sql, pipelined, in_transaction
                in statements if "pg_notify" in sql]
    if connection.vendor == "postgresql":
        assert statements[-1] == wake_ups[0]
        assert wake_ups == [("SELECT pg_notify(%s, '')", False, False)]
    else:
        assert wake_ups == []
    run = Run.objects.get()
    assert [e.seq for e in RunEvent.objects.filter(run=run)] == [1]
    assert DBTaskResult.objects.get().args_kwargs == {"args": [str(run.pk)], "kwargs": {}}


def test_an_error_in_a_pipeline_is_djangos_and_rolls_the_transaction_back(
        weather_endpoint: ModelEndpoint, policy: ErrorPolicy) -> None:
    def write_twice() -> None:
        with transaction.atomic(), pipelined():
            ModelEndpoint.objects.filter(pk=weather_endpoint.pk).update(model="changed")
            duplicate = ErrorPolicy.objects.get(pk=policy.pk)
            rowsql.insert(ErrorPolicy, [{field.name: getattr(duplicate, field.attname)
                                         for field in ErrorPolicy._meta.concrete_fields}],
                          fill_defaults=False)  # the same primary key again

    with pytest.raises(IntegrityError):
        write_twice()
    assert ModelEndpoint.objects.get(pk=weather_endpoint.pk).model != "changed"
    assert not connection.in_atomic_block
    # The connection is usable again, outside any pipeline.
    assert ErrorPolicy.objects.filter(pk=policy.pk).count() == 1
    assert not _in_pipeline()
