"""The heartbeat row of each db_worker process (tools_app.models.WorkerHeartbeat)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tools_app', '0017_fk_indexes_covered_by_unique'),
    ]

    operations = [
        migrations.CreateModel(
            name='WorkerHeartbeat',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('worker_id', models.CharField(max_length=64, unique=True)),
                ('hostname', models.CharField(max_length=255)),
                ('pid', models.PositiveIntegerField()),
                ('concurrency', models.PositiveIntegerField()),
                ('running', models.PositiveIntegerField(default=0, help_text='tasks in progress')),
                ('claimed', models.PositiveBigIntegerField(default=0, help_text='tasks claimed since start')),
                ('started_at', models.DateTimeField()),
                ('last_seen_at', models.DateTimeField(db_index=True)),
                ('last_claimed_at', models.DateTimeField(blank=True, null=True)),
                ('stopped_at', models.DateTimeField(blank=True, null=True)),
            ],
        ),
    ]
