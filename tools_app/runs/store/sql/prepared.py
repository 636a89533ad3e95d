"""Reads whose SQL the ORM builds once per shape and that run again with new parameters.

Why: the live timeline reads the same few small queries for every batch it sends (a run's
new events, its call counts, the touched rounds, their calls and re-executions), and
cloning the queryset, resolving its filters and compiling it cost the ORM more than
executing the query and fetching its rows. Here the ORM still writes the
SQL, for each database, and its own converters still turn the columns into Python values
(JSON, datetimes, UUIDs), so the rows are exactly what `values()` / `values_list()`
return; only the compilation is kept.

How the parameters are found: the query is built once with marker values in place of
the arguments (a fresh UUID, a large int, a random string; a list stands for an `__in`
of that many values), compiled, and each marker is located among the compiled
parameters. A call puts its arguments where the markers were, prepared as the markers
were (a UUID as its hex on a database without a UUID type); every other parameter (a
JSON key path, a constant in a filter) stays as compiled. A shape whose markers cannot
all be found is refused at its first use. A list is padded to a power of two (its last
value repeated), so an `__in` takes a few shapes, not one per length. The rows are
converted with the converters of the connection that reads them (a backend's are
methods of its connection), kept per connection.
"""

from __future__ import annotations

import secrets
import threading
import uuid
import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model, QuerySet
from django.db.models.expressions import ColPairs

from tools_app.runs.store.sql.write_path import chosen

# Marker ints: far beyond any id, seq or index a test or a user creates, and within a
# 32-bit column (SQLite and PostgreSQL compare them with any integer column).
_MARKER_INT_BASE = 2_000_000_000


@dataclass(frozen=True)
class _Slot:
    """Where an argument (or one element of a list argument) goes among the params."""

    position: int
    argument: int
    element: int | None  # the index in a list argument, or None
    as_hex: bool  # a UUID stored as its hex string
    # The int type the backend adapted the marker to (psycopg's Int4 for an integer
    # column on PostgreSQL), applied to the argument the same way; None: a plain int.
    int_type: type[int] | None = None


@dataclass(frozen=True)
class _Compiled:
    sql: str
    params: tuple[Any, ...]  # as compiled: the markers' positions are replaced per call
    slots: tuple[_Slot, ...]
    names: tuple[str, ...] | None  # the keys of values() rows; None: values_list tuples
    expressions: tuple[Any, ...]  # the selected columns, whose converters read the rows


Converters = tuple[tuple[int, tuple[Callable[..., Any], ...], Any], ...]

_compiled: dict[tuple[Hashable, str, tuple[Any, ...]], _Compiled] = {}
# A backend's converters are methods of its connection (SQLite's datetime converter reads
# the connection's time zone): each thread's connection gets its own.
_converters: weakref.WeakKeyDictionary[Any, dict[Any, Converters]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def rows(key: Hashable, build: Callable[..., QuerySet[Any, Any]],
         *arguments: Any) -> list[Any]:
    """What `list(build(*arguments))` returns (a values() or values_list() queryset),
    with the SQL compiled once for `key` and the arguments' shape. Arguments: UUIDs,
    ints, strings, and non-empty lists of ints, of strings or of UUIDs (a UUID column
    takes a UUID, not its text); `build` must use each one as a query parameter (a filter
    value), never to choose the query's shape."""
    connection = connections[DEFAULT_DB_ALIAS]
    arguments = tuple(_padded(argument) for argument in arguments)
    shape = tuple(_kind(argument) for argument in arguments)
    cache_key = (key, connection.vendor, shape)
    compiled = _compiled.get(cache_key)
    if compiled is None:
        compiled = _compile(build, shape, connection)
        with _lock:
            _compiled[cache_key] = compiled
    params = list(compiled.params)
    for slot in compiled.slots:
        value = arguments[slot.argument]
        if slot.element is not None:
            value = value[slot.element]
        if slot.int_type is not None:
            value = slot.int_type(value)
        params[slot.position] = value.hex if slot.as_hex else value
    with connection.cursor() as cursor:
        cursor.execute(compiled.sql, params)
        fetched = cursor.fetchall()
    return _converted(fetched, compiled, _converters_for(cache_key, compiled, connection),
                      connection)


def instances[M: Model](key: Hashable, model: type[M],
                        build: Callable[..., QuerySet[M, M]], *arguments: Any) -> list[M]:
    """What `list(build(*arguments))` returns (a queryset of `model`, with every concrete
    field), as `rows` reads it: instances made by `Model.from_db`, as the ORM's own
    iteration makes them."""
    names = concrete_names(model)
    found = rows((key, "instances"), lambda *marked: build(*marked).values_list(*names),
                 *arguments)
    return [model.from_db(DEFAULT_DB_ALIAS, names, row) for row in found]


@cache
def concrete_names(model: type[Model]) -> tuple[str, ...]:
    """The attnames of a model's concrete fields, in their order (a foreign key's `_id`);
    fixed once the models are loaded, so worked out once per model."""
    return tuple(field.attname for field in model._meta.concrete_fields)


def _padded(argument: Any) -> Any:
    """A list repeats its last value up to the next power of two: `IN` ignores the
    repeats, and the lists of a query's calls then take a few shapes, not one per length
    (each shape is compiled and kept)."""
    if not isinstance(argument, (list, tuple)) or not argument:
        return argument
    size = 1 << (len(argument) - 1).bit_length()
    return [*argument, *[argument[-1]] * (size - len(argument))]


def _converters_for(cache_key: Any, compiled: _Compiled, connection: Any) -> Converters:
    """The converters of `compiled`'s columns on `connection`, as the ORM's compiler
    takes them (`SQLCompiler.get_converters`)."""
    per_connection = _converters.get(connection)
    if per_connection is None:
        with _lock:
            per_connection = _converters.setdefault(connection, {})
    found = per_connection.get(cache_key)
    if found is None:
        found = per_connection[cache_key] = tuple(
            (index, tuple(convs), expression)
            for index, expression in enumerate(compiled.expressions)
            if (convs := connection.ops.get_db_converters(expression)
                + expression.get_db_converters(connection)))
    return found


def _kind(argument: Any) -> Any:
    if isinstance(argument, uuid.UUID):
        return "uuid"
    if isinstance(argument, bool):
        raise TypeError("a bool is no query parameter here")
    if isinstance(argument, int):
        return "int"
    if isinstance(argument, str):
        return "str"
    if isinstance(argument, (list, tuple)) and argument:
        if all(isinstance(item, int) and not isinstance(item, bool) for item in argument):
            return ("ints", len(argument))
        if all(isinstance(item, str) for item in argument):
            return ("strs", len(argument))
        if all(isinstance(item, uuid.UUID) for item in argument):
            return ("uuids", len(argument))
    raise TypeError(f"unsupported query argument: {argument!r}")


def _markers(shape: tuple[Any, ...]) -> list[Any]:
    markers: list[Any] = []
    counter = _MARKER_INT_BASE + secrets.randbelow(1_000_000) * 100
    for kind in shape:
        if kind == "uuid":
            markers.append(uuid.uuid4())
        elif kind == "int":
            counter += 1
            markers.append(counter)
        elif kind == "str":
            markers.append("marker-" + secrets.token_hex(12))
        elif kind[0] == "strs":
            markers.append([f"marker-{secrets.token_hex(12)}" for _ in range(kind[1])])
        elif kind[0] == "uuids":
            markers.append([uuid.uuid4() for _ in range(kind[1])])
        else:
            markers.append(list(range(counter + 1, counter + 1 + kind[1])))
            counter += kind[1]
    return markers


def _compile(build: Callable[..., QuerySet[Any, Any]], shape: tuple[Any, ...],
             connection: Any) -> _Compiled:
    markers = _markers(shape)
    queryset = build(*markers)
    query = queryset.query
    compiler = query.get_compiler(connection=connection)
    sql, params = compiler.as_sql()
    slots = []
    for position, param in enumerate(params):
        slot = _slot_of(position, param, markers)
        if slot is not None:
            slots.append(slot)
    found = {(slot.argument, slot.element) for slot in slots}
    wanted = {(n, None) if not isinstance(m, list) else (n, e)
              for n, m in enumerate(markers) for e in (range(len(m)) if isinstance(m, list)
                                                        else [None])}
    if found != wanted:
        raise ValueError(f"the query does not take every argument as a parameter: {sql}")
    expressions = tuple(selected[0] for selected in compiler.select[:compiler.col_count])
    if any(isinstance(expression, ColPairs) for expression in expressions):
        raise TypeError("a composite primary key is not prepared here")
    return _Compiled(sql=sql, params=tuple(params), slots=tuple(slots),
                     names=_names(queryset), expressions=expressions)


def _slot_of(position: int, param: Any, markers: Sequence[Any]) -> _Slot | None:
    int_type = type(param) if isinstance(param, int) and type(param) not in (int, bool) else None
    for argument, marker in enumerate(markers):
        if isinstance(marker, list) and isinstance(marker[0], uuid.UUID):
            for element, one in enumerate(marker):
                if param == one or param == one.hex:
                    return _Slot(position, argument, element, param != one)
        elif isinstance(marker, list):
            if isinstance(param, str) and param in marker:
                return _Slot(position, argument, marker.index(param), False)
            if isinstance(param, int) and not isinstance(param, bool) and param in marker:
                return _Slot(position, argument, marker.index(param), False, int_type)
        elif isinstance(marker, uuid.UUID):
            if param == marker:
                return _Slot(position, argument, None, False)
            if param == marker.hex:
                return _Slot(position, argument, None, True)
        elif isinstance(marker, int):
            if isinstance(param, int) and not isinstance(param, bool) and param == marker:
                return _Slot(position, argument, None, False, int_type)
        elif isinstance(param, str) and param == marker:
            return _Slot(position, argument, None, False)
    return None


def _names(queryset: QuerySet[Any, Any]) -> tuple[str, ...] | None:
    """The keys of a values() row, as Django's ValuesIterable takes them."""
    from django.db.models.query import ValuesIterable, ValuesListIterable

    if queryset._iterable_class is ValuesListIterable:
        return None
    if queryset._iterable_class is not ValuesIterable:
        raise TypeError("only values() and values_list() querysets are prepared")
    query = queryset.query
    if query.selected:
        return tuple(query.selected)
    return (*query.extra_select, *query.values_select, *query.annotation_select)


def _converted(fetched: list[Any], compiled: _Compiled, converters: Converters,
               connection: Any) -> list[Any]:
    converted = []
    for row in fetched:
        values = list(row)
        for index, convs, expression in converters:
            value = values[index]
            for convert in convs:
                value = convert(value, expression, connection)
            values[index] = value
        converted.append(dict(zip(compiled.names, values, strict=True))
                         if compiled.names is not None else tuple(values))
    return converted


# The measurement's switch (issue 39, store/sql/write_path.py): with AGENTFORGE_WRITE_PATH=orm
# the reads are the plain querysets, evaluated by the ORM at every call
# (`prepared_orm`), read once at import.
if chosen() == "orm":
    from tools_app.runs.store.sql import prepared_orm

    rows = prepared_orm.rows
    instances = prepared_orm.instances
