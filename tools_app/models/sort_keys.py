"""Expressions the calls and runs lists sort by, shared by the indexes that serve them
(`ToolCall.Meta.indexes`, `Run.Meta.indexes`) and the queries (`audit.call_filters`,
`audit.run_filters`): a database uses an expression index only for the very same
expression, so both build it from here."""

from __future__ import annotations

from typing import Any

from django.db.models import DateTimeField, FloatField, Func
from django.db.models.functions import Coalesce


class DurationKey(Func):
    """A call's duration (with `field`, a run's), -1 without one (it never ran, or runs
    still): one non-NULL order on both databases, which place NULL at opposite ends.
    The -1 is in the template, not a parameter, so the query's expression is the
    index's."""

    template = "COALESCE(%(expressions)s, -1)"
    output_field = FloatField()

    def __init__(self, field: Any = "duration_ms") -> None:
        super().__init__(field)


def moment_key() -> Coalesce:
    """When a call happened: its start, or its run's creation for a call that never
    started (hallucinated, refused), kept on the call (`run_created_at`): no join."""
    return Coalesce("started_at", "run_created_at", output_field=DateTimeField())
