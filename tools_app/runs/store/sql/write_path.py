"""What the write path's two implementations share: the value markers its statements
take (an increment in an UPDATE, one of several values in a `where`) and the switch
between them.

`rowsql` and `prepared` are the product's write path and hot reads, SQL built once per
shape; `rowsql_orm` and `prepared_orm` are the same functions written with the ORM's
public API, kept to measure what the hand-built layer saves (issue 39,
benchmarks/bench_product_path.py). `AGENTFORGE_WRITE_PATH=orm` has `rowsql` and
`prepared` hand their public functions over to the ORM variants, in every process that
imports them (read once, at import); unset or `sql`, the default, changes nothing. A
module of its own so both implementations take the same marker classes without
importing each other.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from django.core.exceptions import ImproperlyConfigured

ENVIRONMENT_VARIABLE = "AGENTFORGE_WRITE_PATH"


@dataclass(frozen=True)
class Add:
    """`column = column + amount` in an UPDATE."""

    amount: int


@dataclass(frozen=True)
class In:
    """`column IN (...)` in a `where`: the column holds one of these values (at least
    one: the statements are built for each count)."""

    values: tuple[Any, ...]


def chosen() -> Literal["sql", "orm"]:
    """The write path this process uses: `sql` (rowsql, prepared) unless
    AGENTFORGE_WRITE_PATH says `orm`. A bad value fails loudly, as every setting does."""
    value = os.environ.get(ENVIRONMENT_VARIABLE, "").strip().lower() or "sql"
    if value == "sql":
        return "sql"
    if value == "orm":
        return "orm"
    raise ImproperlyConfigured(
        f"{ENVIRONMENT_VARIABLE} must be 'sql' (the default) or 'orm', not {value!r}")
