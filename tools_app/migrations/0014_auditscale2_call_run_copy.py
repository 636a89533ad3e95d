"""The audit log at scale, second pass (docs/benchmarks/audit.md): each tool call keeps its
run's creation time and creator (`run_created_at`, `run_owner_id`, maintained by
database triggers: `tools_app.audit.triggers`), indexed, so the calls list's since /
until and an ordinary user's calls need no join; the columns are filled for the calls
already stored with one UPDATE (bounded memory at any size) before their indexes are
built. Partial indexes for the runs filters on their calls (`has_errors`,
`error_type`): one probe per run."""

from django.db import migrations, models


def create(apps, schema_editor):
    from tools_app.audit.triggers import create_run_copy_triggers

    create_run_copy_triggers(schema_editor.connection)


def drop(apps, schema_editor):
    from tools_app.audit.triggers import drop_run_copy_triggers

    drop_run_copy_triggers(schema_editor.connection)


class Migration(migrations.Migration):

    dependencies = [("tools_app", "0013_auditscale_more_indexes")]

    operations = [
        migrations.AddField(
            model_name="toolcall",
            name="run_created_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="toolcall",
            name="run_owner_id",
            field=models.BigIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.RunPython(create, drop, elidable=False),
        migrations.AddIndex(
            model_name="toolcall",
            index=models.Index(fields=["run_created_at", "id"], name="toolcall_run_created"),
        ),
        migrations.AddIndex(
            model_name="toolcall",
            index=models.Index(fields=["run_owner_id", "id"], name="toolcall_owner_recent"),
        ),
        migrations.AddIndex(
            model_name="toolcall",
            index=models.Index(fields=["run_owner_id", "run_created_at"],
                               name="toolcall_owner_created"),
        ),
        migrations.AddIndex(
            model_name="toolcall",
            index=models.Index(fields=["tool_name", "run_owner_id", "duration_ms"],
                               name="toolcall_tool_owner"),
        ),
        migrations.AddIndex(
            model_name="toolcall",
            index=models.Index(condition=models.Q(("is_error", True)), fields=["run"],
                               name="toolcall_run_erring"),
        ),
        migrations.AddIndex(
            model_name="toolcall",
            index=models.Index(condition=models.Q(("error_type", ""), _negated=True),
                               fields=["run", "error_type"], name="toolcall_run_error_type"),
        ),
    ]
