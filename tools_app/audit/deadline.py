"""A time limit for the audit pages' optional reads (counts, a sort's first try): the
queries inside `deadline()` stop with an OperationalError once the time is up, which
`stopped()` tells apart from a failing database. SQLite: a progress handler; PostgreSQL:
statement_timeout, in a savepoint (a stop rolls it back, and the timeout with it) and
put back before the savepoint is released, so an enclosing transaction keeps its own."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import OperationalError, connections, transaction

CHECK_EVERY = 2_000  # SQLite virtual machine steps between looks at the clock


@contextmanager
def deadline(using: str, seconds: float) -> Iterator[None]:
    connection = connections[using]
    if connection.vendor == "sqlite":
        connection.ensure_connection()
        raw = connection.connection
        end = time.monotonic() + seconds
        fired: list[bool] = []

        def past_deadline() -> bool:
            # Once: the statement it stops is over, and what runs after it before the
            # block ends (DEBUG's logging of that statement's parameters) must run.
            if fired or time.monotonic() <= end:
                return False
            fired.append(True)
            return True

        raw.set_progress_handler(past_deadline, CHECK_EVERY)
        try:
            yield
        finally:
            raw.set_progress_handler(None, 0)
        return
    # set_config(..., true) is SET LOCAL, with the value as a parameter
    with transaction.atomic(using=using), connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('statement_timeout'), "
                       "set_config('statement_timeout', %s, true)",
                       [str(max(1, round(seconds * 1000)))])
        before = cursor.fetchone()[0]
        yield
        cursor.execute("SELECT set_config('statement_timeout', %s, true)", [before])


def stopped(exc: OperationalError) -> bool:
    """Whether the error is a deadline's stop: SQLite's "interrupted", PostgreSQL's
    query_canceled (57014)."""
    return str(exc) == "interrupted" or getattr(exc.__cause__, "sqlstate", None) == "57014"
