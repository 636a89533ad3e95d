"""The recorder's few statement shapes as SQL built once and executed with parameters.

Why not the ORM here: a run's round writes about twenty rows' worth of changes, and
building each statement again (query cloning, filter resolution, compilation) costs
the ORM several times what executing it does. These helpers cache each statement's text
by its shape (table, columns, conflict target) and prepare each value with the model
field's own `get_db_prep_save`, so values are stored exactly as the ORM stores them
(JSON, datetimes, UUIDs, per database). The SQL is portable between SQLite (3.35+) and
PostgreSQL: `INSERT ... ON CONFLICT ... DO UPDATE / DO NOTHING`, `RETURNING`.

Only identifiers from the models' metadata are formatted into SQL; values are always
parameters.
"""

# ruff: noqa: S608  (identifiers come from model metadata; values are parameters)

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import cache, lru_cache, partial
from typing import Any
from uuid import UUID

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import Field, Model
from django.db.models.signals import post_save, pre_save

from tools_app.runs.store.sanitize import Encoded
from tools_app.runs.store.write_path import Add, In, chosen

__all__ = ["MAX_PARAMETERS", "Add", "In", "insert", "insert_as_saved", "select", "update",
           "update_many"]

# Parameters per statement, under both databases' limits (SQLite 32,766; PostgreSQL
# 65,535 when the server binds them): a round of thousands of calls is several INSERTs.
MAX_PARAMETERS = 30_000


def update(model: type[Model], where: Mapping[str, Any], values: Mapping[str, Any],
           returning: tuple[str, ...] = ()) -> Any:
    """UPDATE the rows matching `where` (equalities, ANDed; None is IS NULL, `In` one of
    several values); with
    `returning`, the first updated row's values of those columns (None if no row
    matched), else the row count."""
    connection = _connection()
    shape = tuple((name, isinstance(value, Add)) for name, value in values.items())
    sql = _update_sql(model, shape, _where_shape(where), returning, connection.vendor)
    params = [_prepared(model, name, value, connection) for name, value in values.items()]
    params += _where_params(model, where, connection)
    with _executed(connection, sql, params) as cursor:
        if not returning:
            return cursor.rowcount
        row = cursor.fetchone()
    return tuple(row) if row is not None else None


def update_many(model: type[Model], keys: tuple[str, ...], rows: Sequence[Mapping[str, Any]],
                where: Mapping[str, Any] | None = None,
                returning: tuple[str, ...] = ()) -> list[tuple[Any, ...]]:
    """UPDATE one row per entry of `rows` in one statement (`UPDATE ... FROM (VALUES
    ...)`): each entry names the `keys` columns' values that pick its row, then the
    values to set there (`Add` increments); every entry has the same columns, in the
    same order, and the same kind of value (set or `Add`) in each. `where`: what every
    updated row must meet too (as for `update`: None is IS NULL). With `returning`,
    those columns of the rows updated, in no particular order; else []. A row no entry
    picks is left as it is.

    Why: a group of runs' batches changes one row of each run (its seqs and counters)
    and of each of their rounds; one statement for them all costs about what one of
    them alone does."""
    if not rows:
        return []
    first = rows[0]
    shape = tuple((name, isinstance(value, Add)) for name, value in first.items()
                  if name not in keys)
    connection = _connection()
    conditions = _where_shape(where or {})
    where_params = _where_params(model, where or {}, connection)
    preparers = _preparers(model, (*keys, *(name for name, _ in shape)), connection)
    per_statement = max(1, (MAX_PARAMETERS - len(where_params)) // len(first))
    returned: list[tuple[Any, ...]] = []
    for start in range(0, len(rows), per_statement):
        chunk = rows[start:start + per_statement]
        sql = _update_many_sql(model, keys, shape, len(chunk), conditions, returning,
                               connection.vendor)
        params = [prepare(row[name], connection)
                  for row in chunk for name, prepare in preparers]
        params += where_params
        with _executed(connection, sql, params) as cursor:
            if returning:
                returned += [tuple(r) for r in cursor.fetchall()]
    return returned


def select(model: type[Model], columns: tuple[str, ...],
           where: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """The `columns` of the rows matching `where` (as for `update`), as the database
    returns them: for ids, numbers and text, which need no conversion."""
    connection = _connection()
    sql = _select_sql(model, columns, _where_shape(where), connection.vendor)
    with _executed(connection, sql, _where_params(model, where, connection)) as cursor:
        return [tuple(row) for row in cursor.fetchall()]


# A condition's shape: "=", "null", or the number of values of an `In`.
Condition = tuple[str, str | int]


def _where_shape(where: Mapping[str, Any]) -> tuple[Condition, ...]:
    return tuple((name, "null" if value is None else len(value.values)
                  if isinstance(value, In) else "=") for name, value in where.items())


def _where_params(model: type[Model], where: Mapping[str, Any],
                  connection: BaseDatabaseWrapper) -> list[Any]:
    params: list[Any] = []
    for name, value in where.items():
        if isinstance(value, In):
            if not value.values:
                raise ValueError(f"In() for {name} needs at least one value")
            params += [_prepared(model, name, one, connection) for one in value.values]
        elif value is not None:
            params.append(_prepared(model, name, value, connection))
    return params


def _condition(model: type[Model], where: tuple[Condition, ...]) -> str:
    return " AND ".join(_compared(_column(model, name), kind) for name, kind in where)


def _compared(column: str, kind: str | int) -> str:
    if kind == "null":
        return f"{column} IS NULL"
    if kind == "=":
        return f"{column} = %s"
    return f"{column} IN ({', '.join(['%s'] * int(kind))})"


def insert(model: type[Model], rows: Sequence[Mapping[str, Any]], *,
           conflict: tuple[str, ...] = (), on_conflict_update: tuple[str, ...] = (),
           returning: str | tuple[str, ...] | None = None,
           fill_defaults: bool = True) -> list[Any]:
    """INSERT rows (all with the same columns), the model's default in every column a
    row does not name. With `conflict`, a row that clashes on those columns is left as
    it is, or has `on_conflict_update` columns set from the new row. With `returning`,
    that column (or tuple of columns) of each row inserted or updated, in order (a row
    left as it is returns nothing)."""
    if not rows:
        return []
    names = tuple(rows[0])
    if fill_defaults:
        # Every column the model has: the ORM fills its Python-side defaults on insert,
        # and the columns have no database default to fall back on.
        names = _insertable(model)
        rows = [{name: row[name] if name in row else _field(model, name).get_default()
                 for name in names} for row in rows]
    connection = _connection()
    preparers = _preparers(model, names, connection)
    per_statement = max(1, MAX_PARAMETERS // len(names))
    returned: list[Any] = []
    for start in range(0, len(rows), per_statement):
        chunk = rows[start:start + per_statement]
        sql = _insert_sql(model, names, len(chunk), conflict, on_conflict_update, returning,
                          connection.vendor)
        params = [prepare(row[name], connection)
                  for row in chunk for name, prepare in preparers]
        with _executed(connection, sql, params) as cursor:
            if returning:
                returned += cursor.fetchall()
    if isinstance(returning, tuple):
        return [tuple(r) for r in returned]
    return [r[0] for r in returned] if returning else []


def insert_as_saved(instance: Model) -> None:
    """INSERT a new instance as its `save()` would (the model's pre_save and post_save
    signals sent, each field's `pre_save` value: `auto_now_add` times), by a statement
    built once: the ORM compiles its INSERT again at every save. For models whose
    `save()` is Django's own, on the default database, in a concrete model of its own."""
    model = type(instance)
    if model.save is not Model.save or model._meta.parents:
        raise TypeError(f"{model.__name__} saves itself: use its save()")
    pre_save.send(sender=model, instance=instance, raw=False, using=DEFAULT_DB_ALIAS,
                  update_fields=None)
    insert(model, [{field.name: field.pre_save(instance, True)
                    for field in model._meta.concrete_fields}], fill_defaults=False)
    instance._state.adding = False
    instance._state.db = DEFAULT_DB_ALIAS
    post_save.send(sender=model, instance=instance, created=True, update_fields=None,
                   raw=False, using=DEFAULT_DB_ALIAS)


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


def _connection() -> BaseDatabaseWrapper:
    # Once per statement: each `django.db.connection.x` is a lookup through the
    # thread's connection handler, and preparing a batch's values made thousands.
    return connections[DEFAULT_DB_ALIAS]


@contextmanager
def _executed(connection: BaseDatabaseWrapper, sql: str,
              params: Sequence[Any]) -> Iterator[CursorWrapper]:
    """A cursor that has executed `sql` (written with `%s` placeholders) with `params`.

    On PostgreSQL the statement runs with `$1, $2...` placeholders through psycopg's
    `RawCursor`, wrapped as Django wraps its own (error translation, execute wrappers,
    the broken-transaction check). Django's cursor takes `%s` and has psycopg rewrite
    each statement into `$n` form in Python; it caches that rewrite only for statements
    of up to 50 parameters, and a batch's INSERT has more, so the rewrite would cost a
    busy db_worker a large share of its CPU. Where Django
    logs queries (DEBUG, the test suite's query counting) its own cursor is used: its
    log renders the `%s` form. No statement here returns a timestamp, so the time zone
    loader Django may register on its cursors is not needed. On SQLite the driver's
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
        sql = _qmarked(sql)
    else:
        import psycopg  # only installed where PostgreSQL is used

        raw = psycopg.RawCursor(connection.connection)
        sql = _numbered(sql)
    with CursorWrapper(raw, connection) as cursor:
        cursor.execute(sql, params)
        yield cursor


@lru_cache(maxsize=1024)
def _qmarked(sql: str) -> str:
    """`sql` with SQLite's `?` placeholders (the builders write no "%%", see below)."""
    assert "%%" not in sql, sql
    return sql.replace("%s", "?")


@lru_cache(maxsize=1024)
def _numbered(sql: str) -> str:
    """`sql` with its `%s` placeholders numbered `$1, $2...`. The builders' only "%s"
    are placeholders (identifiers come from model metadata, values are never formatted
    in) and they write no "%%"."""
    assert "%%" not in sql, sql
    parts = sql.split("%s")
    return "".join(f"{part}${index}" for index, part in enumerate(parts[:-1], 1)) + parts[-1]


def _prepared(model: type[Model], name: str, value: Any,
              connection: BaseDatabaseWrapper) -> Any:
    return _preparer(model, name, connection.vendor)(value, connection)


Preparer = Callable[[Any, BaseDatabaseWrapper], Any]


def _preparers(model: type[Model], names: Iterable[str],
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
    return _field(model, name).get_db_prep_save(value, connection)


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
    return _field(model, name).get_db_prep_save(value, connections[DEFAULT_DB_ALIAS])


@cache
def _stored_type(model: type[Model], name: str) -> str:
    """The internal type of the column's values (a key's is its target's)."""
    field = _field(model, name)
    target = field.target_field if field.is_relation else field  # type: ignore[attr-defined]
    return str(target.get_internal_type())


@cache
def _field(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, Field)
    return field


@cache
def _insertable(model: type[Model]) -> tuple[str, ...]:
    """The model's concrete fields but an auto-incremented primary key."""
    pk = model._meta.pk
    return tuple(f.name for f in model._meta.concrete_fields
                 if not (f is pk and getattr(f, "db_returning", False)))


def _quote(name: str) -> str:
    return str(connections[DEFAULT_DB_ALIAS].ops.quote_name(name))


def _column(model: type[Model], name: str) -> str:
    column = _field(model, name).column
    assert column is not None
    return _quote(column)


# The statement builders are cached by shape and by vendor (the quoting is the
# connection's); the connection itself is not part of the key.
@cache
def _update_sql(model: type[Model], shape: tuple[tuple[str, bool], ...],
                where: tuple[Condition, ...], returning: tuple[str, ...],
                vendor: str) -> str:
    table = _quote(model._meta.db_table)
    sets = ", ".join(
        f"{_column(model, name)} = {_column(model, name)} + %s" if increment
        else f"{_column(model, name)} = %s" for name, increment in shape)
    sql = f"UPDATE {table} SET {sets} WHERE {_condition(model, where)}"
    if returning:
        sql += " RETURNING " + ", ".join(_column(model, name) for name in returning)
    return sql


@cache
def _update_many_sql(model: type[Model], keys: tuple[str, ...],
                     shape: tuple[tuple[str, bool], ...], count: int,
                     conditions: tuple[Condition, ...], returning: tuple[str, ...],
                     vendor: str) -> str:
    table = _quote(model._meta.db_table)
    names = (*keys, *(name for name, _ in shape))
    # Both databases name a VALUES list's columns column1, column2...; PostgreSQL types
    # them from the values alone, so each is cast to its column's type there.
    value = {name: _placeholder(model, name, vendor) for name in names}
    row = "(" + ", ".join(value[name] for name in names) + ")"
    given = {name: f"v.column{index}" for index, name in enumerate(names, 1)}
    sets = ", ".join(
        f"{_column(model, name)} = {table}.{_column(model, name)} + {given[name]}"
        if increment else f"{_column(model, name)} = {given[name]}"
        for name, increment in shape)
    matched = " AND ".join(f"{table}.{_column(model, name)} = {given[name]}"
                           for name in keys)
    sql = (f"UPDATE {table} SET {sets} FROM (VALUES {', '.join([row] * count)}) AS v "
           f"WHERE {matched}")
    if conditions:
        sql += " AND " + " AND ".join(_compared(f"{table}.{_column(model, name)}", kind)
                                      for name, kind in conditions)
    if returning:
        sql += " RETURNING " + ", ".join(f"{table}.{_column(model, name)}"
                                         for name in returning)
    return sql


def _placeholder(model: type[Model], name: str, vendor: str) -> str:
    if vendor != "postgresql":
        return "%s"
    return f"CAST(%s AS {_field(model, name).db_type(connections[DEFAULT_DB_ALIAS])})"


@cache
def _select_sql(model: type[Model], columns: tuple[str, ...],
                where: tuple[Condition, ...], vendor: str) -> str:
    selected = ", ".join(_column(model, name) for name in columns)
    return (f"SELECT {selected} FROM {_quote(model._meta.db_table)} "
            f"WHERE {_condition(model, where)}")


@cache
def _insert_sql(model: type[Model], names: tuple[str, ...], count: int,
                conflict: tuple[str, ...], on_conflict_update: tuple[str, ...],
                returning: str | tuple[str, ...] | None, vendor: str) -> str:
    table = _quote(model._meta.db_table)
    columns = ", ".join(_column(model, name) for name in names)
    row = "(" + ", ".join(["%s"] * len(names)) + ")"
    sql = f"INSERT INTO {table} ({columns}) VALUES {', '.join([row] * count)}"
    if conflict:
        target = ", ".join(_column(model, name) for name in conflict)
        if on_conflict_update:
            sets = ", ".join(f"{_column(model, n)} = EXCLUDED.{_column(model, n)}"
                             for n in on_conflict_update)
            sql += f" ON CONFLICT ({target}) DO UPDATE SET {sets}"
        else:
            sql += f" ON CONFLICT ({target}) DO NOTHING"
    if returning:
        returned = (returning,) if isinstance(returning, str) else returning
        sql += " RETURNING " + ", ".join(_column(model, name) for name in returned)
    return sql


# The measurement's switch (issue 39, store/write_path.py): with AGENTFORGE_WRITE_PATH=orm
# this module's public functions are the ORM's (`rowsql_orm`), read once at import;
# the markers `Add` and `In` are the same classes either way.
if chosen() == "orm":
    from tools_app.runs.store import rowsql_orm

    update = rowsql_orm.update
    update_many = rowsql_orm.update_many
    select = rowsql_orm.select
    insert = rowsql_orm.insert
    insert_as_saved = rowsql_orm.insert_as_saved
