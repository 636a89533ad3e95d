"""Who records the proxy's exchanges (the recorder process, a server's default, or a
thread of the serving process) and when a proxied run ends (once its conversation has
gone idle, as the ingest idle sweep ends it)."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.utils import timezone

from tests.proxy.conftest import Proxy
from tools_app.ingest.idle import end_idle_runs
from tools_app.models import Round, Run, RunStatus
from tools_app.proxy import recorders
from tools_app.proxy.recorders import ProcessRecorder
from tools_app.runs.store.eventlog import run_event_committed

pytestmark = pytest.mark.django_db(transaction=True)

WAIT_SECONDS = 20.0


def _ask(proxy: Proxy, run: str, question: str, **extra: Any) -> httpx.Response:
    return httpx.post(f"{proxy.openai_base()}/chat/completions",
                      json={"model": "fake-model", **extra,
                            "messages": [{"role": "user", "content": question}]},
                      headers={"Authorization": f"Bearer {proxy.token}",
                               "X-AgentForge-Run": run})


def _questions(run: Run) -> list[str]:
    """Each round's question, in the rounds' order."""
    out = []
    for request in Round.objects.filter(run=run).order_by("index").values_list(
            "request_json", flat=True):
        text = json.dumps(request)
        out.append(next(q for q in ("A", "B", "C", *map(str, range(10)))
                        if f"question {q}\"" in text))
    return out


def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _recorder_children() -> set[int]:
    return {p.pid for p in multiprocessing.active_children()
            if p.name == "proxy-recorder" and p.pid is not None}


@pytest.fixture
def own_recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[ProcessRecorder]:
    """A recorder process of the test's own (the view records through it), stopped at
    the end."""
    mine = ProcessRecorder()
    monkeypatch.setitem(recorders._RECORDERS, "process", mine)
    monkeypatch.setattr(django_settings, "AGENTFORGE_PROXY_RECORDER", "process")
    try:
        yield mine
    finally:
        mine.close()


@pytest.mark.both
@pytest.mark.parametrize("kind", ["process", "thread"])
def test_a_conversations_exchanges_are_recorded_in_order(proxy: Proxy, kind: str,
                                                          settings: Any) -> None:
    settings.AGENTFORGE_PROXY_RECORDER = kind
    for number in range(6):
        assert _ask(proxy, "ordered", f"question {number}").status_code == 200
    proxy.recorded()

    run = Run.objects.get(created_by=proxy.user)
    assert _questions(run) == ["0", "1", "2", "3", "4", "5"]
    process = recorders.recorder()
    assert isinstance(process, ProcessRecorder) == (kind == "process")
    if isinstance(process, ProcessRecorder):
        assert process.child_pid not in (None, os.getpid())


@pytest.mark.both
@pytest.mark.parametrize("nice", [10, 0])
def test_the_recorder_process_runs_below_the_servers_priority_by_the_setting(
        proxy: Proxy, own_recorder: ProcessRecorder, settings: Any, nice: int) -> None:
    """On PostgreSQL; on SQLite it shares the server's write turn (a file lock), and
    runs as the server does: the server's writers never wait on a process run last."""
    settings.AGENTFORGE_PROXY_RECORDER_NICE = nice
    assert _ask(proxy, "niced", "question 0").status_code == 200
    proxy.recorded()

    child = own_recorder.child_pid
    assert child is not None
    server = os.getpriority(os.PRIO_PROCESS, 0)
    lower = nice if connection.vendor == "postgresql" else 0
    assert os.getpriority(os.PRIO_PROCESS, child) == min(19, server + lower)
    assert [_questions(run) for run in Run.objects.filter(created_by=proxy.user)] == [["0"]]


def test_a_killed_recorder_process_is_restarted_losing_only_what_it_held(
        proxy: Proxy, own_recorder: ProcessRecorder) -> None:
    assert _ask(proxy, "before", "question 0").status_code == 200
    proxy.recorded()
    first = own_recorder.child_pid
    assert first is not None
    os.kill(first, signal.SIGSTOP)  # it takes the next exchange and holds it

    assert _ask(proxy, "killed", "question A").status_code == 200
    _until(lambda: own_recorder._in_flight == 1, "A was not handed to the recorder")
    for question in ("question B", "question C"):  # queued meanwhile
        assert _ask(proxy, "killed", question).status_code == 200
    os.kill(first, signal.SIGKILL)
    own_recorder.drain()

    assert own_recorder.lost == 1  # A, which the killed process held
    assert own_recorder.started == 2
    assert own_recorder.child_pid not in (None, first)
    assert _gone(first)
    recorded = {tuple(_questions(run)) for run in Run.objects.filter(created_by=proxy.user)}
    assert recorded == {("0",), ("B", "C")}


def test_a_whole_answer_wakes_the_recorder_once_written(
        proxy: Proxy, own_recorder: ProcessRecorder, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _ask(proxy, "woken", "question 0").status_code == 200
    proxy.recorded()
    monkeypatch.setattr(recorders, "LOOK_SECONDS", 60.0)  # no look of its own meanwhile
    time.sleep(0.6)  # the look the feeder began before (0.5 s) ends: now it waits 60 s

    started = time.monotonic()
    assert _ask(proxy, "woken", "question 1").status_code == 200
    proxy.recorded()  # woken when the server closed the response

    assert time.monotonic() - started < 10
    assert _questions(Run.objects.get(created_by=proxy.user)) == ["0", "1"]


def test_an_exchange_queued_without_a_wake_is_taken_at_the_recorders_next_look(
        proxy: Proxy, own_recorder: ProcessRecorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recorders, "LOOK_SECONDS", 0.2)
    monkeypatch.setattr(ProcessRecorder, "wake", lambda self: None)  # a response never closed
    for number in range(2):
        assert _ask(proxy, "unwoken", f"question {number}").status_code == 200
    proxy.recorded()

    assert _questions(Run.objects.get(created_by=proxy.user)) == ["0", "1"]


def test_past_its_queue_an_exchange_is_dropped_counted_and_logged(
        proxy: Proxy, own_recorder: ProcessRecorder,
        caplog: pytest.LogCaptureFixture) -> None:
    own_recorder.capacity = 1
    assert _ask(proxy, "full", "question 0").status_code == 200
    proxy.recorded()
    pid = own_recorder.child_pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # busy with the next exchange for as long as it takes
    try:
        assert _ask(proxy, "full", "question 1").status_code == 200
        _until(lambda: own_recorder._in_flight == 1, "1 was not handed to the recorder")
        assert _ask(proxy, "full", "question 2").status_code == 200  # waits in the queue
        with caplog.at_level(logging.WARNING, logger=recorders.__name__):
            started = time.monotonic()
            assert _ask(proxy, "full", "question 3").status_code == 200
            assert time.monotonic() - started < WAIT_SECONDS / 2  # the client never waits
    finally:
        os.kill(pid, signal.SIGCONT)
    proxy.recorded()

    assert own_recorder.dropped == 1
    assert "recording queue full" in caplog.text
    assert _questions(Run.objects.get(created_by=proxy.user)) == ["0", "1", "2"]


def test_no_recorder_process_is_left_after_close(proxy: Proxy,
                                                 own_recorder: ProcessRecorder) -> None:
    before = _recorder_children()
    assert _ask(proxy, "closing", "question 0").status_code == 200
    proxy.recorded()
    pid = own_recorder.child_pid
    assert pid is not None
    assert _recorder_children() == before | {pid}

    own_recorder.close()

    assert _recorder_children() == before
    assert _gone(pid)
    assert own_recorder.child_pid is None
    # An exchange after the close is not recorded (counted) and starts no process.
    assert _ask(proxy, "closing", "question 1").status_code == 200
    assert own_recorder.dropped == 1
    assert own_recorder.child_pid is None


def _stuck_holding_one(proxy: Proxy, recorder: ProcessRecorder, conversation: str) -> int:
    """The recorder process recorded question 0, then was stopped (SIGSTOP) holding
    question 1 in its next batch; its pid."""
    assert _ask(proxy, conversation, "question 0").status_code == 200
    proxy.recorded()
    pid = recorder.child_pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # stuck in the next batch
    assert _ask(proxy, conversation, "question 1").status_code == 200
    _until(lambda: recorder._in_flight == 1, "1 was not handed to the recorder")
    return pid


def test_close_does_not_wait_for_a_stuck_recorder_process(
        proxy: Proxy, own_recorder: ProcessRecorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recorders, "STOP_SECONDS", 0.5)
    pid = _stuck_holding_one(proxy, own_recorder, "stuck")

    started = time.monotonic()
    own_recorder.close()
    own_recorder.drain()

    assert time.monotonic() - started < WAIT_SECONDS / 2
    assert _gone(pid)
    assert own_recorder.lost == 1


def _queued_without_a_look(proxy: Proxy, recorder: ProcessRecorder,
                           monkeypatch: pytest.MonkeyPatch, run: str,
                           questions: list[str]) -> None:
    """The questions asked and left in the recorder's queue: the feeder not woken and
    not looking again for a long while."""
    monkeypatch.setattr(recorders, "LOOK_SECONDS", 60.0)
    monkeypatch.setattr(ProcessRecorder, "wake", lambda self: None)
    time.sleep(0.6)  # the look the feeder began before (0.5 s) ends: now it waits 60 s
    for question in questions:
        assert _ask(proxy, run, question).status_code == 200
    assert len(recorder._pending) == len(questions)


def test_close_records_what_is_still_queued(
        proxy: Proxy, own_recorder: ProcessRecorder, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _ask(proxy, "closing", "question 0").status_code == 200
    proxy.recorded()
    _queued_without_a_look(proxy, own_recorder, monkeypatch, "closing",
                           ["question 1", "question 2"])

    own_recorder.close()

    assert _questions(Run.objects.get(created_by=proxy.user)) == ["0", "1", "2"]
    assert own_recorder.lost == 0
    assert own_recorder.child_pid is None


def test_what_close_cannot_record_in_time_is_counted_lost_and_logged(
        proxy: Proxy, own_recorder: ProcessRecorder, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    pid = _stuck_holding_one(proxy, own_recorder, "late")
    _queued_without_a_look(proxy, own_recorder, monkeypatch, "late",
                           ["question 2", "question 3"])
    monkeypatch.setattr(recorders, "STOP_SECONDS", 0.5)

    with caplog.at_level(logging.WARNING, logger=recorders.__name__):
        own_recorder.close()
        own_recorder.drain()

    assert _gone(pid)
    assert own_recorder.lost == 3  # 1, which the stuck process held, and 2 and 3 queued
    assert "closed with 2 exchanges still queued" in caplog.text
    assert _questions(Run.objects.get(created_by=proxy.user)) == ["0"]


def test_the_recorder_process_exits_when_the_server_goes(
        proxy: Proxy, own_recorder: ProcessRecorder) -> None:
    assert _ask(proxy, "orphan", "question 0").status_code == 200
    proxy.recorded()
    child = own_recorder._child
    assert child is not None

    child.connection.close()  # as the server's end closes when it dies, however it dies
    child.process.join(WAIT_SECONDS)

    assert child.process.exitcode == 0


def test_the_runs_the_recorder_process_changed_reach_viewers_from_the_server(
        proxy: Proxy, own_recorder: ProcessRecorder) -> None:
    told: list[tuple[str, int]] = []

    async def viewer(sender: Any, run_id: str, message: dict[str, Any], **_: Any) -> None:
        told.append((run_id, message["seq"]))

    run_event_committed.connect(viewer, dispatch_uid="test-proxy-viewer")
    try:
        for number in range(2):
            assert _ask(proxy, "watched", f"question {number}").status_code == 200
            proxy.recorded()
    finally:
        run_event_committed.disconnect(dispatch_uid="test-proxy-viewer")

    run = Run.objects.get(created_by=proxy.user)
    assert [run_id for run_id, _ in told] == [str(run.pk)] * 2
    assert told[-1][1] == run.last_seq


# -- when a proxied run ends --------------------------------------------------------------


def _idle_sweep(after_seconds: float) -> list[str]:
    return end_idle_runs(now=timezone.now() + timedelta(seconds=after_seconds))


@pytest.mark.both
def test_a_proxied_run_stays_running_between_exchanges_and_ends_once_idle(
        proxy: Proxy) -> None:
    idle = django_settings.AGENTFORGE_OTLP_IDLE_SECONDS
    assert _ask(proxy, "talk", "question 0").status_code == 200
    proxy.recorded()
    run = Run.objects.get(created_by=proxy.user)
    assert run.status == RunStatus.RUNNING
    assert _idle_sweep(0) == []

    assert _ask(proxy, "talk", "question 1").status_code == 200
    proxy.recorded()
    assert _idle_sweep(idle - 5) == []  # not idle long enough yet
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert run.rounds_count == 2

    assert _idle_sweep(idle + 1) == [str(run.pk)]
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert (run.error_type, run.error_message) == ("", "")
    last_round = Round.objects.get(run=run, index=1)
    assert run.finished_at is not None
    assert last_round.finished_at is not None
    assert abs((run.finished_at - last_round.finished_at).total_seconds()) < 0.01


@pytest.mark.both
def test_a_proxied_run_whose_last_exchange_was_a_provider_error_ends_failed(
        proxy: Proxy) -> None:
    assert _ask(proxy, "broken", "question 0").status_code == 200
    assert _ask(proxy, "broken", "question 1", foo=1).status_code == 400
    proxy.recorded()
    run = Run.objects.get(created_by=proxy.user)
    assert run.status == RunStatus.RUNNING

    assert proxy.ended() == [str(run.pk)]
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "Unrecognized request argument supplied: foo" in run.error_message


def test_the_recorder_process_ignores_sigterm_and_sigint_and_ends_with_its_pipe(
        proxy: Proxy, own_recorder: ProcessRecorder) -> None:
    assert _ask(proxy, "signalled", "question 0").status_code == 200
    proxy.recorded()
    child = own_recorder._child
    assert child is not None

    for sent in (signal.SIGTERM, signal.SIGINT):  # as a process group's stop sends them
        os.kill(child.process.pid, sent)
    assert _ask(proxy, "signalled", "question 1").status_code == 200
    proxy.recorded()  # the same process still records

    assert own_recorder._child is child
    assert child.process.is_alive()
    assert _questions(Run.objects.get(created_by=proxy.user)) == ["0", "1"]
    child.connection.close()
    child.process.join(WAIT_SECONDS)
    assert child.process.exitcode == 0
