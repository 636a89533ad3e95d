"""PostgreSQL's statistics of the run path's tables kept up with their first growth.

Why: every event, round and call a run writes is checked against its run (and a call
against its round) by PostgreSQL's foreign-key triggers, whose query each connection
plans once and keeps. Planned while the runs table held a handful of rows, that query
scans the whole table, and keeps scanning it as the table grows until the table is
analyzed again, which autovacuum does late on a new deployment.

So the worker's periodic sweep (`runs.sweeps`) analyzes each of these tables whose live
rows have more than doubled since PostgreSQL last counted them: a few times in a
table's early life, hardly ever once it is large, where autovacuum keeps up by itself.
ANALYZE also invalidates the plans every connection keeps for the table.
"""

from __future__ import annotations

import logging

from django.db import DEFAULT_DB_ALIAS, connections
from django_tasks_db.models import DBTaskResult

from tools_app.models import Round, Run, RunEvent, ToolCall

logger = logging.getLogger(__name__)

# The tables every run writes to and checks against, and the queue its task is in.
RUN_PATH_TABLES = tuple(model._meta.db_table
                        for model in (Run, Round, ToolCall, RunEvent, DBTaskResult))
# Below this many live rows a table is left to autovacuum: a plan over so few rows
# costs little whichever it is.
MIN_ROWS = 50

# Live rows (from the statistics collector, as autovacuum reads them) against the rows
# PostgreSQL last counted (pg_class.reltuples: -1 before any ANALYZE or VACUUM).
_GROWN = """
SELECT s.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.schemaname = current_schema() AND s.relname = ANY(%s)
  AND s.n_live_tup >= %s AND s.n_live_tup > 2 * greatest(c.reltuples, 0)
ORDER BY s.relname
"""


def analyze_grown_tables(using: str = DEFAULT_DB_ALIAS,
                         tables: tuple[str, ...] = RUN_PATH_TABLES) -> list[str]:
    """ANALYZE those of `tables` (the run path's) that have more than doubled since
    PostgreSQL last counted their rows (module docstring); the names of those analyzed.
    Elsewhere (SQLite checks its keys by their index, with no plan to go stale) nothing."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return []
    with connection.cursor() as cursor:
        cursor.execute(_GROWN, [list(tables), MIN_ROWS])
        grown = [name for (name,) in cursor.fetchall()]
        for name in grown:
            # Names from the models' metadata, listed above (never input).
            cursor.execute(f"ANALYZE {connection.ops.quote_name(name)}")
    if grown:
        logger.info("analyzed %s: grown since PostgreSQL last counted them",
                    ", ".join(grown))
    return grown
