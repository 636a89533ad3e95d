"""`rowsql`'s functions written with the ORM's public API only, for the measurement of
issue 39: does the hand-built write path earn its place? `AGENTFORGE_WRITE_PATH=orm`
has `rowsql` hand its public functions over to these (store/sql/write_path.py).

Each does what its `rowsql` namesake's docstring says, the way a Django developer would
write it without caring about the cost of building statements:

- `update`: `filter(...).update(...)` (`Add` as `F(name) + n`, `In` as `__in`, None as
  `__isnull=True`); with `returning`, in one transaction, the UPDATE then a
  `values_list` read of the row it changed (by its primary key when `where` names it;
  otherwise the matching rows' keys are read first, locked, and those rows updated).
- `update_many`: one `update()` an entry, in one transaction, then one `values_list`
  read of the rows updated if `returning` asks; `bulk_update` (its CASE WHEN UPDATE)
  where several entries pick their rows by primary key alone, set plain values (no
  `Add`, no JSON null, which its CASE cannot write) and nothing is asked back or added
  to the `where`.
- `insert`: `bulk_create`, `ignore_conflicts` for `conflict`, `update_conflicts` with
  `unique_fields` / `update_fields` for `on_conflict_update`. With `returning`: the
  created objects' attributes where they are what is stored (a primary key the database
  returned, a column of a row inserted as given); else a follow-up `values_list` read,
  keyed by the conflict columns. Rows left as they are on conflict are told apart by a
  read of the keys already stored, before the insert, in the same transaction.
- `select`: `values_list`.

Reads whose order nobody uses (`select`'s rows, keys, rows read back) clear the model's
default ordering (`order_by()`): a call's orders by its round's index, a join.
- `insert_as_saved`: `instance.save(force_insert=True)`.

Values are the ORM's to prepare: a `sanitize.Encoded` (JSON already written as text)
is handed over as the Python value it carries (JSON `null` as `Value(None,
JSONField())`, as rowsql stores it, not SQL NULL). Rows read back are the ORM's
converted values (UUIDs, datetimes, booleans) where rowsql returns the database's own
(SQLite's hex text for a UUID, 0/1 for a boolean); every caller takes either
(`eventlog.run_key`, `int()`, `bool()`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any

from django.db import transaction
from django.db.models import F, Field, JSONField, Model, QuerySet, Value

from tools_app.runs.store.sanitize import Encoded
from tools_app.runs.store.sql.write_path import Add, In

Key = tuple[Any, ...]


def update(model: type[Model], where: Mapping[str, Any], values: Mapping[str, Any],
           returning: tuple[str, ...] = ()) -> Any:
    """As `rowsql.update`: the row count, or with `returning` the first updated row's
    values of those columns (None if no row matched)."""
    changes = {name: _change(name, value) for name, value in values.items()}
    matching = _manager(model).filter(**_conditions(where))
    if not returning:
        return matching.update(**changes)
    with transaction.atomic(savepoint=False):
        updated = _update_returning_pks(model, matching, where, changes)
        if not updated:
            return None
        return _manager(model).filter(pk=updated[0]).values_list(*returning).get()


def update_many(model: type[Model], keys: tuple[str, ...], rows: Sequence[Mapping[str, Any]],
                where: Mapping[str, Any] | None = None,
                returning: tuple[str, ...] = ()) -> list[tuple[Any, ...]]:
    """As `rowsql.update_many`: each entry's row (picked by its `keys` values, and
    meeting `where`) updated; with `returning`, those columns of the rows updated."""
    if not rows:
        return []
    conditions = _conditions(where or {})
    names = [name for name in rows[0] if name not in keys]
    pk = model._meta.pk
    assert pk is not None
    if (len(rows) > 1 and not returning and not conditions and keys in ((pk.name,), ("pk",))
            and all(_plain(row[name]) for row in rows for name in names)):
        # Plain values set on rows picked by their primary key: the ORM's bulk_update.
        _manager(model).bulk_update(
            [_instance(model, {pk.name: row[keys[0]],
                               **{name: row[name] for name in names}}) for row in rows],
            names)
        return []
    updated: list[Any] = []
    with transaction.atomic(savepoint=False):
        for row in rows:
            matching = _manager(model).filter(**{key: row[key] for key in keys}, **conditions)
            changes = {name: _change(name, row[name]) for name in names}
            if returning:
                updated += _update_returning_pks(model, matching,
                                                 {key: row[key] for key in keys}, changes)
            else:
                matching.update(**changes)
        if not returning or not updated:
            return []
        return list(_manager(model).filter(pk__in=updated).order_by()
                    .values_list(*returning))


def select(model: type[Model], columns: tuple[str, ...],
           where: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """As `rowsql.select` (the values as the ORM converts them)."""
    return list(_manager(model).filter(**_conditions(where)).order_by()
                .values_list(*columns))


def insert(model: type[Model], rows: Sequence[Mapping[str, Any]], *,
           conflict: tuple[str, ...] = (), on_conflict_update: tuple[str, ...] = (),
           returning: str | tuple[str, ...] | None = None,
           fill_defaults: bool = True) -> list[Any]:
    """As `rowsql.insert`: the rows created (every column a row does not name takes the
    model's default: the ORM's instances always have them, so `fill_defaults` changes
    nothing here); with `conflict`, a clashing row left as it is or, with
    `on_conflict_update`, those columns set from the new row. With `returning`, that
    column (or tuple of columns) of each row inserted or updated, in order; a row left
    as it is returns nothing."""
    if not rows:
        return []
    del fill_defaults  # the ORM fills every column a row does not name
    names = (returning,) if isinstance(returning, str) else tuple(returning or ())
    objs = [_instance(model, row) for row in rows]
    options: dict[str, Any] = {}
    if conflict and on_conflict_update:
        options = {"update_conflicts": True, "unique_fields": conflict,
                   "update_fields": on_conflict_update}
    elif conflict:
        options = {"ignore_conflicts": True}
    manager = _manager(model)
    if not names:
        manager.bulk_create(objs, **options)
        return []
    ignoring = bool(conflict) and not on_conflict_update
    with transaction.atomic(savepoint=False):
        stored_before = _stored_keys(model, conflict, rows) if ignoring else set()
        manager.bulk_create(objs, **options)
        written = _written(model, conflict, rows, objs, stored_before) if ignoring \
            else list(zip(rows, objs, strict=True))
        found = _returned(model, names, conflict, on_conflict_update, written)
    return found if isinstance(returning, tuple) else [row[0] for row in found]


def insert_as_saved(instance: Model) -> None:
    """As `rowsql.insert_as_saved`: the ORM's own INSERT of a new instance."""
    instance.save(force_insert=True)


# -- helpers ---------------------------------------------------------------------------


def _manager(model: type[Model]) -> Any:
    return model._default_manager


def _value(value: Any) -> Any:
    """A value as the ORM takes it: an `Encoded` JSON value decoded back to the Python
    value it carries (JSON null as JSON null, not SQL NULL)."""
    if isinstance(value, Encoded):
        return Value(None, output_field=JSONField()) if value.value is None else value.value
    return value


def _plain(value: Any) -> bool:
    """Whether bulk_update can set this value: not an increment, and not JSON null
    (its CASE compiles `Value(None, JSONField())` to SQL NULL)."""
    return not isinstance(value, Add) and not (isinstance(value, Encoded)
                                               and value.value is None)


def _change(name: str, value: Any) -> Any:
    if isinstance(value, Add):
        return F(name) + value.amount
    return _value(value)


def _conditions(where: Mapping[str, Any]) -> dict[str, Any]:
    """`where` as filter() keyword arguments: equalities, `__isnull` for None, `__in`
    for `In`."""
    found: dict[str, Any] = {}
    for name, value in where.items():
        if value is None:
            found[f"{name}__isnull"] = True
        elif isinstance(value, In):
            if not value.values:
                raise ValueError(f"In() for {name} needs at least one value")
            found[f"{name}__in"] = value.values
        else:
            found[name] = value
    return found


def _update_returning_pks(model: type[Model], matching: QuerySet[Any, Any],
                          picked_by: Mapping[str, Any], changes: Mapping[str, Any]) -> list[Any]:
    """UPDATE the rows of `matching` (inside the caller's transaction) and return their
    primary keys, for the read of their returned columns: the primary key `picked_by`
    names, if the UPDATE changed its row; else the matching rows' keys, read first and
    locked (the UPDATE may change the columns they were picked by)."""
    pk = model._meta.pk
    assert pk is not None
    for name in (pk.name, "pk"):
        key = picked_by.get(name)
        if key is not None and not isinstance(key, In):
            return [key] if matching.update(**changes) else []
    pks = list(matching.select_for_update().order_by().values_list("pk", flat=True))
    if pks:
        _manager(model).filter(pk__in=pks).update(**changes)
    return pks


@cache
def _field(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, Field)
    return field


@cache
def _attname(model: type[Model], name: str) -> str:
    """The instance attribute of a column named by its field (a key's `_id`): rowsql's
    rows give keys as the related row's primary key."""
    return _field(model, name).attname


def _instance(model: type[Model], row: Mapping[str, Any]) -> Model:
    return model(**{_attname(model, name): _value(value) for name, value in row.items()})


def _key(model: type[Model], names: tuple[str, ...], values: Iterable[Any]) -> Key:
    """Conflict columns' values in one spelling, whichever was given or read (a UUID's
    hex text, the UUID)."""
    return tuple(_comparable(model, name, value)
                 for name, value in zip(names, values, strict=True))


def _comparable(model: type[Model], name: str, value: Any) -> Any:
    field = _field(model, name)
    target = field.target_field if field.is_relation else field  # type: ignore[attr-defined]
    return target.to_python(value)


def _stored_keys(model: type[Model], conflict: tuple[str, ...],
                 rows: Sequence[Mapping[str, Any]]) -> set[Key]:
    """The conflict columns' values of the rows already stored that `rows` clash with."""
    return {_key(model, conflict, found) for found in _by_conflict_columns(
        model, conflict, rows).values_list(*conflict)}


def _by_conflict_columns(model: type[Model], conflict: tuple[str, ...],
                         rows: Sequence[Mapping[str, Any]]) -> QuerySet[Any, Any]:
    """The stored rows that may clash with `rows`: each conflict column among the rows'
    values (a superset, told apart by `_key`)."""
    clashing: QuerySet[Any, Any] = _manager(model).filter(
        **{f"{name}__in": {row[name] for row in rows} for name in conflict}).order_by()
    return clashing


def _written(model: type[Model], conflict: tuple[str, ...],
             rows: Sequence[Mapping[str, Any]], objs: Sequence[Model],
             stored_before: set[Key]) -> list[tuple[Mapping[str, Any], Model]]:
    """The rows an INSERT ... ON CONFLICT DO NOTHING inserted: those whose conflict
    columns clashed with no row stored before nor with an earlier row of theirs."""
    seen = set(stored_before)
    written = []
    for row, obj in zip(rows, objs, strict=True):
        key = _key(model, conflict, (row[name] for name in conflict))
        if key not in seen:
            seen.add(key)
            written.append((row, obj))
    return written


def _returned(model: type[Model], names: tuple[str, ...], conflict: tuple[str, ...],
              on_conflict_update: tuple[str, ...],
              written: list[tuple[Mapping[str, Any], Model]]) -> list[tuple[Any, ...]]:
    """The `names` columns of the rows written, in order: from the objects bulk_create
    left where they hold what is stored, else read back by the conflict columns."""
    pk = model._meta.pk
    assert pk is not None
    pk_names = (pk.name, "pk")
    pk_returned = bool(getattr(pk, "db_returning", False))

    def known(name: str) -> bool:
        if name in pk_names:
            # Set by bulk_create when the database returns it (not for rows of an ignored
            # conflict), else given: wrong for a row an upsert updated.
            return not conflict or (pk_returned if on_conflict_update else not pk_returned)
        return not on_conflict_update or name in conflict or name in on_conflict_update

    if all(known(name) for name in names):
        return [tuple(getattr(obj, "pk" if name == "pk" else _attname(model, name))
                      for name in names) for _, obj in written]
    assert conflict  # without a conflict every column is known
    stored = {_key(model, conflict, found[:len(conflict)]): found[len(conflict):]
              for found in _by_conflict_columns(
                  model, conflict, [row for row, _ in written]).values_list(*conflict, *names)}
    return [tuple(stored[_key(model, conflict, (row[name] for name in conflict))])
            for row, _ in written]
