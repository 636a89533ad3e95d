"""Operations the migrations share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import migrations


class AddColumnByAlterOnSqlite(migrations.AddField):
    """AddField, but on SQLite the given ALTER TABLE ADD COLUMN instead of Django's table
    rebuild, which would copy every row and drop the table's triggers (the audit log's
    search and count triggers live on the run and call tables)."""

    def __init__(self, *args: Any, sqlite_sql: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sqlite_sql = sqlite_sql

    def deconstruct(self) -> tuple[str, Sequence[Any], dict[str, Any]]:
        name, args, kwargs = super().deconstruct()
        return name, args, {**kwargs, "sqlite_sql": self.sqlite_sql}

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any,
                          to_state: Any) -> None:
        if schema_editor.connection.vendor != "sqlite":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
            return
        schema_editor.execute(self.sqlite_sql)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any,
                           to_state: Any) -> None:
        if schema_editor.connection.vendor != "sqlite":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
            return
        meta = from_state.apps.get_model(app_label, self.model_name)._meta
        table, column = meta.db_table, meta.get_field(self.name).column
        schema_editor.execute(f'ALTER TABLE "{table}" DROP COLUMN "{column}"')
