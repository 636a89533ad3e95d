# OTLP in (tools_app/ingest): a received run's layout (which rows stand for which spans)
# and the digest of what its snapshot was built from, beside its snapshot; the index a
# rebuild reads its spans' keys from.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tools_app', '0035_trace_export_status'),
    ]

    operations = [
        migrations.CreateModel(
            name='IngestedLayout',
            fields=[
                ('run', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='ingested_layout', serialize=False, to='tools_app.run')),
                ('rows', models.JSONField(default=list)),
                ('snapshot_digest', models.CharField(blank=True, default='', max_length=32)),
            ],
        ),
        migrations.RemoveIndex(
            model_name='ingestedspan',
            name='ingestedspan_run_start',
        ),
        migrations.AddIndex(
            model_name='ingestedspan',
            index=models.Index(fields=['run', 'start_ns', 'trace_id', 'span_id', 'received_at', 'id'], name='ingestedspan_run_rows'),
        ),
    ]
