"""SQLite's write turns are the same for every process writing the database: the turn's
lock file lies beside the database, so another process's writer (the proxy's recorder
process) finds it whatever its temporary directory, and waits while a writer here
holds `write_turn`."""

from __future__ import annotations

import fcntl
import os
import selectors
import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest
from django.db import connection

from tools_app.runs.store import db
from tools_app.runs.store.db import write_turn

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[3]
OTHER_WRITER = """
import django
django.setup()
from tools_app.runs.store.db import write_turn
print("waiting", flush=True)
with write_turn():
    print("in turn", flush=True)
"""


def _taken_elsewhere(path: str) -> bool:
    """Whether another open file (as another process has) finds the turn taken."""
    other = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(other)  # closing also releases the lock if it was taken
    return False


def _database() -> str:
    assert connection.vendor == "sqlite"  # the embedded pass (PostgreSQL takes no turns)
    return str(connection.settings_dict["NAME"])


def test_the_turn_file_lies_beside_the_database() -> None:
    with write_turn():
        turn_file = db._turn_file(_database())
        assert turn_file is not None
        path = os.readlink(f"/proc/self/fd/{turn_file}")
        assert path == os.path.realpath(_database()) + db.TURN_FILE_SUFFIX
        assert _taken_elsewhere(path)
        with write_turn():  # taken again on the same thread: already held
            assert _taken_elsewhere(path)
    assert not _taken_elsewhere(path)


def test_a_symbolic_link_in_the_turn_files_place_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    (tmp_path / ("db.sqlite3" + db.TURN_FILE_SUFFIX)).symlink_to(elsewhere)
    with pytest.raises(OSError):
        db._turn_file(str(tmp_path / "db.sqlite3"))
    assert not elsewhere.exists()


def test_another_process_writing_the_database_waits_for_the_turn(tmp_path: Path) -> None:
    """The other process has a temporary directory of its own (as under systemd's
    PrivateTmp), and still waits until the turn held here is done."""
    other_tmp = tmp_path / "tmp"
    other_tmp.mkdir()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agentforge_web.settings",
           "DATA_DIR": str(tmp_path), "TMPDIR": str(other_tmp),
           "REDIS_URL": "redis://127.0.0.1:1/0", "DATABASE_URL": f"sqlite:///{_database()}"}
    with write_turn():
        other = subprocess.Popen([sys.executable, "-c", OTHER_WRITER], cwd=ROOT, env=env,
                                 stdout=subprocess.PIPE, bufsize=0)
        try:
            assert other.stdout is not None
            assert other.stdout.readline() == b"waiting\n"  # unbuffered: nothing after
            assert not _has_more(other.stdout, 0.5)  # still waiting for its turn
        except BaseException:
            other.kill()
            other.wait()
            raise
    out, _ = other.communicate(timeout=60)
    assert (out, other.returncode) == (b"in turn\n", 0)


def _has_more(stream: IO[bytes], seconds: float) -> bool:
    """Whether `stream` has more to read within `seconds` (as it would at once, had the
    other process not had to wait for its turn)."""
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        return bool(selector.select(seconds))
