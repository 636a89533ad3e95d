"""A task's enqueue wakes the db_workers listening on PostgreSQL (runs/loops/task_wakeup.py):
at its commit, never before and never for a rolled-back one (the SQLite fallback:
tests/runs/loops/test_task_wakeup.py; a real worker woken: test_worker_wakeup.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.db import connection, transaction
from django.tasks import task_backends

from tools_app.runs.loops.task_wakeup import StopSignal, TaskWakeups, WakingDatabaseBackend
from tools_app.runs.tasks import enqueue_run

pytestmark = [pytest.mark.scaleout, pytest.mark.django_db(transaction=True)]

# Upper bound of a wait that must end with a notification, never a measured duration.
DELIVERED_WITHIN = 10.0
# A wait that a stop must end long before.
LONG_WAIT = 60.0
# A wait that must end with none: PostgreSQL delivers nothing before the commit, so
# this short bound cannot be lost to a slow machine.
NOTHING_WITHIN = 0.2


@pytest.fixture
def database_backend(settings: object) -> None:
    settings.TASKS = {  # type: ignore[attr-defined]
        "default": {"BACKEND": "tools_app.runs.loops.task_wakeup.WakingDatabaseBackend"}}
    assert isinstance(task_backends["default"], WakingDatabaseBackend)


@pytest.fixture
def wakeups() -> Iterator[TaskWakeups]:
    waiting = TaskWakeups(connection)
    try:
        yield waiting
    finally:
        waiting.close()


def test_an_enqueue_wakes_a_listening_worker_at_its_commit(
        database_backend: None, wakeups: TaskWakeups) -> None:
    assert wakeups.listen()
    with transaction.atomic():
        enqueue_run("run-1")
        # Not before the commit: the task's row is not visible to the worker yet.
        assert wakeups.wait(NOTHING_WITHIN) is False
    assert wakeups.wait(DELIVERED_WITHIN) is True


def test_a_stop_ends_a_listening_wait_at_once(database_backend: None) -> None:
    """The worker's stop signal (set by its signal handler, here before the wait began)
    ends the wait between claim turns; an enqueue still wakes a wait with no stop."""
    stop = StopSignal()
    stoppable = TaskWakeups(connection, stop)
    try:
        assert stoppable.listen()
        stop.set()
        started = time.monotonic()
        assert stoppable.wait(LONG_WAIT) is False
        assert time.monotonic() - started < DELIVERED_WITHIN
        stop.close()
        stop.set()  # a signal after the loop ended: nothing written, nothing raised
    finally:
        stoppable.close()
        stop.close()


def test_a_rolled_back_enqueue_wakes_nobody(database_backend: None,
                                           wakeups: TaskWakeups) -> None:
    assert wakeups.listen()
    def enqueue_then_fail() -> None:
        with transaction.atomic():
            enqueue_run("run-1")
            raise RuntimeError("the request failed after enqueueing")

    with pytest.raises(RuntimeError):
        enqueue_then_fail()
    assert wakeups.wait(NOTHING_WITHIN) is False


def test_tasks_enqueued_in_one_transaction_wake_the_worker_once(
        database_backend: None, wakeups: TaskWakeups) -> None:
    """PostgreSQL folds a transaction's identical notifications into one: a rerun of
    many runs at once wakes each worker once, for one claim turn that takes them all
    (as many as it has slots for)."""
    assert wakeups.listen()
    with transaction.atomic():
        for number in range(3):
            enqueue_run(f"run-{number}")
    assert wakeups.wait(DELIVERED_WITHIN) is True
    assert wakeups.wait(NOTHING_WITHIN) is False


def test_a_dropped_listener_asks_for_a_claim_turn_and_listens_again(
        database_backend: None, wakeups: TaskWakeups) -> None:
    """A database restart drops the listening connection: a notification sent meanwhile
    is lost, so the worker claims at once, then listens on a new connection."""
    assert wakeups.listen()
    pid = wakeups._listener.info.backend_pid
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    assert wakeups.wait(DELIVERED_WITHIN) is True
    assert not wakeups.listening
    assert wakeups.listen()
    assert wakeups._listener.info.backend_pid != pid
    enqueue_run("run-after-the-restart")
    assert wakeups.wait(DELIVERED_WITHIN) is True


def test_a_failed_wake_up_loses_no_task(database_backend: None, wakeups: TaskWakeups,
                                        monkeypatch: pytest.MonkeyPatch,
                                        caplog: pytest.LogCaptureFixture) -> None:
    """The notification goes after the commit: one that fails (here PostgreSQL refuses
    the channel's name) is logged, and the task stays stored for the workers' poll."""
    from django_tasks_db.models import DBTaskResult

    from tools_app.runs.loops import task_wakeup

    assert wakeups.listen()
    monkeypatch.setattr(task_wakeup, "CHANNEL", "c" * 100)  # over NAMEDATALEN
    with transaction.atomic():
        enqueue_run("run-kept")
    assert DBTaskResult.objects.filter(args_kwargs__args=["run-kept"]).count() == 1
    assert "pg_notify" in caplog.text or "channel name too long" in caplog.text
    assert wakeups.wait(NOTHING_WITHIN) is False
