"""The full-text indexes `audit.search` queries: created (and backfilled) by migration
`0011_auditscale_search`, and checked after every `migrate` (`ensure_search_index`).

Why the check: on SQLite, Django applies many schema changes by rebuilding the table
(create a copy, move the rows, drop the old one), and dropping a table drops its
triggers. A later migration that rebuilds `tools_app_toolcall` or `tools_app_run` would
silently stop the index from following new rows; the post-migrate check recreates the
missing triggers and rebuilds the index from the rows. (PostgreSQL's generated columns
survive such changes; ALTERing a column they read fails loudly instead.)
"""

# The SQL below is built only from this module's constant table and column names, never
# from input.
# ruff: noqa: S608

from __future__ import annotations

from typing import Any

INDEXED_CHARS = 30_000  # audit.search documents it; the tsvector limit (1 MB) sets it

_TOKENIZE = "tokenize = \"unicode61 remove_diacritics 0\""


def _cut(column: str) -> str:
    return f"substr(coalesce({column}, ''), 1, {INDEXED_CHARS})"


def _values(prefix: str, columns: tuple[str, ...]) -> str:
    return ", ".join(_cut(f"{prefix}.{c}") for c in columns)


CALL_COLUMNS = ("arguments_raw", "result_text", "error_message")
RUN_COLUMNS = ("title", "final_text", "error_message")

SQLITE_TABLES = (
    # External content: the text stays in the calls' table; rowid = the call's id.
    f"CREATE VIRTUAL TABLE IF NOT EXISTS tools_app_toolcall_fts USING fts5("
    f"{', '.join(CALL_COLUMNS)}, content='tools_app_toolcall', content_rowid='id', "
    f"{_TOKENIZE})",
    # Contentless, so the runs' text is not stored twice; its rowids are mapped to run ids
    # (a UUID-keyed table's own rowid may change on VACUUM, so it cannot be the key).
    "CREATE TABLE IF NOT EXISTS tools_app_run_fts_map ("
    "docid INTEGER PRIMARY KEY, run_id char(32) NOT NULL UNIQUE)",
    f"CREATE VIRTUAL TABLE IF NOT EXISTS tools_app_run_fts USING fts5("
    f"{', '.join(RUN_COLUMNS)}, content='', {_TOKENIZE})",
)

_CALL_DELETE = (f"INSERT INTO tools_app_toolcall_fts(tools_app_toolcall_fts, rowid, "
                f"{', '.join(CALL_COLUMNS)}) VALUES ('delete', old.id, "
                f"{_values('old', CALL_COLUMNS)});")
_CALL_INSERT = (f"INSERT INTO tools_app_toolcall_fts(rowid, {', '.join(CALL_COLUMNS)}) "
                f"VALUES (new.id, {_values('new', CALL_COLUMNS)});")
_RUN_DOCID = "(SELECT docid FROM tools_app_run_fts_map WHERE run_id = {}.id)"
# A contentless table forgets a row only when told the exact values it indexed.
_RUN_DELETE = (f"INSERT INTO tools_app_run_fts(tools_app_run_fts, rowid, "
               f"{', '.join(RUN_COLUMNS)}) VALUES ('delete', {_RUN_DOCID.format('old')}, "
               f"{_values('old', RUN_COLUMNS)});")
_RUN_INSERT = (f"INSERT INTO tools_app_run_fts(rowid, {', '.join(RUN_COLUMNS)}) "
               f"VALUES ({_RUN_DOCID.format('new')}, {_values('new', RUN_COLUMNS)});")

SQLITE_TRIGGERS = {
    "tools_app_toolcall_fts_insert":
        f"AFTER INSERT ON tools_app_toolcall BEGIN {_CALL_INSERT} END",
    "tools_app_toolcall_fts_delete":
        f"AFTER DELETE ON tools_app_toolcall BEGIN {_CALL_DELETE} END",
    # Only when an indexed column is written: the recorder's other updates skip it.
    "tools_app_toolcall_fts_update":
        f"AFTER UPDATE OF {', '.join(CALL_COLUMNS)} ON tools_app_toolcall "
        f"BEGIN {_CALL_DELETE} {_CALL_INSERT} END",
    "tools_app_run_fts_insert":
        "AFTER INSERT ON tools_app_run BEGIN "
        f"INSERT INTO tools_app_run_fts_map(run_id) VALUES (new.id); {_RUN_INSERT} END",
    "tools_app_run_fts_delete":
        f"AFTER DELETE ON tools_app_run BEGIN {_RUN_DELETE} "
        "DELETE FROM tools_app_run_fts_map WHERE run_id = old.id; END",
    # A run's counters, lease and seq change at every event: those updates skip it.
    "tools_app_run_fts_update":
        f"AFTER UPDATE OF {', '.join(RUN_COLUMNS)} ON tools_app_run "
        f"BEGIN {_RUN_DELETE} {_RUN_INSERT} END",
}

SQLITE_REBUILD = (
    # 'delete-all' clears the index only (external content) or all of it (contentless)
    "INSERT INTO tools_app_toolcall_fts(tools_app_toolcall_fts) VALUES ('delete-all')",
    f"INSERT INTO tools_app_toolcall_fts(rowid, {', '.join(CALL_COLUMNS)}) "
    f"SELECT id, {_values('c', CALL_COLUMNS)} FROM tools_app_toolcall c",
    "INSERT INTO tools_app_run_fts(tools_app_run_fts) VALUES ('delete-all')",
    "DELETE FROM tools_app_run_fts_map",
    "INSERT INTO tools_app_run_fts_map(run_id) SELECT id FROM tools_app_run",
    f"INSERT INTO tools_app_run_fts(rowid, {', '.join(RUN_COLUMNS)}) "
    f"SELECT m.docid, {_values('r', RUN_COLUMNS)} FROM tools_app_run r "
    "JOIN tools_app_run_fts_map m ON m.run_id = r.id",
)


def _pg_vector(columns: tuple[str, ...]) -> str:
    """Every run of non-alphanumerics becomes a space before PostgreSQL's parser sees the
    text, so it finds the words FTS5 finds (it would otherwise keep `a@b.com`, `3.14` or
    `get-weather` whole)."""
    text = " || ' ' || ".join(f"left(coalesce({c}, ''), {INDEXED_CHARS})" for c in columns)
    return (f"to_tsvector('simple'::regconfig, "
            f"regexp_replace({text}, '[^[:alnum:]]+', ' ', 'g'))")


POSTGRES_CREATE = (
    "ALTER TABLE tools_app_toolcall ADD COLUMN search_vector tsvector "
    f"GENERATED ALWAYS AS ({_pg_vector(CALL_COLUMNS)}) STORED",
    "CREATE INDEX tools_app_toolcall_search ON tools_app_toolcall USING gin (search_vector)",
    "ALTER TABLE tools_app_run ADD COLUMN search_vector tsvector "
    f"GENERATED ALWAYS AS ({_pg_vector(RUN_COLUMNS)}) STORED",
    "CREATE INDEX tools_app_run_search ON tools_app_run USING gin (search_vector)",
)
POSTGRES_DROP = (
    "ALTER TABLE tools_app_toolcall DROP COLUMN search_vector",
    "ALTER TABLE tools_app_run DROP COLUMN search_vector",
)
SQLITE_DROP = (
    *(f"DROP TRIGGER IF EXISTS {name}" for name in SQLITE_TRIGGERS),
    "DROP TABLE IF EXISTS tools_app_toolcall_fts",
    "DROP TABLE IF EXISTS tools_app_run_fts",
    "DROP TABLE IF EXISTS tools_app_run_fts_map",
)


def create_search_index(connection: Any) -> None:
    """Create the index of this database and fill it from the rows already stored."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            for statement in POSTGRES_CREATE:  # the generated columns fill themselves
                cursor.execute(statement)
        elif connection.vendor == "sqlite":
            for statement in (*SQLITE_TABLES, *_trigger_statements(SQLITE_TRIGGERS),
                              *SQLITE_REBUILD):
                cursor.execute(statement)


def drop_search_index(connection: Any) -> None:
    with connection.cursor() as cursor:
        drops = {"postgresql": POSTGRES_DROP, "sqlite": SQLITE_DROP}.get(connection.vendor, ())
        for statement in drops:
            cursor.execute(statement)


def ensure_search_index(connection: Any) -> bool:
    """On SQLite, recreate triggers a table rebuild dropped and rebuild the index from the
    rows (it may have missed changes meanwhile). True if anything was missing. Nothing
    to do before the index's migration has run, nor on PostgreSQL."""
    if connection.vendor != "sqlite":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')")
        present = {row[0] for row in cursor.fetchall()}
        if "tools_app_toolcall_fts" not in present:
            return False
        missing = {n: body for n, body in SQLITE_TRIGGERS.items() if n not in present}
        if not missing:
            return False
        for statement in (*_trigger_statements(missing), *SQLITE_REBUILD):
            cursor.execute(statement)
    return True


def _trigger_statements(triggers: dict[str, str]) -> list[str]:
    return [f"CREATE TRIGGER IF NOT EXISTS {name} {body}" for name, body in triggers.items()]
