"""Columns the audit log keeps by database triggers, so they are right whoever writes the
rows (the recorder, the lifecycle, an import, `seed_audit`, a queryset `update()`).
Created by migrations `0014_auditscale2_call_run_copy` and `0015_auditscale2_tool_slots`,
checked after every `migrate` (`ensure_audit_triggers`).

- `ToolCall.run_created_at` / `run_owner_id`: the creation time and creator of the
  call's run, so the calls list, a user's calls and a tool page need no join.
- `ToolCallSlot`: each tool's calls and errors per UTC quarter hour of the call's
  moment (its start, or its run's creation): the staff chart of a tool page.
- `ToolErrorGroup`: each tool's erring calls by error type and the first
  `ERROR_HEAD_CHARS` characters of the message, with the newest call's id.

The counts change inside the writer's transaction, so they commit or roll back with the
call. Transactions writing calls of several tools in different orders concurrently
could deadlock on these rows (PostgreSQL would then abort one).
"""

# The SQL below is built only from this module's constant table and column names, never
# from input.
# ruff: noqa: S608

from __future__ import annotations

from typing import Any

_RUN = "(SELECT r.{} FROM tools_app_run r WHERE r.id = new.run_id)"
_STALE = (f"new.run_created_at IS NOT {_RUN.format('created_at')} "
          f"OR new.run_owner_id IS NOT {_RUN.format('created_by_id')}")
_SET = (f"UPDATE tools_app_toolcall SET run_created_at = {_RUN.format('created_at')}, "
        f"run_owner_id = {_RUN.format('created_by_id')} WHERE id = new.id;")

# SQLite: a trigger cannot change the row being inserted, so it updates it after. The
# nested UPDATE does not fire these triggers again (recursive_triggers is off).
SQLITE_TRIGGERS = {
    "tools_app_toolcall_run_copy_insert":
        f"AFTER INSERT ON tools_app_toolcall WHEN {_STALE} BEGIN {_SET} END",
    "tools_app_toolcall_run_copy_update":
        "AFTER UPDATE OF run_id, run_created_at, run_owner_id ON tools_app_toolcall "
        f"WHEN {_STALE} BEGIN {_SET} END",
    "tools_app_run_copy_follow":
        "AFTER UPDATE OF created_at, created_by_id ON tools_app_run "
        "WHEN new.created_at IS NOT old.created_at "
        "OR new.created_by_id IS NOT old.created_by_id BEGIN "
        "UPDATE tools_app_toolcall SET run_created_at = new.created_at, "
        "run_owner_id = new.created_by_id WHERE run_id = new.id; END",
}

# One statement, so memory stays bounded whatever the number of calls (the database
# streams it); also what repairs the columns after triggers were missing.
SQLITE_BACKFILL = (
    "UPDATE tools_app_toolcall SET (run_created_at, run_owner_id) = "
    "(SELECT r.created_at, r.created_by_id FROM tools_app_run r "
    "WHERE r.id = tools_app_toolcall.run_id) "
    "WHERE run_created_at IS NOT (SELECT r.created_at FROM tools_app_run r "
    "WHERE r.id = tools_app_toolcall.run_id) "
    "OR run_owner_id IS NOT (SELECT r.created_by_id FROM tools_app_run r "
    "WHERE r.id = tools_app_toolcall.run_id)"
)

POSTGRES_CREATE = (
    "CREATE FUNCTION tools_app_toolcall_run_copy() RETURNS trigger "
    "LANGUAGE plpgsql AS $$ BEGIN "
    "SELECT r.created_at, r.created_by_id INTO NEW.run_created_at, NEW.run_owner_id "
    "FROM tools_app_run r WHERE r.id = NEW.run_id; "
    "RETURN NEW; END $$",
    "CREATE TRIGGER tools_app_toolcall_run_copy BEFORE INSERT OR UPDATE OF run_id, "
    "run_created_at, run_owner_id ON tools_app_toolcall FOR EACH ROW "
    "EXECUTE FUNCTION tools_app_toolcall_run_copy()",
    "CREATE FUNCTION tools_app_run_copy_follow() RETURNS trigger "
    "LANGUAGE plpgsql AS $$ BEGIN "
    "UPDATE tools_app_toolcall SET run_created_at = NEW.created_at, "
    "run_owner_id = NEW.created_by_id WHERE run_id = NEW.id; "
    "RETURN NULL; END $$",
    "CREATE TRIGGER tools_app_run_copy_follow AFTER UPDATE OF created_at, created_by_id "
    "ON tools_app_run FOR EACH ROW WHEN (OLD.created_at IS DISTINCT FROM NEW.created_at "
    "OR OLD.created_by_id IS DISTINCT FROM NEW.created_by_id) "
    "EXECUTE FUNCTION tools_app_run_copy_follow()",
)
POSTGRES_BACKFILL = (
    "UPDATE tools_app_toolcall c SET run_created_at = r.created_at, "
    "run_owner_id = r.created_by_id FROM tools_app_run r WHERE r.id = c.run_id "
    "AND (c.run_created_at IS DISTINCT FROM r.created_at "
    "OR c.run_owner_id IS DISTINCT FROM r.created_by_id)"
)
POSTGRES_DROP = (
    "DROP TRIGGER IF EXISTS tools_app_run_copy_follow ON tools_app_run",
    "DROP FUNCTION IF EXISTS tools_app_run_copy_follow()",
    "DROP TRIGGER IF EXISTS tools_app_toolcall_run_copy ON tools_app_toolcall",
    "DROP FUNCTION IF EXISTS tools_app_toolcall_run_copy()",
)


# -- ToolCallSlot ---------------------------------------------------------------------

_SLOTS = "tools_app_toolcallslot"


def _sqlite_slot(row: str) -> str:
    """The quarter hour of a row's moment, as SQLite stores datetimes (UTC text
    "YYYY-MM-DD HH:MM:SS.ffffff"): "YYYY-MM-DD HH:MM:00", or NULL without a moment."""
    moment = f"coalesce({row}.started_at, {row}.run_created_at)"
    return (f"(substr({moment}, 1, 14) || "
            f"printf('%02d', (CAST(substr({moment}, 15, 2) AS INTEGER) / 15) * 15) || ':00')")


def _sqlite_slot_remove(row: str) -> str:
    return (f"UPDATE {_SLOTS} SET calls = calls - 1, errors = errors - {row}.is_error "
            f"WHERE tool_name = {row}.tool_name AND slot = {_sqlite_slot(row)};")


def _sqlite_slot_add(row: str) -> str:
    # WHERE also settles SQLite's parsing of an upsert's INSERT ... SELECT
    return (f"INSERT INTO {_SLOTS} (tool_name, slot, calls, errors) "
            f"SELECT {row}.tool_name, {_sqlite_slot(row)}, 1, {row}.is_error "
            f"WHERE {_sqlite_slot(row)} IS NOT NULL "
            "ON CONFLICT (tool_name, slot) DO UPDATE SET calls = calls + 1, "
            "errors = errors + excluded.errors;")


SQLITE_SLOT_TRIGGERS = {
    "tools_app_toolcall_slot_insert":
        f"AFTER INSERT ON tools_app_toolcall BEGIN {_sqlite_slot_add('new')} END",
    "tools_app_toolcall_slot_delete":
        f"AFTER DELETE ON tools_app_toolcall BEGIN {_sqlite_slot_remove('old')} END",
    # Also fired by the run-copy trigger's own UPDATE of run_created_at after an insert:
    # the call moves from the slot of its moment as inserted to its real one.
    "tools_app_toolcall_slot_update":
        "AFTER UPDATE OF tool_name, started_at, run_created_at, is_error "
        "ON tools_app_toolcall WHEN old.tool_name IS NOT new.tool_name "
        f"OR {_sqlite_slot('old')} IS NOT {_sqlite_slot('new')} "
        "OR old.is_error IS NOT new.is_error "
        f"BEGIN {_sqlite_slot_remove('old')} {_sqlite_slot_add('new')} END",
}
SQLITE_SLOT_REBUILD = (
    f"DELETE FROM {_SLOTS}",
    f"INSERT INTO {_SLOTS} (tool_name, slot, calls, errors) "
    f"SELECT c.tool_name, {_sqlite_slot('c')}, count(*), sum(c.is_error) "
    f"FROM tools_app_toolcall c WHERE {_sqlite_slot('c')} IS NOT NULL GROUP BY 1, 2",
)

_PG_SLOT = ("(date_trunc('hour', {m} AT TIME ZONE 'UTC') + "
            "floor(extract(minute FROM {m} AT TIME ZONE 'UTC') / 15) * interval '15 minutes'"
            ") AT TIME ZONE 'UTC'")
POSTGRES_SLOT_CREATE = (
    "CREATE FUNCTION tools_app_toolcall_slot() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "DECLARE o timestamptz; n timestamptz; BEGIN "
    "IF TG_OP <> 'INSERT' THEN o := coalesce(OLD.started_at, OLD.run_created_at); END IF; "
    "IF TG_OP <> 'DELETE' THEN n := coalesce(NEW.started_at, NEW.run_created_at); END IF; "
    "IF TG_OP = 'UPDATE' AND OLD.tool_name = NEW.tool_name AND OLD.is_error = NEW.is_error "
    f"AND {_PG_SLOT.format(m='o')} IS NOT DISTINCT FROM {_PG_SLOT.format(m='n')} "
    "THEN RETURN NULL; END IF; "
    f"IF o IS NOT NULL THEN UPDATE {_SLOTS} SET calls = calls - 1, "
    "errors = errors - OLD.is_error::int "
    f"WHERE tool_name = OLD.tool_name AND slot = {_PG_SLOT.format(m='o')}; END IF; "
    f"IF n IS NOT NULL THEN INSERT INTO {_SLOTS} (tool_name, slot, calls, errors) "
    f"VALUES (NEW.tool_name, {_PG_SLOT.format(m='n')}, 1, NEW.is_error::int) "
    f"ON CONFLICT (tool_name, slot) DO UPDATE SET calls = {_SLOTS}.calls + 1, "
    f"errors = {_SLOTS}.errors + EXCLUDED.errors; END IF; "
    "RETURN NULL; END $$",
    "CREATE TRIGGER tools_app_toolcall_slot AFTER INSERT OR DELETE OR UPDATE OF tool_name, "
    "started_at, run_created_at, is_error ON tools_app_toolcall FOR EACH ROW "
    "EXECUTE FUNCTION tools_app_toolcall_slot()",
)
_PG_MOMENT = "coalesce(c.started_at, c.run_created_at)"
POSTGRES_SLOT_REBUILD = (
    f"DELETE FROM {_SLOTS}",
    f"INSERT INTO {_SLOTS} (tool_name, slot, calls, errors) "
    f"SELECT c.tool_name, {_PG_SLOT.format(m=_PG_MOMENT)}, count(*), "
    f"count(*) FILTER (WHERE c.is_error) FROM tools_app_toolcall c "
    f"WHERE {_PG_MOMENT} IS NOT NULL GROUP BY 1, 2",
)
POSTGRES_SLOT_DROP = (
    "DROP TRIGGER IF EXISTS tools_app_toolcall_slot ON tools_app_toolcall",
    "DROP FUNCTION IF EXISTS tools_app_toolcall_slot()",
)


def create_slot_triggers(connection: Any) -> None:
    """The slots' triggers, then the slots counted from the calls already stored."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            for statement in (*POSTGRES_SLOT_CREATE, *POSTGRES_SLOT_REBUILD):
                cursor.execute(statement)
        elif connection.vendor == "sqlite":
            for statement in (*_trigger_statements(SQLITE_SLOT_TRIGGERS),
                              *SQLITE_SLOT_REBUILD):
                cursor.execute(statement)


def drop_slot_triggers(connection: Any) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            for statement in POSTGRES_SLOT_DROP:
                cursor.execute(statement)
        elif connection.vendor == "sqlite":
            for name in SQLITE_SLOT_TRIGGERS:
                cursor.execute(f"DROP TRIGGER IF EXISTS {name}")


# -- ToolErrorGroup --------------------------------------------------------------------

ERROR_HEAD_CHARS = 300  # audit.tool_stats groups messages that agree this far
_GROUPS = "tools_app_toolerrorgroup"


def _head(row: str) -> str:
    return f"substr({row}.error_message, 1, {ERROR_HEAD_CHARS})"


def _group_remove(row: str) -> str:
    """One call fewer in `row`'s group; its newest id looked up again if it was `row`'s
    (the row itself is gone or no longer matches: it is the next newest)."""
    return (f"UPDATE {_GROUPS} SET calls = calls - 1, last_call_id = CASE "
            f"WHEN last_call_id = {row}.id THEN coalesce((SELECT max(c.id) "
            "FROM tools_app_toolcall c WHERE c.tool_name = {r}.tool_name AND c.is_error "
            f"AND c.error_type = {row}.error_type AND substr(c.error_message, 1, "
            f"{ERROR_HEAD_CHARS}) = {_head(row)}), 0) ELSE last_call_id END "
            f"WHERE tool_name = {row}.tool_name AND error_type = {row}.error_type "
            f"AND head = {_head(row)}").replace("{r}", row)


SQLITE_GROUP_TRIGGERS = {
    "tools_app_toolcall_group_insert":
        "AFTER INSERT ON tools_app_toolcall WHEN new.is_error BEGIN "
        f"INSERT INTO {_GROUPS} (tool_name, error_type, head, calls, last_call_id) "
        f"VALUES (new.tool_name, new.error_type, {_head('new')}, 1, new.id) "
        "ON CONFLICT (tool_name, error_type, head) DO UPDATE SET calls = calls + 1, "
        "last_call_id = max(last_call_id, excluded.last_call_id); END",
    "tools_app_toolcall_group_delete":
        f"AFTER DELETE ON tools_app_toolcall WHEN old.is_error BEGIN {_group_remove('old')}; "
        "END",
    "tools_app_toolcall_group_update":
        "AFTER UPDATE OF tool_name, is_error, error_type, error_message "
        "ON tools_app_toolcall WHEN (old.is_error OR new.is_error) AND ("
        "old.tool_name IS NOT new.tool_name OR old.is_error IS NOT new.is_error "
        f"OR old.error_type IS NOT new.error_type OR {_head('old')} IS NOT {_head('new')}) "
        f"BEGIN {_group_remove('old')} AND old.is_error; "
        f"INSERT INTO {_GROUPS} (tool_name, error_type, head, calls, last_call_id) "
        f"SELECT new.tool_name, new.error_type, {_head('new')}, 1, new.id WHERE new.is_error "
        "ON CONFLICT (tool_name, error_type, head) DO UPDATE SET calls = calls + 1, "
        "last_call_id = max(last_call_id, excluded.last_call_id); END",
}
_GROUPS_REBUILD = (
    f"DELETE FROM {_GROUPS}",
    f"INSERT INTO {_GROUPS} (tool_name, error_type, head, calls, last_call_id) "
    f"SELECT c.tool_name, c.error_type, {_head('c')}, count(*), max(c.id) "
    "FROM tools_app_toolcall c WHERE c.is_error GROUP BY 1, 2, 3",
)
SQLITE_GROUP_REBUILD = _GROUPS_REBUILD
POSTGRES_GROUP_REBUILD = _GROUPS_REBUILD
_PG_GROUP_ADD = (
    f"INSERT INTO {_GROUPS} (tool_name, error_type, head, calls, last_call_id) "
    f"VALUES (NEW.tool_name, NEW.error_type, {_head('NEW')}, 1, NEW.id) "
    f"ON CONFLICT (tool_name, error_type, head) DO UPDATE SET calls = {_GROUPS}.calls + 1, "
    f"last_call_id = greatest({_GROUPS}.last_call_id, EXCLUDED.last_call_id);")
POSTGRES_GROUP_CREATE = (
    "CREATE FUNCTION tools_app_toolcall_group() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "BEGIN "
    "IF TG_OP = 'UPDATE' AND OLD.tool_name = NEW.tool_name AND OLD.is_error = NEW.is_error "
    f"AND OLD.error_type = NEW.error_type AND {_head('OLD')} = {_head('NEW')} "
    "THEN RETURN NULL; END IF; "
    f"IF TG_OP <> 'INSERT' AND OLD.is_error THEN {_group_remove('OLD')}; END IF; "
    f"IF TG_OP <> 'DELETE' AND NEW.is_error THEN {_PG_GROUP_ADD} END IF; "
    "RETURN NULL; END $$",
    "CREATE TRIGGER tools_app_toolcall_group AFTER INSERT OR DELETE OR UPDATE OF tool_name, "
    "is_error, error_type, error_message ON tools_app_toolcall FOR EACH ROW "
    "EXECUTE FUNCTION tools_app_toolcall_group()",
)
POSTGRES_GROUP_DROP = (
    "DROP TRIGGER IF EXISTS tools_app_toolcall_group ON tools_app_toolcall",
    "DROP FUNCTION IF EXISTS tools_app_toolcall_group()",
)


def create_group_triggers(connection: Any) -> None:
    """The error groups' triggers, then the groups counted from the calls stored."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            for statement in (*POSTGRES_GROUP_CREATE, *POSTGRES_GROUP_REBUILD):
                cursor.execute(statement)
        elif connection.vendor == "sqlite":
            for statement in (*_trigger_statements(SQLITE_GROUP_TRIGGERS),
                              *SQLITE_GROUP_REBUILD):
                cursor.execute(statement)


def drop_group_triggers(connection: Any) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            for statement in POSTGRES_GROUP_DROP:
                cursor.execute(statement)
        elif connection.vendor == "sqlite":
            for name in SQLITE_GROUP_TRIGGERS:
                cursor.execute(f"DROP TRIGGER IF EXISTS {name}")


# -- the run's copied columns -----------------------------------------------------------


def create_run_copy_triggers(connection: Any) -> None:
    """The triggers, then the columns filled for the calls already stored."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            for statement in (*POSTGRES_CREATE, POSTGRES_BACKFILL):
                cursor.execute(statement)
        elif connection.vendor == "sqlite":
            for statement in (*_trigger_statements(SQLITE_TRIGGERS), SQLITE_BACKFILL):
                cursor.execute(statement)


def drop_run_copy_triggers(connection: Any) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            for statement in POSTGRES_DROP:
                cursor.execute(statement)
        elif connection.vendor == "sqlite":
            for name in SQLITE_TRIGGERS:
                cursor.execute(f"DROP TRIGGER IF EXISTS {name}")


def ensure_audit_triggers(connection: Any) -> bool:
    """On SQLite, recreate the triggers a table rebuild dropped and repair the columns
    (rows written meanwhile may lack them). True if anything was missing. Nothing to do
    before the columns' migration has run, nor on PostgreSQL (its triggers survive a
    table's changes)."""
    if connection.vendor != "sqlite":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')")
        present = {row[0] for row in cursor.fetchall()}
        columns = {c.name for c in connection.introspection.get_table_description(
            cursor, "tools_app_toolcall")}
        if "run_owner_id" not in columns:
            return False
        repaired = False
        missing = {n: body for n, body in SQLITE_TRIGGERS.items() if n not in present}
        if missing:
            for statement in (*_trigger_statements(missing), SQLITE_BACKFILL):
                cursor.execute(statement)
            repaired = True
        for table, triggers, rebuild in (
                (_SLOTS, SQLITE_SLOT_TRIGGERS, SQLITE_SLOT_REBUILD),
                (_GROUPS, SQLITE_GROUP_TRIGGERS, SQLITE_GROUP_REBUILD)):
            missing = {n: body for n, body in triggers.items() if n not in present}
            if missing and table in present:
                for statement in (*_trigger_statements(missing), *rebuild):
                    cursor.execute(statement)
                repaired = True
    return repaired


def _trigger_statements(triggers: dict[str, str]) -> list[str]:
    return [f"CREATE TRIGGER IF NOT EXISTS {name} {body}" for name, body in triggers.items()]
