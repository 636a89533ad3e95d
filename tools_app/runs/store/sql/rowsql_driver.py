"""How rowsql's statements reach the database: values prepared as the ORM stores them
(each model field's own `get_db_prep_save`, chosen once per column, repeated ids and
times prepared once), and statements executed with the driver's own placeholders
(`executed`: `?` on SQLite, `$n` through psycopg's RawCursor on PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import cache, lru_cache, partial
from typing import Any
from uuid import UUID

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import Field, Model

from tools_app.runs.store.sanitize import Encoded
from tools_app.runs.store.sql.write_path import Add

# Fields whose values the database drivers take as Python gives them (str, int, float,
# bool, None): their preparation would only check the type. JSON, datetimes and UUIDs
# (and keys pointing at UUIDs) are prepared by their field, per database.
_PLAIN_TYPES = frozenset({"CharField", "TextField", "IntegerField", "PositiveIntegerField",
                          "BigIntegerField", "PositiveBigIntegerField", "SmallIntegerField",
                          "PositiveSmallIntegerField", "BooleanField", "FloatField",
                          "AutoField", "BigAutoField"})
_PLAIN_VALUES = (str, int, float, type(None))  # bool is an int
# Ids and times a batch repeats (the run's id in every row, the batch's one
# `created_at` in every event) are prepared once: a datetime's preparation alone (time
# zone checks, settings lookups) was a tenth of the recorder's CPU.
_REPEATED_TYPES = frozenset({"UUIDField", "DateTimeField"})
_REPEATED_VALUES = (str, UUID, datetime)


def default_connection() -> BaseDatabaseWrapper:
    # Once per statement: each `django.db.connection.x` is a lookup through the
    # thread's connection handler, and preparing a batch's values made thousands.
    return connections[DEFAULT_DB_ALIAS]


@contextmanager
def executed(connection: BaseDatabaseWrapper, sql: str,
              params: Sequence[Any]) -> Iterator[CursorWrapper]:
    """A cursor that has executed `sql` (written with `%s` placeholders) with `params`.

    On PostgreSQL the statement runs with `$1, $2...` placeholders through psycopg's
    `RawCursor`, wrapped as Django wraps its own (error translation, execute wrappers,
    the broken-transaction check). Django's cursor takes `%s` and has psycopg rewrite
    each statement into `$n` form in Python; it caches that rewrite only for statements
    of up to 50 parameters, and a batch's INSERT has more, so the rewrite would cost a
    busy db_worker a large share of its CPU. Where Django
    logs queries (DEBUG, the test suite's query counting) its own cursor is used: its
    log renders the `%s` form. A timestamp read back through here (the span rows' stored
    time, a cache key compared by the instant it names) is as the driver makes it: the
    time zone loader Django may register on its cursors is not needed. On SQLite the driver's
    cursor takes the statement with `?` placeholders, rewritten once per statement."""
    if connection.vendor not in ("postgresql", "sqlite") or connection.queries_logged:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            yield cursor
        return
    connection.ensure_connection()
    connection.validate_thread_sharing()
    if connection.vendor == "sqlite":
        # The driver's own cursor, given `?` placeholders: Django's rewrites each
        # statement's `%s` with a regular expression at every execution (10-15 us for
        # a batch's INSERT, several statements a round).
        raw = connection.connection.cursor()
        sql = qmarked(sql)
    else:
        import psycopg  # only installed where PostgreSQL is used

        raw = psycopg.RawCursor(connection.connection)
        sql = numbered(sql)
    with CursorWrapper(raw, connection) as cursor:
        cursor.execute(sql, params)
        yield cursor


@lru_cache(maxsize=1024)
def qmarked(sql: str) -> str:
    """`sql` with SQLite's `?` placeholders (the builders write no "%%", see below)."""
    assert "%%" not in sql, sql
    return sql.replace("%s", "?")


@lru_cache(maxsize=1024)
def numbered(sql: str) -> str:
    """`sql` with its `%s` placeholders numbered `$1, $2...`. The builders' only "%s"
    are placeholders (identifiers come from model metadata, values are never formatted
    in) and they write no "%%"."""
    assert "%%" not in sql, sql
    parts = sql.split("%s")
    return "".join(f"{part}${index}" for index, part in enumerate(parts[:-1], 1)) + parts[-1]


def prepared(model: type[Model], name: str, value: Any,
              connection: BaseDatabaseWrapper) -> Any:
    return _preparer(model, name, connection.vendor)(value, connection)


Preparer = Callable[[Any, BaseDatabaseWrapper], Any]


def column_preparers(model: type[Model], names: Iterable[str],
               connection: BaseDatabaseWrapper) -> tuple[tuple[str, Preparer], ...]:
    return tuple((name, _preparer(model, name, connection.vendor)) for name in names)


@cache
def _preparer(model: type[Model], name: str, vendor: str) -> Preparer:
    """How a column's values are prepared, chosen once a column: a batch prepares
    about a hundred values a round, and choosing again for each (the column's type
    looked up, then each kind of value tried) was most of their cost."""
    stored = _stored_type(model, name)
    if stored in _PLAIN_TYPES:
        def plain(value: Any, connection: BaseDatabaseWrapper) -> Any:
            if isinstance(value, _PLAIN_VALUES):
                return value
            return _prepared_by_field(model, name, value, connection)
        return plain
    if stored in _REPEATED_TYPES:
        def repeated(value: Any, connection: BaseDatabaseWrapper) -> Any:
            if isinstance(value, _REPEATED_VALUES):
                return _prepared_once(model, name, type(value).__name__, value, vendor)
            return _prepared_by_field(model, name, value, connection)
        return repeated
    return partial(_prepared_by_field, model, name)


def _prepared_by_field(model: type[Model], name: str, value: Any,
                       connection: BaseDatabaseWrapper) -> Any:
    if isinstance(value, Add):
        return value.amount
    if isinstance(value, Encoded):
        return _encoded(value, connection.vendor)
    return field_of(model, name).get_db_prep_save(value, connection)


def _encoded(value: Encoded, vendor: str) -> Any:
    """A JSON value already written as text, as its JSONField would prepare it: the
    text itself on SQLite, psycopg's Jsonb carrying it on PostgreSQL (the field's own
    preparation wraps `json.dumps` in the same way)."""
    if vendor != "postgresql":
        return value.text
    from psycopg.types.json import Jsonb  # only installed where PostgreSQL is used

    return Jsonb(value.text, dumps=_as_is)


def _as_is(text: str) -> str:
    return text


@lru_cache(maxsize=4096)
def _prepared_once(model: type[Model], name: str, kind: str, value: Any,
                   vendor: str) -> Any:
    # `kind` in the key: equal values of different types (a str and a UUID) must not
    # share an entry. The result depends only on the field, the value and the vendor
    # (the settings' time zone is fixed for a process).
    return field_of(model, name).get_db_prep_save(value, connections[DEFAULT_DB_ALIAS])


@cache
def _stored_type(model: type[Model], name: str) -> str:
    """The internal type of the column's values (a key's is its target's)."""
    field = field_of(model, name)
    target = field.target_field if field.is_relation else field  # type: ignore[attr-defined]
    return str(target.get_internal_type())


@cache
def field_of(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, Field)
    return field
