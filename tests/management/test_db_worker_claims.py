"""The db_worker's claim loop takes every task it has a free slot for in one turn: one
query and one UPDATE, however many (django-tasks-db's own loop takes one a turn)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_tasks_db.models import DBTaskResult, get_date_max

from tools_app.management.commands.db_worker import RunWorker

pytestmark = [pytest.mark.django_db, pytest.mark.both]

BACKEND = "database"
TASK_PATH = "tools_app.runs.tasks.execute_run"


class FourSlots(RunWorker):
    concurrency = 4


def worker(**overrides: Any) -> RunWorker:
    options: dict[str, Any] = {
        "queue_names": ["default"], "interval": 0.0, "batch": False,
        "backend_name": BACKEND, "startup_delay": False, "max_tasks": None,
        "worker_id": "w-claims", "excluded_queue_names": []} | overrides
    return FourSlots(**options)


def ready(count: int, **fields: Any) -> list[DBTaskResult[..., Any]]:
    defaults: dict[str, Any] = {"args_kwargs": {"args": ["run"], "kwargs": {}},
                                "task_path": TASK_PATH, "backend_name": BACKEND,
                                "run_after": get_date_max()}
    return [DBTaskResult.objects.create(**(defaults | fields)) for _ in range(count)]


def claimed_ids(claimed: list[DBTaskResult[..., Any]]) -> set[str]:
    return {str(task.pk) for task in claimed}


def test_a_turn_claims_up_to_its_limit_in_django_tasks_db_order() -> None:
    low = ready(3, priority=0)
    (high,) = ready(1, priority=10)
    before = timezone.now()

    claimed, retrieved = worker().claim_ready(2)

    assert retrieved
    assert str(claimed[0].pk) == str(high.pk)  # priority first
    assert len(claimed) == 2
    for task in DBTaskResult.objects.filter(pk__in=[t.pk for t in claimed]):
        # What DBTaskResult.claim stores.
        assert task.status == "RUNNING"
        assert task.started_at is not None
        assert task.started_at >= before
        assert task.worker_ids == ["w-claims"]
    assert DBTaskResult.objects.filter(status="READY").count() == 2

    rest, _ = worker().claim_ready(10)
    assert claimed_ids(rest) == {str(t.pk) for t in low} - claimed_ids(claimed)
    assert worker().claim_ready(10) == ([], True)  # nothing left, the database answered


def test_a_retried_task_keeps_the_ids_of_the_workers_before() -> None:
    (task,) = ready(1, worker_ids=["w-earlier"])

    worker().claim_ready(1)

    task.refresh_from_db()
    assert task.worker_ids == ["w-earlier", "w-claims"]


def test_tasks_not_ready_or_not_this_workers_are_left() -> None:
    ready(1, run_after=timezone.now() + timedelta(hours=1))  # not yet
    ready(1, backend_name="other")
    ready(1, queue_name="elsewhere")
    ready(1, status="RUNNING")
    (mine,) = ready(1)

    claimed, _ = worker().claim_ready(10)

    assert claimed_ids(claimed) == {str(mine.pk)}


def test_claiming_many_costs_the_statements_of_claiming_one() -> None:
    ready(1)
    with CaptureQueriesContext(connection) as one:
        assert len(worker().claim_ready(1)[0]) == 1
    ready(4)
    with CaptureQueriesContext(connection) as four:
        assert len(worker().claim_ready(4)[0]) == 4

    assert len(four) == len(one)


def test_a_turn_claims_only_what_its_free_slots_and_max_tasks_leave_room_for() -> None:
    free = worker()
    assert free._claimable() == 4
    free._in_flight = 3
    assert free._claimable() == 1
    free._in_flight = 4
    assert free._claimable() == 0
    assert free.claim_ready(0) == ([], False)  # no query at all

    capped = worker(max_tasks=5)
    capped._run_tasks, capped._in_flight = 2, 1
    assert capped._claimable() == 2  # 5 - 2 done - 1 running
    capped._run_tasks = 5
    assert capped._claimable() == 0


@pytest.fixture
def finished_signals() -> Any:
    from django_tasks_db.compat import task_finished

    told: list[str] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        told.append(str(task_result.status))

    task_finished.connect(receiver, dispatch_uid="test-store-outcome")
    yield told
    task_finished.disconnect(dispatch_uid="test-store-outcome")


@pytest.mark.django_db(transaction=True)
def test_a_tasks_outcome_is_stored_then_told_once(finished_signals: list[str],
                                                  settings: Any) -> None:
    from tools_app.management.commands.db_worker import _store_outcome

    settings.TASKS = {"default": {
        "BACKEND": "tools_app.runs.loops.task_wakeup.WakingDatabaseBackend"}}
    ready(3, backend_name="default")
    succeeded, failed, unstorable = worker(backend_name="default").claim_ready(3)[0]

    _store_outcome(succeeded, value="succeeded")
    _store_outcome(failed, error=RuntimeError("the run broke"))
    # A value the result column cannot hold fails the task, as django-tasks-db's does.
    _store_outcome(unstorable, value=object())

    stored = {str(t.pk): t for t in DBTaskResult.objects.all()}
    ok, broken, refused = (stored[str(t.pk)] for t in (succeeded, failed, unstorable))
    assert (ok.status, ok.return_value, ok.finished_at is not None) == (
        "SUCCESSFUL", "succeeded", True)
    assert (broken.status, broken.exception_class_path) == ("FAILED", "builtins.RuntimeError")
    assert "the run broke" in broken.traceback
    assert (refused.status, refused.exception_class_path) == ("FAILED", "builtins.TypeError")
    assert finished_signals == ["SUCCESSFUL", "FAILED", "FAILED"]


@pytest.fixture
def lanes_reset() -> Any:
    from tools_app.runs.loops import task_backend

    yield task_backend
    task_backend.use_database_lanes(None)


def test_a_db_worker_runs_its_own_number_of_database_lanes(
        lanes_reset: Any, monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    """--db-threads, else AGENTFORGE_DB_WORKER_DB_THREADS (one), not the embedded
    server's AGENTFORGE_WORKER_DB_THREADS: each loop of the process opens that many
    lanes, and runs that many event writers."""
    from django_tasks_db.management.commands import db_worker as base_command

    from tools_app.management.commands import db_worker

    seen: list[int] = []
    monkeypatch.setattr(base_command.Command, "handle",
                        lambda self, *args, **options: seen.append(
                            lanes_reset.database_lanes()))
    for name in ("preload_for_runs", "freeze_startup_objects", "reap_and_enqueue",
                 "start_reaper_thread", "close_at_exit"):
        monkeypatch.setattr(db_worker, name, lambda *args: None)
    settings.AGENTFORGE_WORKER_DB_THREADS = 2
    settings.AGENTFORGE_DB_WORKER_DB_THREADS = 1

    command = db_worker.Command()
    command.handle(concurrency=None, db_threads=3)
    command.handle(concurrency=None, db_threads=None)

    assert seen == [3, 1]
    option = command.create_parser("manage.py", "db_worker")._option_string_actions[
        "--db-threads"]
    assert option.type is db_worker.positive_int
    assert option.default is None


def test_a_loop_opens_as_many_lanes_as_the_process_is_told(
        lanes_reset: Any, settings: Any) -> None:
    import asyncio

    settings.AGENTFORGE_WORKER_DB_THREADS = 2

    async def lanes_opened() -> int:
        return len(await lanes_reset._open_lanes())

    assert asyncio.run(lanes_opened()) == 2  # the setting's
    lanes_reset.use_database_lanes(1)
    assert asyncio.run(lanes_opened()) == 1
    lanes_reset.use_database_lanes(3)
    assert asyncio.run(lanes_opened()) == 3
    lanes_reset.use_database_lanes(None)
    assert lanes_reset.database_lanes() == 2
    with pytest.raises(ValueError, match="at least one"):
        lanes_reset.use_database_lanes(0)
