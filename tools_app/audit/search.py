"""Full-text search (the `q` filter of runs and tool calls) with each database's own index.

`q` is split into words (runs of letters and digits, so no input is ever an error); a row
matches when it holds every word as a word prefix, in any case: `paris` finds
`{"city": "Paris"}`, `zhou` does not find `Hangzhou`. SQLite uses FTS5 tables kept by
triggers, PostgreSQL a stored `search_vector` with a GIN index (migration
`0011_auditscale_search`); both tokenize the same first `INDEXED_CHARS` characters of a
field, so they agree.

Runs are found in one of two ways, by how many rows match: few, the matching runs' ids
are read from the index; many (a common word), the list walks its own order and checks
each run against the matches read once, since reading the run of every matching call
would be a random read each. Both give the same runs.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.db import connections
from django.db.models import BooleanField, Expression, QuerySet
from django.db.models.expressions import RawSQL

from tools_app.audit.search_index import INDEXED_CHARS
from tools_app.models import Run, ToolCall

__all__ = ["INDEXED_CHARS", "search_calls", "search_runs", "words"]
MAX_WORDS = 16  # a longer query is cut: each word is one more index lookup
# Up to this many matching calls (or runs by their own text), a runs search reads the
# runs of the matches; beyond, it checks the runs in the list's order (module docstring).
FEW_MATCHES = 5_000

# Letters and digits, as FTS5's unicode61 tokenizer (categories L*, N*) and
# PostgreSQL's [[:alnum:]] see them; the underscore separates words in both.
_WORD = re.compile(r"[^\W_]+")

_SQLITE_CALLS = ("SELECT rowid FROM tools_app_toolcall_fts "
                 "WHERE tools_app_toolcall_fts MATCH %s")
_SQLITE_RUNS = ("SELECT m.run_id FROM tools_app_run_fts f "
                "JOIN tools_app_run_fts_map m ON m.docid = f.rowid "
                "WHERE tools_app_run_fts MATCH %s "
                "UNION SELECT c.run_id FROM tools_app_toolcall c WHERE c.id IN ("
                "SELECT rowid FROM tools_app_toolcall_fts "
                "WHERE tools_app_toolcall_fts MATCH %s)")
_POSTGRES_CALLS = ("SELECT id FROM tools_app_toolcall "
                   "WHERE search_vector @@ to_tsquery('simple', %s)")
_POSTGRES_RUNS = ("SELECT id FROM tools_app_run WHERE search_vector @@ to_tsquery('simple', %s) "
                  "UNION SELECT run_id FROM tools_app_toolcall "
                  "WHERE search_vector @@ to_tsquery('simple', %s)")


# How many calls and runs match, each counted up to FEW_MATCHES + 1 (index reads only).
_SQLITE_COUNT = ("SELECT (SELECT count(*) FROM (SELECT rowid FROM tools_app_toolcall_fts "
                 "WHERE tools_app_toolcall_fts MATCH %s LIMIT %s)), "
                 "(SELECT count(*) FROM (SELECT rowid FROM tools_app_run_fts "
                 "WHERE tools_app_run_fts MATCH %s LIMIT %s))")
# PostgreSQL: the planner's estimate from the columns' statistics (counting would read
# each match's row to recheck it: a second for a common word).
_POSTGRES_ESTIMATES = (
    "EXPLAIN (FORMAT JSON) SELECT 1 FROM tools_app_toolcall "
    "WHERE search_vector @@ to_tsquery('simple', %s)",
    "EXPLAIN (FORMAT JSON) SELECT 1 FROM tools_app_run "
    "WHERE search_vector @@ to_tsquery('simple', %s)",
)
# One run checked as the list reaches it ({run} is the runs table's alias in the list's
# query). SQLite computes each `IN (SELECT rowid ... MATCH)` once per query (the index's
# matches, no row reads), then probes it (`+c.id`: with `c.id` SQLite would instead
# look up every match among the run's calls); PostgreSQL reads the run's calls by run_id and
# tests their stored tsvectors (OFFSET 0 keeps it from hashing every matching call).
_SQLITE_RUN_CHECK = (
    "((SELECT m.docid FROM tools_app_run_fts_map m WHERE m.run_id = {run}.id) IN "
    "(SELECT rowid FROM tools_app_run_fts WHERE tools_app_run_fts MATCH %s) "
    "OR EXISTS (SELECT 1 FROM tools_app_toolcall c WHERE c.run_id = {run}.id AND +c.id IN "
    "(SELECT rowid FROM tools_app_toolcall_fts WHERE tools_app_toolcall_fts MATCH %s)))")
_POSTGRES_RUN_CHECK = (
    "({run}.search_vector @@ to_tsquery('simple', %s) "
    "OR EXISTS (SELECT 1 FROM tools_app_toolcall c WHERE c.run_id = {run}.id "
    "AND c.search_vector @@ to_tsquery('simple', %s) OFFSET 0))")


def words(text: str) -> list[str]:
    """The words a query searches for, lower-cased, at most MAX_WORDS, each once."""
    return list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))[:MAX_WORDS]


def sqlite_query(found: list[str]) -> str:
    """An FTS5 query: every word as a quoted prefix. A word holds only letters and digits,
    so quoting it makes even `NEAR` or `AND` a plain word."""
    return " AND ".join(f'"{word}"*' for word in found)


def postgres_query(found: list[str]) -> str:
    """A tsquery: every word as a prefix (letters and digits only: no operator)."""
    return " & ".join(f"{word}:*" for word in found)


def search_calls(calls: QuerySet[ToolCall], text: str) -> QuerySet[ToolCall]:
    """The calls whose arguments, result or error hold every word of `text`."""
    found = words(text)
    if not found:  # nothing searchable (only punctuation): nothing matches
        return calls.none()
    if _vendor(calls) == "postgresql":
        return calls.filter(pk__in=_ids(_POSTGRES_CALLS, [postgres_query(found)]))
    return calls.filter(pk__in=_ids(_SQLITE_CALLS, [sqlite_query(found)]))


def search_runs(runs: QuerySet[Run], text: str) -> QuerySet[Run]:
    """The runs whose user message (title), answer or error, or any of whose calls'
    arguments, result or error, hold every word of `text` (all the words in one of
    those rows: the run's own, or one call's)."""
    found = words(text)
    if not found:
        return runs.none()
    postgres = _vendor(runs) == "postgresql"
    query = postgres_query(found) if postgres else sqlite_query(found)
    if max(_matches(runs.db, query, postgres)) > FEW_MATCHES:
        return runs.filter(RunMatches(_POSTGRES_RUN_CHECK if postgres else _SQLITE_RUN_CHECK,
                                      query))
    return runs.filter(pk__in=_ids(_POSTGRES_RUNS if postgres else _SQLITE_RUNS, [query] * 2))


def _matches(using: str, query: str, postgres: bool) -> tuple[int, int]:
    """How many calls and runs (by their own text) hold the words: counted up to
    FEW_MATCHES + 1 from SQLite's index (its matches cost no row reads), estimated by
    PostgreSQL's planner."""
    with connections[using].cursor() as cursor:
        if not postgres:
            cursor.execute(_SQLITE_COUNT, [query, FEW_MATCHES + 1] * 2)
            calls, own = cursor.fetchone()
            return int(calls), int(own)
        found = []
        for statement in _POSTGRES_ESTIMATES:
            cursor.execute(statement, [query])
            plan = cursor.fetchone()[0]
            plan = json.loads(plan) if isinstance(plan, str) else plan
            found.append(int(plan[0]["Plan"]["Plan Rows"]))
        return found[0], found[1]


class RunMatches(Expression):
    """True for a run whose own text or one of whose calls' holds every word: the check
    of one run as the list reaches it (the SQL is one of this module's constants, the
    words travel as parameters)."""

    output_field = BooleanField()

    def __init__(self, template: str, query: str) -> None:
        super().__init__()
        self.template, self.query = template, query

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[str, ...]]:
        run = compiler.quote_name(compiler.query.get_initial_alias())
        return self.template.format(run=run), (self.query, self.query)


def _ids(sql: str, params: list[str]) -> RawSQL:
    """A subquery of matching ids: the SQL is one of this module's constants and the
    user's words only ever travel as parameters."""
    return RawSQL(sql, params)  # noqa: S611


def _vendor(rows: QuerySet[Run] | QuerySet[ToolCall]) -> str:
    vendor = connections[rows.db].vendor
    if vendor not in ("postgresql", "sqlite"):
        # settings accept only these two; a third would need its own index first
        raise RuntimeError(f"full-text search is not built for {vendor}")
    return vendor
