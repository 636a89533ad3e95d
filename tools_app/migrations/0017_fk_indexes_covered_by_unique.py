"""Three foreign keys lose the index Django gives every key: a unique constraint already
leads with each (round: run, index; event: run, seq; call: round, call_index), and
serves their lookups, joins and cascades. Each was one more B-tree written by every
round, event and call a run stores (docs/benchmarks/product-path.md).

The indexes are dropped by name, not by `AlterField`'s own SQL: on SQLite that rebuilds
the whole table (copying every event of the audit log) and the rebuilt call table
would lose the triggers that keep its search index and counts (audit.triggers)."""

import django.db.models.deletion
from django.db import migrations, models

# (table, the key's column, the index Django named for it: the same on both databases)
COVERED = [
    ("tools_app_round", "run_id", "tools_app_round_run_id_4b9d6cf9"),
    ("tools_app_runevent", "run_id", "tools_app_runevent_run_id_cdee9e51"),
    ("tools_app_toolcall", "round_id", "tools_app_toolcall_round_id_9c423ccb"),
]
# The same keys as the models now declare them: (model, field, related_name, target)
KEYS = [
    ("round", "run", "rounds", "tools_app.run"),
    ("runevent", "run", "events", "tools_app.run"),
    ("toolcall", "round", "tool_calls", "tools_app.round"),
]


class Migration(migrations.Migration):

    dependencies = [
        ("tools_app", "0016_auditscale2_run_filter_stats"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(f'DROP INDEX IF EXISTS "{index}"',
                                  f'CREATE INDEX "{index}" ON "{table}" ("{column}")')
                for table, column, index in COVERED
            ],
            state_operations=[
                migrations.AlterField(
                    model_name=model_name,
                    name=name,
                    field=models.ForeignKey(db_index=False,
                                            on_delete=django.db.models.deletion.CASCADE,
                                            related_name=related_name, to=to),
                )
                for model_name, name, related_name, to in KEYS
            ],
        ),
    ]
