from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tools_app', '0030_ingested_spans'),
    ]

    operations = [
        migrations.AddField(
            model_name='toolregistration',
            name='isolated',
            field=models.BooleanField(
                default=False,
                help_text='Python tools: run each call in a separate worker process, stopped '
                'when its timeout passes, with a memory limit and only the allowed '
                'environment variables (AGENTFORGE_ISOLATED_TOOL_*).'),
        ),
    ]
