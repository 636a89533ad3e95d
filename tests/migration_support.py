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
