"""Loop health (engine/loop/health.py): the error policy's thresholds and actions per
detector, and the run's count of LoopDetected events with a partial index for the runs
list's "loop detected" filter.

The run's column is added without rebuilding tools_app_run on SQLite: Django's SQLite
backend rebuilds a table for any NOT NULL column, which would copy every run and drop
the triggers on the table (audit.triggers). ALTER TABLE ADD COLUMN with a constant
default does the same without the copy; PostgreSQL gets Django's own ADD COLUMN.
"""

import django.core.validators
from django.db import migrations, models

from tools_app.migration_operations import AddColumnByAlterOnSqlite

RUN_COLUMN_SQLITE = ('ALTER TABLE "tools_app_run" ADD COLUMN "loop_detections" integer '
                     'unsigned NOT NULL DEFAULT 0 CHECK ("loop_detections" >= 0)')


class Migration(migrations.Migration):

    dependencies = [
        ('tools_app', '0022_toolcall_sort_indexes'),
    ]

    operations = [
        migrations.AddField(
            model_name='errorpolicy',
            name='loop_no_progress_action',
            field=models.CharField(choices=[('note', 'Note it in the timeline only'), ('tell_model', 'Tell the model it is repeating itself'), ('stop', 'Stop the run')], default='note', help_text='What happens from the threshold above on.', max_length=16, verbose_name='no progress: action'),
        ),
        migrations.AddField(
            model_name='errorpolicy',
            name='loop_no_progress_at',
            field=models.PositiveSmallIntegerField(blank=True, default=3, help_text='Flag a round when the rounds before it got the same results this many rounds running and the model calls tools again. Empty: never. A tool whose result never changes (an acknowledgement such as "Success") repeats it legitimately, so by default this is only noted.', null=True, validators=[django.core.validators.MinValueValidator(2), django.core.validators.MaxValueValidator(100)], verbose_name='no progress: flag at'),
        ),
        migrations.AddField(
            model_name='errorpolicy',
            name='loop_no_progress_stop_at',
            field=models.PositiveSmallIntegerField(blank=True, default=None, help_text="The run stops (LoopDetectedError) from this many on, before the round's calls run, whatever the action above. Empty: never.", null=True, validators=[django.core.validators.MinValueValidator(2), django.core.validators.MaxValueValidator(100)], verbose_name='no progress: stop at'),
        ),
        migrations.AddField(
            model_name='errorpolicy',
            name='loop_ping_pong_action',
            field=models.CharField(choices=[('note', 'Note it in the timeline only'), ('tell_model', 'Tell the model it is repeating itself'), ('stop', 'Stop the run')], default='tell_model', help_text='What happens from the threshold above on.', max_length=16, verbose_name='ping-pong: action'),
        ),
        migrations.AddField(
            model_name='errorpolicy',
            name='loop_ping_pong_at',
            field=models.PositiveSmallIntegerField(blank=True, default=4, help_text='Flag a round when this many rounds running alternate between the same two sets of calls (A, B, A, B, ...). Empty: never.', null=True, validators=[django.core.validators.MinValueValidator(3), django.core.validators.MaxValueValidator(100)], verbose_name='ping-pong: flag at'),
        ),
        migrations.AddField(
            model_name='errorpolicy',
            name='loop_ping_pong_stop_at',
            field=models.PositiveSmallIntegerField(blank=True, default=8, help_text="The run stops (LoopDetectedError) from this many on, before the round's calls run, whatever the action above. Empty: never.", null=True, validators=[django.core.validators.MinValueValidator(3), django.core.validators.MaxValueValidator(100)], verbose_name='ping-pong: stop at'),
        ),
        migrations.AddField(
            model_name='errorpolicy',
            name='loop_repeat_action',
            field=models.CharField(choices=[('note', 'Note it in the timeline only'), ('tell_model', 'Tell the model it is repeating itself'), ('stop', 'Stop the run')], default='tell_model', help_text='What happens from the threshold above on.', max_length=16, verbose_name='repeated calls: action'),
        ),
        migrations.AddField(
            model_name='errorpolicy',
            name='loop_repeat_at',
            field=models.PositiveSmallIntegerField(blank=True, default=3, help_text='Flag a call when the run has made the same call (same tool, same arguments) this many times, this one included. Empty: never.', null=True, validators=[django.core.validators.MinValueValidator(2), django.core.validators.MaxValueValidator(100)], verbose_name='repeated calls: flag at'),
        ),
        migrations.AddField(
            model_name='errorpolicy',
            name='loop_repeat_stop_at',
            field=models.PositiveSmallIntegerField(blank=True, default=5, help_text="The run stops (LoopDetectedError) from this many on, before the round's calls run, whatever the action above. Empty: never.", null=True, validators=[django.core.validators.MinValueValidator(2), django.core.validators.MaxValueValidator(100)], verbose_name='repeated calls: stop at'),
        ),
        AddColumnByAlterOnSqlite(
            model_name='run',
            sqlite_sql=RUN_COLUMN_SQLITE,
            name='loop_detections',
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(condition=models.Q(('loop_detections__gt', 0)), fields=['created_at', 'id'], name='run_loop_keyset'),
        ),
    ]
