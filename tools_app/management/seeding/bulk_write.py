"""seed_audit's fast write: rows built in memory, ids given here, one INSERT executed
for every row, one transaction per batch (no save(), no signals, no events: the audit
log reads runs, rounds and calls only).
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.core.management.color import no_style
from django.db import connection, transaction
from django.db.models import DateTimeField, JSONField, UUIDField

from tools_app.management.seeding.demo_data import World
from tools_app.management.seeding.rows import build_run
from tools_app.models import Round, Run, ToolCall


def write_batch(rng: random.Random, world: World, runs_at: list[tuple[uuid.UUID, datetime]],
                per_run: int) -> int:
    """Build and write the runs dated `runs_at`; returns how many calls they have."""
    runs, rounds, calls = [], [], []
    for pk, moment in runs_at:
        run, run_rounds, run_calls = build_run(rng, world, pk, moment, per_run)
        runs.append(run)
        rounds.extend(run_rounds)
        calls.extend(run_calls)
    with transaction.atomic():
        _number(Round, rounds)
        for call in calls:
            call.round_id = call.round.pk
        _number(ToolCall, calls)
        for model, rows in ((Run, runs), (Round, rounds), (ToolCall, calls)):
            _insert(model, rows)
    return len(calls)


def _number(model: type[Round] | type[ToolCall], rows: list[Any]) -> None:
    """Ids given here, after the highest stored (a seed is the only writer while it
    runs), so calls can name their rounds without reading the ids back."""
    highest = model.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    for number, row in enumerate(rows, start=highest + 1):
        row.pk = number


def _insert(model: type[Run] | type[Round] | type[ToolCall], rows: list[Any]) -> None:
    """One INSERT statement executed for every row (executemany): what
    bulk_create does minus its per-value compilation, which cost more than the writes.
    No save(), so no signals; every column is given (defaults were set by __init__)."""
    fields = model._meta.concrete_fields
    quote = connection.ops.quote_name
    sql = (f"INSERT INTO {quote(model._meta.db_table)} "  # noqa: S608  (model names only)
           f"({', '.join(quote(f.column or f.attname) for f in fields)}) "
           f"VALUES ({', '.join(['%s'] * len(fields))})")
    prepare = [_preparer(f) for f in fields]
    values = [tuple(p(getattr(row, f.attname)) for p, f in zip(prepare, fields, strict=True))
              for row in rows]
    with connection.cursor() as cursor:
        for start in range(0, len(values), 5000):
            cursor.executemany(sql, values[start:start + 5000])


def _preparer(field: Any) -> Callable[[Any], Any]:
    """How a value of this field is written (what the field's get_db_prep_save does,
    for the field types these models use)."""
    if isinstance(field, JSONField):
        return lambda v: None if v is None else json.dumps(v, ensure_ascii=False)
    if isinstance(field, DateTimeField):
        return connection.ops.adapt_datetimefield_value
    if isinstance(field, UUIDField) or (field.is_relation and isinstance(
            field.target_field, UUIDField)):
        native = connection.features.has_native_uuid_field
        return lambda v: None if v is None else (v if native else v.hex)
    return lambda v: v


def reset_sequences() -> None:
    """PostgreSQL's id sequences continue after the ids given here (SQLite's
    AUTOINCREMENT follows by itself)."""
    statements = connection.ops.sequence_reset_sql(no_style(), [Round, ToolCall])
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)
