"""Full-text search (the `q` filter of runs and tool calls) with each database's own index.

What people search in an audit log are words: a city or an id in a call's arguments, an
error type, a word of the model's answer or of the user's message. So `q` is split into
words (runs of letters and digits; everything else separates them, quotes and FTS
operators included, so no input is ever an error) and a row matches when it holds
every word, each as a word prefix, in any case: `paris` finds `{"city": "Paris"}`,
`zerodiv` finds `ZeroDivisionError`, `zhou` does not find `Hangzhou` (no substring
matches: that is what the indexes make fast).

Both databases tokenize the stored text the same way (migration
`0011_auditscale_search`):

- SQLite: FTS5 tables (`unicode61`, diacritics kept, tokens are letters and digits),
  kept in sync by triggers: the calls' table indexes `tools_app_toolcall` as external
  content (rowid = the call's id); the runs' table holds its own copy, its rowids mapped
  to run ids by `tools_app_run_fts_map` (a UUID-keyed table's own rowid can change on
  VACUUM).
- PostgreSQL: a stored generated `search_vector` tsvector column with a GIN index on
  each table, built with the `simple` configuration (no stemming, no stop words: the
  same words FTS5 sees) from the text with every run of non-alphanumerics replaced by a
  space, so PostgreSQL's parser sees the same words as FTS5.

Only the first `INDEXED_CHARS` characters of each field are indexed (a tsvector holds at
most 1 MB; both databases keep the same prefix so they agree).
"""

from __future__ import annotations

import re

from django.db import connections
from django.db.models import QuerySet
from django.db.models.expressions import RawSQL

from ..models import Run, ToolCall
from .search_schema import INDEXED_CHARS

__all__ = ["INDEXED_CHARS", "search_calls", "search_runs", "words"]
MAX_WORDS = 16  # a longer query is cut: each word is one more index lookup

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
    if _vendor(runs) == "postgresql":
        return runs.filter(pk__in=_ids(_POSTGRES_RUNS, [postgres_query(found)] * 2))
    return runs.filter(pk__in=_ids(_SQLITE_RUNS, [sqlite_query(found)] * 2))


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
