"""PostgreSQL: statistics on the runs' snapshot as text, which the `tool_version` filter
matches (`"version_hash": "<hash>"` in it). Without them the planner guesses such a
LIKE matches a handful of runs and reads and sorts every run; with them it knows a
common version is in a quarter of the runs and reads the newest runs until a page is
full (docs/benchmarks/audit.md). Nothing on SQLite, which reads the newest runs anyway."""

from django.db import migrations

CREATE = ("CREATE STATISTICS IF NOT EXISTS tools_app_run_snapshot_text "
          "ON ((snapshot)::text) FROM tools_app_run")
DROP = "DROP STATISTICS IF EXISTS tools_app_run_snapshot_text"


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)
        schema_editor.execute("ANALYZE tools_app_run")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):

    dependencies = [("tools_app", "0015_auditscale2_tool_slots")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
