# The calls list's sorts: by start, by duration, by tool (newest first within a tool,
# which also serves a tool's recent calls, so it replaces toolcall_tool_recent).

from django.db import migrations, models

import tools_app.models.sort_keys


class Migration(migrations.Migration):

    dependencies = [
        ('tools_app', '0021_demo_records'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='toolcall',
            name='toolcall_tool_recent',
        ),
        migrations.AddIndex(
            model_name='toolcall',
            index=models.Index(fields=['tool_name', '-id'], name='toolcall_tool_newest'),
        ),
        migrations.AddIndex(
            model_name='toolcall',
            index=models.Index(tools_app.models.sort_keys.moment_key(), models.F('id'), name='toolcall_moment'),
        ),
        migrations.AddIndex(
            model_name='toolcall',
            index=models.Index(tools_app.models.sort_keys.DurationKey(), models.F('id'), name='toolcall_duration'),
        ),
    ]
