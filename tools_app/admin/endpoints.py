"""Model endpoints: the form checks a scripted model's script, the model name, the key's
environment variable (its NAME, never a key) and the default parameters."""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import urlsplit

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.utils.html import format_html
from django.utils.safestring import SafeString
from pydantic import ValidationError as PydanticValidationError

from tools_app.runs.snapshot.access import secret_variable_problem
from tools_app.runs.snapshot.parameters import default_parameter_problems

from ..engine.providers.scripted import ScriptStep
from ..models import (
    ModelEndpoint,
    ProviderKind,
    env_var_validator,
)
from .credentials import SECRET_HEADER_WORDS


def _pretty_json(value: Any) -> SafeString:
    # format_html escapes: capability reports and scripts hold provider/model text.
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False))


# -- model endpoints -------------------------------------------------------------------

def script_problems(script: Any) -> list[str]:
    """Why a scripted endpoint's script would not play, one message per problem."""
    if not isinstance(script, list) or not script:
        return ['A scripted endpoint needs a list of steps, e.g. [{"text": "Hello"}].']
    problems = []
    for number, step in enumerate(script, start=1):
        try:
            ScriptStep.model_validate(step)
        except PydanticValidationError as exc:
            problems += [
                f"Step {number}: {'.'.join(map(str, e['loc'])) or 'step'}: {e['msg']}"
                for e in exc.errors()
            ]
    return problems


class ModelEndpointForm(forms.ModelForm[ModelEndpoint]):
    class Meta:
        model = ModelEndpoint
        fields = ("name", "kind", "model", "base_url", "stream", "api_key_env",
                  "extra_headers", "default_parameters", "proxy_url", "timeout_seconds",
                  "script")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Left empty, the timeout is the default (a form posted without it keeps working).
        self.fields["timeout_seconds"].required = False

    def clean_timeout_seconds(self) -> float:
        value: float | None = self.cleaned_data["timeout_seconds"]
        if value is None:
            default: float = ModelEndpoint._meta.get_field("timeout_seconds").get_default()
            return default
        return value

    def clean_base_url(self) -> str:
        url: str = self.cleaned_data["base_url"].strip()
        if not url:
            return url
        # urlsplit rather than URLValidator: that one rejects hosts without a dot, such
        # as the "ollama" of http://ollama:11434/v1 on a Docker network.
        try:
            parts = urlsplit(url)
        except ValueError:  # e.g. an unclosed IPv6 bracket
            parts = None
        if (parts is None or parts.scheme not in ("http", "https") or not parts.hostname
                or any(c.isspace() for c in url)):
            raise ValidationError("Give an http:// or https:// URL, e.g. http://localhost:11434/v1")
        if parts.username or parts.password:
            raise ValidationError(
                "No credentials in the URL: name the environment variable holding the key "
                "in 'API key environment variable'."
            )
        return url

    def clean_default_parameters(self) -> dict[str, Any]:
        value = self.cleaned_data["default_parameters"]
        if not isinstance(value, dict):
            raise ValidationError('Give a JSON object, e.g. {"temperature": 0}.')
        return value

    def clean_extra_headers(self) -> dict[str, str]:
        headers = self.cleaned_data["extra_headers"]
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise ValidationError('Give a JSON object of strings, e.g. {"X-Team": "docs"}.')
        for name, value in headers.items():
            if any(word in name.lower() for word in SECRET_HEADER_WORDS) and not (
                value.startswith("env:") and len(value) > 4
            ):
                raise ValidationError(
                    f"{name} carries a credential: write env:VARIABLE_NAME so the value is "
                    "read from the environment and never stored."
                )
            if value.startswith("env:") and (problem := secret_variable_problem(value[4:])):
                raise ValidationError(f"{name}: {problem}.")
        return headers

    def clean_api_key_env(self) -> str:
        name: str = self.cleaned_data["api_key_env"]
        _check_secret_variable(name)
        return name

    def clean_proxy_url(self) -> str:
        value: str = self.cleaned_data["proxy_url"]
        if value.startswith("env:"):
            _check_secret_variable(value[4:])
        return value

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        kind = cleaned.get("kind")
        if kind == ProviderKind.SCRIPTED:
            for problem in script_problems(cleaned.get("script")):
                self.add_error("script", problem)
        elif kind and not (cleaned.get("model") or "").strip():
            self.add_error("model", "Name the model to call, e.g. gpt-4o-mini or llama3.1.")
        # The same limits as a run's parameters (custom keys per provider, ranges).
        if kind and isinstance(defaults := cleaned.get("default_parameters"), dict):
            for problem in default_parameter_problems(kind, defaults):
                self.add_error("default_parameters", problem)
        return cleaned


def _check_secret_variable(name: str) -> None:
    """Refuse a variable outside AGENTFORGE_SECRET_ENV_ALLOW (a malformed name is left to
    the field's own validator, which says what a variable name looks like)."""
    try:
        env_var_validator(name)
    except ValidationError:
        return
    if problem := secret_variable_problem(name):
        raise ValidationError(problem[:1].upper() + problem[1:] + ".")


@admin.register(ModelEndpoint)
class ModelEndpointAdmin(admin.ModelAdmin[ModelEndpoint]):
    form = ModelEndpointForm
    list_display = ("name", "kind", "model", "base_url", "api_key_env", "api_key_status",
                    "stream", "updated_at")
    list_filter = ("kind", "stream")
    search_fields = ("name", "model", "base_url")
    readonly_fields = ("api_key_status", "capability_report_pretty", "capability_checked_at",
                       "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "kind", "model", "base_url", "stream")}),
        ("Credentials", {"fields": ("api_key_env", "api_key_status", "extra_headers")}),
        ("Requests", {"fields": ("default_parameters", "proxy_url", "timeout_seconds")}),
        ("Scripted model", {"fields": ("script",)}),
        ("Capabilities", {"fields": ("capability_report_pretty", "capability_checked_at")}),
        ("Dates", {"fields": ("created_at", "updated_at")}),
    )

    @admin.display(description="API key")
    def api_key_status(self, obj: ModelEndpoint) -> str:
        # Whether the variable is set, never its value.
        if not obj.api_key_env:
            return "none needed"
        return "set" if os.environ.get(obj.api_key_env) else "NOT SET in this environment"

    @admin.display(description="Capability report")
    def capability_report_pretty(self, obj: ModelEndpoint) -> str:
        if obj.capability_report is None:
            return "Not checked yet."
        return _pretty_json(obj.capability_report)


# -- tools -----------------------------------------------------------------------------
