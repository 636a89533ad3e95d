"""Model endpoints: a provider, a model, where and how to call it (never a key)."""

from __future__ import annotations

import uuid

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from .validators import env_var_validator, proxy_url_validator


class ProviderKind(models.TextChoices):
    OPENAI = "openai", "OpenAI Chat Completions"
    ANTHROPIC = "anthropic", "Anthropic Messages"
    GEMINI = "gemini", "Google Gemini"
    OPENAI_COMPATIBLE = "openai_compatible", "OpenAI-compatible (Ollama, vLLM, ...)"
    OPENAI_RESPONSES = "openai_responses", "OpenAI Responses API"
    SCRIPTED = "scripted", "Offline scripted model"


class ModelEndpoint(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=32, choices=ProviderKind.choices)
    base_url = models.CharField(
        max_length=500, blank=True, help_text="Empty means the provider's public API."
    )
    model = models.CharField(max_length=200, blank=True)
    default_parameters = models.JSONField(
        default=dict, blank=True,
        help_text='Request defaults, e.g. {"temperature": 0, "max_output_tokens": 1024}.',
    )
    api_key_env = models.CharField(
        "API key environment variable", max_length=100, blank=True,
        validators=[env_var_validator],
        help_text="The name of the environment variable holding the key. The key itself "
        "is never stored, shown or exported.",
    )
    stream = models.BooleanField(default=False, help_text="Stream responses (SSE).")
    extra_headers = models.JSONField(default=dict, blank=True)
    proxy_url = models.CharField(
        "proxy", max_length=500, blank=True, validators=[proxy_url_validator],
        help_text="Empty: the worker's HTTPS_PROXY / HTTP_PROXY / ALL_PROXY / NO_PROXY "
        "variables decide. Otherwise http://host:port, or env:NAME to read the URL "
        "(with any credentials) from the worker's environment.",
    )
    script = models.JSONField(
        default=list, blank=True, help_text="Scripted endpoints: the list of steps to play."
    )
    timeout_seconds = models.FloatField(
        "timeout (seconds)", default=120.0,
        validators=[MinValueValidator(0.1), MaxValueValidator(3600)],
        help_text="Per model-call attempt: the longest wait to connect, for the first "
        "byte and between bytes (empty: 120). Each retry waits it again; the policy's run "
        "deadline bounds them all.",
    )
    capability_report = models.JSONField(null=True, blank=True, editable=False)
    capability_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
