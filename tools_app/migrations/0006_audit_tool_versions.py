"""Tool definition versions (ToolVersion), backfilled: each registration's current
definition, and the earlier definitions run snapshots froze (a snapshot holds every
field of the tool it used, with its hash), dated by the first run that used them.
Config values under secret-looking keys are not kept (the same rule as
tools.registry.public_config, frozen here as migrations must be)."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


FIELDS = ("name", "description", "json_schema", "kind", "python_path", "config",
          "return_behavior", "strict", "timeout_seconds", "requires_approval", "idempotent")
SECRET_KEY_WORDS = ("authorization", "api-key", "api_key", "apikey", "token", "secret",
                    "cookie", "password", "credential")


def public_config(value):
    if isinstance(value, dict):
        return {key: _public_item(str(key), item) for key, item in value.items()}
    if isinstance(value, list):
        return [public_config(item) for item in value]
    return value


def _public_item(key, item):
    secret = any(word in key.lower() for word in SECRET_KEY_WORDS)
    if secret and not (isinstance(item, str) and item.startswith("env:")):
        return "[redacted]"
    return public_config(item)


def definition(source):
    """The definition fields of a registration row or a snapshot's tool dict."""
    get = source.get if isinstance(source, dict) else lambda name: getattr(source, name)
    found = {name: get(name) for name in FIELDS}
    found["config"] = public_config(found["config"] or {})
    return found


def backfill(apps, schema_editor):
    registration = apps.get_model("tools_app", "ToolRegistration")
    version = apps.get_model("tools_app", "ToolVersion")
    run = apps.get_model("tools_app", "Run")
    rows = {str(row.pk): row for row in registration.objects.all()}
    seen = set()
    # Oldest first, so a version is dated by the first run that used it.
    for snapshot, created in (run.objects.order_by("created_at")
                              .values_list("snapshot", "created_at").iterator(chunk_size=500)):
        for tool in (snapshot or {}).get("tools", []):
            row, digest = rows.get(str(tool.get("id"))), tool.get("version_hash")
            if row is None or not digest or (row.pk, digest) in seen:
                continue
            seen.add((row.pk, digest))
            version.objects.create(registration=row, version_hash=digest,
                                   definition=definition(tool), created_at=created)
    for row in rows.values():
        if (row.pk, row.version_hash) not in seen and row.version_hash:
            version.objects.create(registration=row, version_hash=row.version_hash,
                                   definition=definition(row), created_at=row.updated_at)


class Migration(migrations.Migration):

    dependencies = [
        ('tools_app', '0005_moved_modules'),
    ]

    operations = [
        migrations.CreateModel(
            name='ToolVersion',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('version_hash', models.CharField(db_index=True, max_length=64)),
                ('definition', models.JSONField()),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('registration', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='versions', to='tools_app.toolregistration')),
            ],
            options={
                'ordering': ['-created_at', '-id'],
                'constraints': [models.UniqueConstraint(fields=('registration', 'version_hash'), name='toolversion_unique_hash')],
            },
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
