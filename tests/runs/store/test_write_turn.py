"""SQLite's write turns are the same for every process writing the database: a writer
holding `write_turn` keeps out any other open of the turn's lock file, as another
process's writer (the proxy's recorder process) would open it."""

from __future__ import annotations

import fcntl
import os

import pytest
from django.db import connection

from tools_app.runs.store import db
from tools_app.runs.store.db import write_turn

pytestmark = pytest.mark.django_db


def _taken_elsewhere(path: str) -> bool:
    """Whether another open file (as another process has) finds the turn taken."""
    other = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(other)  # closing also releases the lock if it was taken
    return False


def test_a_write_turn_keeps_other_processes_writers_waiting() -> None:
    assert connection.vendor == "sqlite"  # the embedded pass (PostgreSQL takes no turns)
    with write_turn():
        turn_file = db._turn_file(str(connection.settings_dict["NAME"]))
        assert turn_file is not None
        path = os.readlink(f"/proc/self/fd/{turn_file}")
        assert _taken_elsewhere(path)
        with write_turn():  # taken again on the same thread: already held
            assert _taken_elsewhere(path)
    assert not _taken_elsewhere(path)
