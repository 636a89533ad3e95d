"""Living through a database outage, piece by piece (issue 42, finding 1; the whole
worker against a real PostgreSQL outage is tests/scaleout/test_database_outage.py):
the backoff, the once-only logging, the claim loop and the reaper retrying, the LISTEN
connection, the heartbeat rows, `manage.py worker_status` and their admin page."""

from __future__ import annotations

import logging
import socket
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import InterfaceError, OperationalError
from django.test import Client
from django.utils import timezone
from django_tasks_db.models import DBTaskResult, get_date_max

from tools_app.management.commands import db_worker
from tools_app.management.commands.db_worker import RunWorker
from tools_app.models import WorkerHeartbeat
from tools_app.runs import sweeps
from tools_app.runs.loops.task_wakeup import TaskWakeups
from tools_app.runs.store.outage import Backoff, Outage
from tools_app.runs.store.worker_beats import WorkerBeat, worker_health

GONE = OperationalError("the database system is shutting down")


def warnings_and_infos(caplog: pytest.LogCaptureFixture) -> tuple[list[str], list[str]]:
    return ([r.getMessage() for r in caplog.records if r.levelno == logging.WARNING],
            [r.getMessage() for r in caplog.records if r.levelno == logging.INFO])


# -- backoff and logging ---------------------------------------------------------------


def test_the_backoff_doubles_up_to_its_cap_with_jitter() -> None:
    top = Backoff(first=0.5, cap=10.0, rand=lambda: 1.0)
    assert [top.next_delay() for _ in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    bottom = Backoff(first=0.5, cap=10.0, rand=lambda: 0.0)
    assert [bottom.next_delay() for _ in range(3)] == [0.25, 0.5, 1.0]  # half the step
    top.reset()
    assert top.next_delay() == 0.5


def test_an_outage_is_logged_once_when_it_starts_and_once_when_it_ends(
        caplog: pytest.LogCaptureFixture) -> None:
    outage = Outage(logging.getLogger("test.outage"), "thing",
                    Backoff(rand=lambda: 1.0), clock=iter([100.0, 107.5, 200.0]).__next__)
    with caplog.at_level(logging.INFO, logger="test.outage"):
        outage.succeeded()  # never down: nothing to say
        delays = [outage.failed(GONE) for _ in range(4)]
        outage.succeeded()
        outage.succeeded()
    warnings, infos = warnings_and_infos(caplog)
    assert warnings == ["thing: the database is unavailable (OperationalError: the database "
                        "system is shutting down); retrying with backoff until it is back"]
    assert infos == ["thing: the database is back after 7.5 s (4 failed attempt(s))"]
    assert delays == [0.5, 1.0, 2.0, 4.0]
    assert not outage.down
    assert outage.failed(GONE) == 0.5  # a new outage starts from the first delay


# -- the claim loop and the reaper -------------------------------------------------------


def batch_worker() -> RunWorker:
    """A worker in --batch mode: its loop ends at the first turn that finds nothing."""
    return RunWorker(queue_names=["default"], interval=0.0, batch=True,
                     backend_name="database", startup_delay=False, max_tasks=None,
                     worker_id="w-outage", excluded_queue_names=[])


# Committed rows: the loop gives its connection back between turns, as after a request.
@pytest.mark.django_db(transaction=True)
def test_the_claim_loop_backs_off_and_claims_again_once_the_database_is_back(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    answers: list[Any] = [GONE, InterfaceError("connection already closed"), GONE, ([], True)]
    worker = batch_worker()

    def claim_ready(limit: int) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    slept: list[float] = []
    dropped: list[bool] = []
    monkeypatch.setattr(worker, "claim_ready", claim_ready)
    monkeypatch.setattr(worker, "_sleep", slept.append)
    monkeypatch.setattr(db_worker, "drop_broken_connections", lambda: dropped.append(True))
    with caplog.at_level(logging.INFO, logger=db_worker.logger.name):
        worker.run()  # the batch ends at the turn that found nothing: it did not raise

    assert answers == []
    assert len(slept) == len(dropped) == 3
    assert slept == sorted(slept)  # each step at least as long as the one before
    warnings, infos = warnings_and_infos(caplog)
    assert [w for w in warnings if "unavailable" in w] == [
        "worker w-outage: the database is unavailable (OperationalError: the database "
        "system is shutting down); retrying with backoff until it is back"]
    assert [i.split(" after ")[0] for i in infos if "is back" in i] == [
        "worker w-outage: the database is back"]
    # The loop's heartbeat was written, then marked stopped at the end.
    beat = WorkerHeartbeat.objects.get(worker_id="w-outage")
    assert beat.stopped_at is not None
    assert beat.pid > 0


@pytest.mark.django_db
def test_the_reaper_logs_an_outage_once_and_keeps_sweeping(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    results: list[Exception | None] = [GONE, GONE, GONE, None]

    def reap() -> list[str]:
        error = results.pop(0)
        if error is not None:
            raise error
        return []

    monkeypatch.setattr(sweeps, "reap_and_enqueue", reap)
    monkeypatch.setattr(sweeps, "analyze_grown_tables", list)
    monkeypatch.setattr(sweeps, "_reaper_outage", Outage(sweeps.logger, "run reaper"))
    with caplog.at_level(logging.INFO, logger="tools_app.runs.sweeps"):
        for _ in range(4):
            sweeps.sweep()
    warnings, infos = warnings_and_infos(caplog)
    assert len(warnings) == 1
    assert warnings[0].startswith("run reaper: the database is unavailable")
    assert len(infos) == 1
    assert infos[0].startswith("run reaper: the database is back")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # no traceback a sweep


def test_the_reaping_steps_leave_a_lost_database_to_the_sweep(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """expire_waiting_runs' own error handling logs other errors, not this one."""
    def gone(**kwargs: Any) -> None:
        raise GONE

    monkeypatch.setattr(sweeps, "expire_waiting_runs", gone)
    with pytest.raises(OperationalError):
        sweeps.reap_and_enqueue()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, never listened to, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_the_listen_connection_logs_its_loss_once_and_polls_meanwhile(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    wakeups = TaskWakeups(_SqliteLike())  # type: ignore[arg-type]
    # Connection parameters as a PostgreSQL connection's, to a server that is not there.
    wakeups._params = {"host": "127.0.0.1", "port": closed_port(), "dbname": "none",
                       "user": "none", "connect_timeout": 5}
    monkeypatch.setattr("tools_app.runs.loops.task_wakeup.time.sleep", lambda seconds: None)
    with caplog.at_level(logging.INFO, logger="tools_app.runs.loops.task_wakeup"):
        woken = [wakeups.wait(1.0) for _ in range(3)]
    assert woken == [False, False, False]  # polled: no notification without a listener
    warnings, _ = warnings_and_infos(caplog)
    assert len(warnings) == 1
    assert warnings[0].startswith("listening for enqueued tasks: the database is unavailable")
    assert not wakeups.listening


class _SqliteLike:
    vendor = "sqlite"


# -- heartbeats, worker_status, the admin ----------------------------------------------


def enqueued(minutes_ago: float) -> DBTaskResult[..., Any]:
    task: DBTaskResult[..., Any] = DBTaskResult.objects.create(
        args_kwargs={"args": ["run"], "kwargs": {}}, task_path="tools_app.runs.tasks.execute_run",
        backend_name="database", run_after=get_date_max())
    DBTaskResult.objects.filter(pk=task.pk).update(
        enqueued_at=timezone.now() - timedelta(minutes=minutes_ago))
    return task


@pytest.mark.django_db
def test_a_heartbeat_is_one_row_a_process_updated_in_place() -> None:
    beat = WorkerBeat("w-beat", concurrency=4)
    beat.write(running=0)
    beat.record_claims(3)
    beat.write(running=3)
    [row] = WorkerHeartbeat.objects.all()
    assert (row.worker_id, row.running, row.concurrency, row.claimed) == ("w-beat", 3, 4, 3)
    assert row.last_claimed_at is not None
    assert row.stopped_at is None
    assert not beat.due(timezone.now())


@pytest.mark.django_db
def test_worker_status_is_ok_when_nothing_waits(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("worker_status")
    out = capsys.readouterr().out
    assert "No db_worker has sent a heartbeat" in out
    assert "OK" in out


@pytest.mark.django_db
def test_worker_status_fails_when_runs_wait_and_no_worker_claims() -> None:
    enqueued(minutes_ago=5)
    WorkerBeat("w-idle", concurrency=2).write(running=0)  # alive, but never claimed

    with pytest.raises(CommandError) as raised:
        call_command("worker_status", "--stale-after", "60")
    assert raised.value.returncode == 1
    assert "1 run(s)/task(s) waiting" in str(raised.value)
    assert "the workers alive are not claiming" in str(raised.value)


@pytest.mark.django_db
def test_worker_status_is_ok_while_a_worker_claims(capsys: pytest.CaptureFixture[str]) -> None:
    enqueued(minutes_ago=5)
    beat = WorkerBeat("w-busy", concurrency=1)
    beat.record_claims(1)
    beat.write(running=1)

    call_command("worker_status", "--json")
    out = capsys.readouterr().out
    assert '"ok": true' in out
    assert '"worker_id": "w-busy"' in out
    assert worker_health(60.0).waiting == 1


@pytest.mark.django_db
def test_a_recent_task_is_not_yet_a_stuck_one() -> None:
    enqueued(minutes_ago=0)
    assert not worker_health(60.0).stuck


@pytest.mark.django_db
def test_the_admin_shows_heartbeats_read_only(alice_client: Client) -> None:
    WorkerBeat("w-admin", concurrency=2).write(running=1)
    page = alice_client.get("/admin/tools_app/workerheartbeat/")
    assert page.status_code == 200
    assert "w-admin" in page.content.decode()
    assert alice_client.get("/admin/tools_app/workerheartbeat/add/").status_code == 403
