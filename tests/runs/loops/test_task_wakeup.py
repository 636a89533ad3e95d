"""Without NOTIFY (SQLite), a db_worker's wait between claim turns is its poll interval
(PostgreSQL's wake-ups: tests/scaleout/test_task_wakeup.py)."""

from __future__ import annotations

import pytest
from django.db import connection

from tools_app.runs.loops.task_wakeup import TaskWakeups, wake_workers

pytestmark = pytest.mark.django_db


def test_without_notify_the_worker_polls() -> None:
    assert connection.vendor == "sqlite"
    wakeups = TaskWakeups(connection)
    assert wakeups.listen() is False
    assert wakeups.wait(0) is False
    assert not wakeups.listening
    wake_workers("default")  # nothing to tell, and nothing fails
