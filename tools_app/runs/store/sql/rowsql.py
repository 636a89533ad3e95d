"""The recorder's few statement shapes as SQL built once and executed with parameters.

Why not the ORM here: a run's round writes about twenty rows' worth of changes, and
building each statement again (query cloning, filter resolution, compilation) costs
the ORM several times what executing it does. These helpers cache each statement's text
by its shape (table, columns, conflict target) and prepare each value with the model
field's own `get_db_prep_save`, so values are stored exactly as the ORM stores them
(JSON, datetimes, UUIDs, per database). The SQL is portable between SQLite (3.35+) and
PostgreSQL: `INSERT ... ON CONFLICT ... DO UPDATE / DO NOTHING`, `RETURNING`.

Only identifiers from the models' metadata are formatted into SQL; values are always
parameters. How values are prepared and statements executed is rowsql_driver.py.
"""

# ruff: noqa: S608  (identifiers come from model metadata; values are parameters)

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model
from django.db.models.signals import post_save, pre_save

from tools_app.runs.store.sql.rowsql_driver import (
    column_preparers,
    default_connection,
    executed,
    field_of,
    prepared,
)
from tools_app.runs.store.sql.write_path import Add, In, chosen

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
    connection = default_connection()
    shape = tuple((name, isinstance(value, Add)) for name, value in values.items())
    sql = _update_sql(model, shape, _where_shape(where), returning, connection.vendor)
    params = [prepared(model, name, value, connection) for name, value in values.items()]
    params += _where_params(model, where, connection)
    with executed(connection, sql, params) as cursor:
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
    connection = default_connection()
    conditions = _where_shape(where or {})
    where_params = _where_params(model, where or {}, connection)
    preparers = column_preparers(model, (*keys, *(name for name, _ in shape)), connection)
    per_statement = max(1, (MAX_PARAMETERS - len(where_params)) // len(first))
    returned: list[tuple[Any, ...]] = []
    for start in range(0, len(rows), per_statement):
        chunk = rows[start:start + per_statement]
        sql = _update_many_sql(model, keys, shape, len(chunk), conditions, returning,
                               connection.vendor)
        params = [prepare(row[name], connection)
                  for row in chunk for name, prepare in preparers]
        params += where_params
        with executed(connection, sql, params) as cursor:
            if returning:
                returned += [tuple(r) for r in cursor.fetchall()]
    return returned


def select(model: type[Model], columns: tuple[str, ...],
           where: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """The `columns` of the rows matching `where` (as for `update`), as the database
    driver returns them: for ids, numbers and text, which need no conversion (a
    timestamp comes as the driver makes it, naive on SQLite)."""
    connection = default_connection()
    sql = _select_sql(model, columns, _where_shape(where), connection.vendor)
    with executed(connection, sql, _where_params(model, where, connection)) as cursor:
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
            params += [prepared(model, name, one, connection) for one in value.values]
        elif value is not None:
            params.append(prepared(model, name, value, connection))
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
        rows = [{name: row[name] if name in row else field_of(model, name).get_default()
                 for name in names} for row in rows]
    connection = default_connection()
    preparers = column_preparers(model, names, connection)
    per_statement = max(1, MAX_PARAMETERS // len(names))
    returned: list[Any] = []
    for start in range(0, len(rows), per_statement):
        chunk = rows[start:start + per_statement]
        sql = _insert_sql(model, names, len(chunk), conflict, on_conflict_update, returning,
                          connection.vendor)
        params = [prepare(row[name], connection)
                  for row in chunk for name, prepare in preparers]
        with executed(connection, sql, params) as cursor:
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


@cache
def _insertable(model: type[Model]) -> tuple[str, ...]:
    """The model's concrete fields but an auto-incremented primary key."""
    pk = model._meta.pk
    return tuple(f.name for f in model._meta.concrete_fields
                 if not (f is pk and getattr(f, "db_returning", False)))


def _quote(name: str) -> str:
    return str(connections[DEFAULT_DB_ALIAS].ops.quote_name(name))


def _column(model: type[Model], name: str) -> str:
    column = field_of(model, name).column
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
    return f"CAST(%s AS {field_of(model, name).db_type(connections[DEFAULT_DB_ALIAS])})"


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


# The measurement's switch (issue 39, store/sql/write_path.py): with AGENTFORGE_WRITE_PATH=orm
# this module's public functions are the ORM's (`rowsql_orm`), read once at import;
# the markers `Add` and `In` are the same classes either way.
if chosen() == "orm":
    from tools_app.runs.store.sql import rowsql_orm

    update = rowsql_orm.update
    update_many = rowsql_orm.update_many
    select = rowsql_orm.select
    insert = rowsql_orm.insert
    insert_as_saved = rowsql_orm.insert_as_saved
