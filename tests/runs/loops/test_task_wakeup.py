"""Without NOTIFY (SQLite), a db_worker's wait between claim turns is its poll interval
(PostgreSQL's wake-ups: tests/scaleout/test_task_wakeup.py)."""

from __future__ import annotations

import os
import resource
import time

import pytest
from django.db import connection

from tools_app.runs.loops.task_wakeup import StopSignal, TaskWakeups, wake_workers

pytestmark = pytest.mark.django_db


def test_without_notify_the_worker_polls() -> None:
    assert connection.vendor == "sqlite"
    wakeups = TaskWakeups(connection)
    assert wakeups.listen() is False
    assert wakeups.wait(0) is False
    assert not wakeups.listening
    wake_workers("default")  # nothing to tell, and nothing fails


def test_a_stop_ends_the_poll_wait_at_once() -> None:
    """The worker's stop signal (set by its signal handler, here before the wait began)
    ends its poll wait; the bound is far below the wait's 60 s."""
    stop = StopSignal()
    try:
        wakeups = TaskWakeups(connection, stop)
        stop.set()
        started = time.monotonic()
        assert wakeups.wait(60.0) is False
        assert time.monotonic() - started < 10.0
    finally:
        stop.close()


def test_a_wait_works_on_descriptors_numbered_past_1024() -> None:
    """A worker with many files open gets descriptors past `select.select`'s limit of
    1024: its waits still end at a stop, and at their timeout without one."""
    high = 1100
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, high + 100), hard))
    fillers: list[int] = []
    try:
        while not fillers or fillers[-1] < high:  # the lower numbers all taken
            fillers.append(os.open(os.devnull, os.O_RDONLY))
        stop = StopSignal()
        try:
            assert stop.fileno() > high
            wakeups = TaskWakeups(connection, stop)
            assert wakeups.wait(0.01) is False
            stop.sleep(0.01)
            stop.set()
            started = time.monotonic()
            assert wakeups.wait(60.0) is False
            stop.sleep(60.0)
            assert time.monotonic() - started < 10.0
        finally:
            stop.close()
    finally:
        for descriptor in fillers:
            os.close(descriptor)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
