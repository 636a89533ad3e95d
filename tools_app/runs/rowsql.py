"""The recorder's few statement shapes as SQL built once and executed with parameters.

Why not the ORM here: a run's round writes about twenty rows' worth of changes, and the
ORM spent most of the application's CPU per round building each statement again (query
cloning, filter resolution, compilation: 0.3-0.5 ms per statement against 0.05 ms to
execute it; docs/benchmarks/product-path.md). These helpers cache each statement's text
by its shape (table, columns, conflict target) and prepare each value with the model
field's own `get_db_prep_save`, so values are stored exactly as the ORM stores them
(JSON, datetimes, UUIDs, per database). The SQL is portable between SQLite (3.35+) and
PostgreSQL: `INSERT ... ON CONFLICT ... DO UPDATE / DO NOTHING`, `RETURNING`.

Only identifiers from the models' metadata are formatted into SQL; values are always
parameters.
"""

# ruff: noqa: S608  (identifiers come from model metadata; values are parameters)

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Field, Model


@dataclass(frozen=True)
class Add:
    """`column = column + amount` in an UPDATE."""

    amount: int


def update(model: type[Model], where: Mapping[str, Any], values: Mapping[str, Any],
           returning: tuple[str, ...] = ()) -> Any:
    """UPDATE the rows matching `where` (equalities, ANDed); with `returning`, the first
    updated row's values of those columns (None if no row matched), else the row
    count."""
    shape = tuple((name, isinstance(value, Add)) for name, value in values.items())
    sql = _update_sql(model, shape, tuple(where), returning, connection.vendor)
    params = [_prepared(model, name, value) for name, value in values.items()]
    params += [_prepared(model, name, value) for name, value in where.items()]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        if not returning:
            return cursor.rowcount
        row = cursor.fetchone()
    return tuple(row) if row is not None else None


def insert(model: type[Model], rows: Sequence[Mapping[str, Any]], *,
           conflict: tuple[str, ...] = (), on_conflict_update: tuple[str, ...] = (),
           returning: str | None = None, fill_defaults: bool = True) -> list[Any]:
    """INSERT rows (all with the same columns), the model's default in every column a
    row does not name. With `conflict`, a row that clashes on those columns is left as
    it is, or has `on_conflict_update` columns set from the new row. With `returning`,
    that column of each row inserted or updated, in order."""
    if not rows:
        return []
    names = tuple(rows[0])
    if fill_defaults:
        # Every column the model has: the ORM fills its Python-side defaults on insert,
        # and the columns have no database default to fall back on.
        names = _insertable(model)
        rows = [{name: row[name] if name in row else _field(model, name).get_default()
                 for name in names} for row in rows]
    sql = _insert_sql(model, names, len(rows), conflict, on_conflict_update, returning,
                      connection.vendor)
    params = [_prepared(model, name, row[name]) for row in rows for name in names]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [r[0] for r in cursor.fetchall()] if returning else []


# Fields whose values the database drivers take as Python gives them (str, int, float,
# bool, None): their preparation would only check the type. JSON, datetimes and UUIDs
# (and keys pointing at UUIDs) are prepared by their field, per database.
_PLAIN_TYPES = frozenset({"CharField", "TextField", "IntegerField", "PositiveIntegerField",
                          "BigIntegerField", "PositiveBigIntegerField", "SmallIntegerField",
                          "PositiveSmallIntegerField", "BooleanField", "FloatField",
                          "AutoField", "BigAutoField"})
_PLAIN_VALUES = (str, int, float, type(None))  # bool is an int


def _prepared(model: type[Model], name: str, value: Any) -> Any:
    if isinstance(value, Add):
        return value.amount
    if isinstance(value, _PLAIN_VALUES) and _is_plain(model, name):
        return value
    return _field(model, name).get_db_prep_save(value, connection)


@cache
def _is_plain(model: type[Model], name: str) -> bool:
    field = _field(model, name)
    target = field.target_field if field.is_relation else field  # type: ignore[attr-defined]
    return target.get_internal_type() in _PLAIN_TYPES


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


def _column(model: type[Model], name: str) -> str:
    column = _field(model, name).column
    assert column is not None
    return str(connection.ops.quote_name(column))


# The statement builders are cached by shape; `vendor` is part of the key because the
# quoting is the connection's.
@cache
def _update_sql(model: type[Model], shape: tuple[tuple[str, bool], ...],
                where: tuple[str, ...], returning: tuple[str, ...], vendor: str) -> str:
    table = connection.ops.quote_name(model._meta.db_table)
    sets = ", ".join(
        f"{_column(model, name)} = {_column(model, name)} + %s" if increment
        else f"{_column(model, name)} = %s" for name, increment in shape)
    condition = " AND ".join(f"{_column(model, name)} = %s" for name in where)
    sql = f"UPDATE {table} SET {sets} WHERE {condition}"
    if returning:
        sql += " RETURNING " + ", ".join(_column(model, name) for name in returning)
    return sql


@cache
def _insert_sql(model: type[Model], names: tuple[str, ...], count: int,
                conflict: tuple[str, ...], on_conflict_update: tuple[str, ...],
                returning: str | None, vendor: str) -> str:
    table = connection.ops.quote_name(model._meta.db_table)
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
        sql += f" RETURNING {_column(model, returning)}"
    return sql
