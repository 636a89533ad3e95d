"""The thread an async test's database work runs on, and its connections.

`sync_to_async` (and with it the ORM's async methods, `acount`, `aget`, ...) runs on
asgiref's one shared thread when no request or `async_to_sync` encloses the call, as in
an async test. A connection opened there is closed by nothing (request boundaries close
connections, and no request ends on that thread): it outlives the test, and at the end of
the PostgreSQL pass it kept the test database from being dropped.
"""

from __future__ import annotations

from asgiref.sync import SyncToAsync
from django.db import connections

# An upper bound for the thread to take the close call after a test, never a duration.
BUSY_GRACE_SECONDS = 5.0


def _any_open() -> bool:
    return any(connection.connection is not None
               for connection in connections.all(initialized_only=True))


def has_open_connection() -> bool:
    """Whether the shared `sync_to_async` thread holds an open database connection."""
    return SyncToAsync.single_thread_executor.submit(_any_open).result(BUSY_GRACE_SECONDS)


def close_connections() -> None:
    """Close the shared `sync_to_async` thread's database connections; AssertionError if
    the thread is still busy with something a test left running."""
    closing = SyncToAsync.single_thread_executor.submit(connections.close_all)
    try:
        closing.result(BUSY_GRACE_SECONDS)
    except TimeoutError:
        raise AssertionError("the shared sync_to_async thread is still busy after the "
                             "test: a synchronous call the test started did not end") from None
