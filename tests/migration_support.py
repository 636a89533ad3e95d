"""Moving the test database to a migration state (the data-migration tests)."""

from __future__ import annotations

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate(targets: list[tuple[str, str]]) -> MigrationExecutor:
    """Migrate to `targets`; returns an executor whose loader reflects the new state."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return MigrationExecutor(connection)


def sqlite_triggers() -> set[str]:
    """The triggers SQLite holds (a table rebuilt by a migration loses its own)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        return {row[0] for row in cursor.fetchall()}


def run_columns() -> set[str]:
    with connection.cursor() as cursor:
        return {c.name for c in connection.introspection.get_table_description(
            cursor, "tools_app_run")}
