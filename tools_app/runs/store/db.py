"""Database connection care for threads that live longer than one request."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DEFAULT_DB_ALIAS, connections

# SQLite lets one writer in at a time, and one that finds the database locked sleeps in
# SQLite's busy handler, in steps that grow long, while others may take the lock before
# it: a worker's writers contending that way (its groups of batches, its runs' claims
# and ends) would leave a burst's last writes waiting. So they take turns here first.
_SQLITE_WRITERS = threading.Lock()
_turn = threading.local()
_turn_files: dict[str, int] = {}  # database path -> this process's open turn file
TURN_FILE_SUFFIX = ".write-turn"  # the turn file: the database's path and this


def drop_broken_connections() -> None:
    """Close this thread's connections that failed and no longer work, so the next query
    opens a fresh one; a connection that failed but still works is kept. Django's own
    rule at the end of a request, without its age limit: on a thread that lives as long
    as its process (the live reads, a worker's database lanes) a healthy connection is
    worth keeping, and where persistent connections are not configured (`CONN_MAX_AGE =
    0` on PostgreSQL, whose pool the request threads give their connections back to)
    that limit would close it every time. Nor is a working
    connection closed for being inside a transaction, as Django's rule would: that
    transaction is its caller's (a run handed back after a database error may be inside
    one, as under the tests' transaction), and a lane's tasks leave none open."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and conn.errors_occurred:
            if conn.is_usable():
                conn.errors_occurred = False
            else:
                conn.close()


@contextmanager
def write_turn() -> Iterator[None]:
    """On SQLite, this process's turn to write: the worker's writers queue here, each
    going the moment the last is done, rather than in SQLite's busy handler. Taken
    before the writer's transaction and held for its statements (and what runs at its
    commit: a cancelled run's notification), none of which waits for a turn, so a
    holder never waits for another holder; taken again on the same thread, it is
    already held. The turn is the same for every process writing the database (the
    lock of a file beside the database, after the thread lock): the proxy's recorder
    process takes turns with the server's writers. Elsewhere (PostgreSQL locks rows,
    not the database) nothing is taken."""
    connection = connections[DEFAULT_DB_ALIAS]
    if connection.vendor != "sqlite" or getattr(_turn, "held", False):
        yield
        return
    with _SQLITE_WRITERS:
        turn_file = _turn_file(str(connection.settings_dict["NAME"]))
        if turn_file is not None:  # other processes' writers (the proxy's recorder)
            fcntl.flock(turn_file, fcntl.LOCK_EX)
        _turn.held = True
        try:
            yield
        finally:
            _turn.held = False
            if turn_file is not None:
                fcntl.flock(turn_file, fcntl.LOCK_UN)


def _turn_file(database: str) -> int | None:
    """The file whose lock the processes writing one SQLite database take turns on (a
    file of its own, never the database's: closing any descriptor of the database would
    drop SQLite's own locks on it). None for an in-memory database. Called under
    `_SQLITE_WRITERS`; opened once per process and kept open."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    path = os.path.realpath(database)
    found = _turn_files.get(path)
    if found is None:
        found = _turn_files[path] = _open_turn_file(path + TURN_FILE_SUFFIX)
    return found


def _open_turn_file(path: str) -> int:
    """Open (create, under the process's umask) the turn file beside the database: every
    process writing it finds the same file there, whatever its temporary directory, and
    the database's directory (where SQLite writes its journal too) decides who may
    create it. Read-only is enough to lock it; a symbolic link there is refused."""
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(path, flags, 0o644)


@contextmanager
def pipelined(alias: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """On PostgreSQL, the statements executed inside are sent without waiting for each
    one's answer (psycopg's pipeline mode), and the answers are read together at the end:
    one round trip for several writes that read nothing back. An error is raised at the
    end, as Django's database errors. Elsewhere (SQLite is in process), nothing changes.

    Why: POST /api/runs writes the run, its first event and its task, and each
    statement would wait for its answer in turn; under a burst of starts every round
    trip is a thread switch on both sides.
    Only for statements whose results nobody reads: a fetch inside would wait anyway,
    and a row count (an ORM `update()`, the `save()` of an existing row, which decides
    by it whether to INSERT) is not known before the end: never inside."""
    connection = connections[alias]
    if connection.vendor != "postgresql" or connection.queries_logged:
        yield  # where queries are logged (tests counting them) each is executed alone
        return
    connection.ensure_connection()
    with connection.wrap_database_errors, connection.connection.pipeline():
        yield
