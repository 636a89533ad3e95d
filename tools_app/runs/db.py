"""Database connection care for threads that live longer than one request."""

from __future__ import annotations

from django.db import connections


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
