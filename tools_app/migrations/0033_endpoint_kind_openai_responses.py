"""The OpenAI Responses API as an endpoint kind (openai_responses)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tools_app', '0032_model_prices'),
    ]

    operations = [
        migrations.AlterField(
            model_name='modelendpoint',
            name='kind',
            field=models.CharField(choices=[
                ('openai', 'OpenAI Chat Completions'), ('anthropic', 'Anthropic Messages'),
                ('gemini', 'Google Gemini'),
                ('openai_compatible', 'OpenAI-compatible (Ollama, vLLM, ...)'),
                ('openai_responses', 'OpenAI Responses API'),
                ('scripted', 'Offline scripted model')], max_length=32),
        ),
    ]
