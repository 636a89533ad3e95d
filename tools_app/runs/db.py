"""Database connection care for threads that live longer than one request."""

from __future__ import annotations

from django.db import connections


def drop_broken_connections() -> None:
    """Close this thread's connections that failed and no longer work, so the next query
    opens a fresh one; a connection that failed but still works is kept (Django's own
    rule at the end of a request, without closing healthy connections)."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and conn.errors_occurred:
            if conn.is_usable():
                conn.errors_occurred = False
            else:
                conn.close()
