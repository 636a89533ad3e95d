"""The runs list: try-it runs marked by a column (hidden by default; a partial index
holds the few there are) and the indexes of its sorts by duration and by errors.

Run.is_tryit is added without rebuilding tools_app_run on SQLite (as 0023 did: Django's
SQLite backend rebuilds a table for a NOT NULL column, which copies every run and drops
the table's triggers, audit.triggers): ALTER TABLE ADD COLUMN with a constant default.
The runs already stored are marked from their snapshots' "tryit" section.
"""

from django.db import migrations, models

from tools_app.migration_operations import AddColumnByAlterOnSqlite

import tools_app.models.sort_keys

RUN_COLUMN_SQLITE = ('ALTER TABLE "tools_app_run" ADD COLUMN "is_tryit" bool NOT NULL '
                     'DEFAULT 0')


def mark_tryit_runs(apps, schema_editor):
    run = apps.get_model("tools_app", "Run")
    run.objects.using(schema_editor.connection.alias).filter(
        snapshot__has_key="tryit").update(is_tryit=True)


class Migration(migrations.Migration):

    dependencies = [
        ('tools_app', '0023_loop_health'),
    ]

    operations = [
        AddColumnByAlterOnSqlite(
            model_name='run',
            sqlite_sql=RUN_COLUMN_SQLITE,
            name='is_tryit',
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(mark_tryit_runs, migrations.RunPython.noop, elidable=True),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(condition=models.Q(('is_tryit', True)), fields=['created_at', 'id'], name='run_tryit_keyset'),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(tools_app.models.sort_keys.DurationKey('wall_ms'), models.F('id'), name='run_duration'),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(fields=['errors_count', 'id'], name='run_errors'),
        ),
    ]
