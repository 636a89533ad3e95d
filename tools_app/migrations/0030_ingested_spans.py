# OTLP in (tools_app/ingest): received spans, each stored once, and the runs their
# traces and conversations became.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tools_app', '0026_suites'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='IngestedSpan',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('trace_id', models.CharField(max_length=32)),
                ('span_id', models.CharField(max_length=16)),
                ('start_ns', models.BigIntegerField(default=0)),
                ('data', models.JSONField(default=dict)),
                ('received_at', models.DateTimeField(auto_now_add=True)),
                ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='ingested_spans', to='tools_app.run')),
            ],
            options={
                'indexes': [models.Index(fields=['run', 'start_ns'], name='ingestedspan_run_start')],
                'constraints': [models.UniqueConstraint(fields=('trace_id', 'span_id'), name='ingestedspan_unique')],
            },
        ),
        migrations.CreateModel(
            name='IngestedRunKey',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('key', models.CharField(max_length=300)),
                ('owner', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='ingested_run_keys', to=settings.AUTH_USER_MODEL)),
                ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='ingest_keys', to='tools_app.run')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('owner', 'key'), name='ingestedrunkey_unique')],
            },
        ),
    ]
