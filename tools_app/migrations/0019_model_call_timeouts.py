"""A model endpoint's per-attempt timeout and an error policy's run deadline."""

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tools_app', '0018_worker_heartbeat'),
    ]

    operations = [
        migrations.AddField(
            model_name='modelendpoint',
            name='timeout_seconds',
            field=models.FloatField(default=120.0, help_text="Per model-call attempt: the longest wait to connect, for the first byte and between bytes (empty: 120). Each retry waits it again; the policy's run deadline bounds them all.", validators=[django.core.validators.MinValueValidator(0.1), django.core.validators.MaxValueValidator(3600)], verbose_name='timeout (seconds)'),
        ),
        migrations.AddField(
            model_name='errorpolicy',
            name='run_timeout_seconds',
            field=models.FloatField(blank=True, help_text='A run still going this long after a worker took it up fails as RunTimeout (time waiting for a person is not counted). Empty: no deadline.', null=True, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(86400)], verbose_name='run deadline (seconds)'),
        ),
    ]
