"""The forms that validate the registry: tools, model endpoints and MCP servers. One
validator for every way in: the admin's pages use these forms, and so does the JSON API
(api/registry.py), which feeds them a request's JSON, so both accept and refuse the same
values with the same words. Each form also runs its model's `full_clean()` (a mock
template's placeholders, an MCP server's command or URL).

Credentials are never stored: an endpoint names the environment variable holding its
key, and headers or environment values that carry one are written `env:NAME`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from django import forms
from django.core.exceptions import ValidationError
from django.db import models
from django.utils.html import format_html_join
from django.utils.safestring import SafeString
from pydantic import ValidationError as PydanticValidationError

from tools_app.engine import json_nesting
from tools_app.engine.definitions import schema_problems
from tools_app.engine.providers.scripted import ScriptStep
from tools_app.models import (
    McpServer,
    ModelEndpoint,
    ProviderKind,
    ToolKind,
    ToolRegistration,
    env_var_validator,
)
from tools_app.runs.snapshot.access import secret_variable_problem
from tools_app.runs.snapshot.mcp import mcp_config_problems
from tools_app.runs.snapshot.parameters import default_parameter_problems
from tools_app.tools.importing import IMPORTABLE_KINDS, ToolImportError, import_tools
from tools_app.tools.kinds import config_help, config_problems
from tools_app.tools.registry import (
    PERSON_FIELDS,
    compute_version_hash,
    resolve_tool_function,
)

# Header names that carry credentials; their values must come from the environment.
SECRET_HEADER_WORDS = ("authorization", "api-key", "apikey", "token", "secret", "cookie")


# -- tools -----------------------------------------------------------------------------

def json_schema_problems(schema: Any) -> list[str]:
    """What keeps `schema` from being the JSON Schema object of a tool's arguments."""
    if not isinstance(schema, dict):
        return ["The schema must be a JSON object."]
    problems = []
    if schema.get("type") != "object":
        problems.append('Its "type" must be "object": tool arguments are always an object.')
    properties = schema.get("properties", {})
    if not isinstance(properties, dict) or not all(
        isinstance(p, dict) for p in properties.values()
    ):
        problems.append('"properties" must map each argument name to a schema object.')
        properties = {}
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        problems.append('"required" must be a list of argument names.')
    elif missing := [r for r in required if r not in properties]:
        problems.append(f'"required" names arguments missing from "properties": {missing}.')
    if not isinstance(schema.get("additionalProperties", True), bool | dict):
        problems.append('"additionalProperties" must be true, false or a schema object.')
    return problems


def json_text_formfield(db_field: models.Field[Any, Any], **kwargs: Any) -> forms.Field | None:
    """A model field's form field; a JSON one parses with json_nesting.Decoder, so text
    nested too deeply to parse is a field error ("Enter a valid JSON."), not a crash."""
    if isinstance(db_field, models.JSONField):
        kwargs.setdefault("decoder", json_nesting.Decoder)
    return db_field.formfield(**kwargs)


# The same for the admin, whose own callback replaces a form's.
JSON_TEXT_OVERRIDES: dict[type[models.Field[Any, Any]], dict[str, Any]] = {
    models.JSONField: {"decoder": json_nesting.Decoder}}


class ToolRegistrationForm(forms.ModelForm[ToolRegistration]):
    class Meta:
        formfield_callback = json_text_formfield
        model = ToolRegistration
        fields = ("name", "kind", "python_path", "description", "json_schema", "config",
                  "return_behavior", "strict", "timeout_seconds", "requires_approval",
                  "idempotent", "isolated", "enabled")
        # The admin renders help text as HTML: each line escaped, then joined by <br>.
        help_texts = {"config": format_html_join(SafeString("<br>"), "{}", (
            (line,) for line in config_help().splitlines()))}

    def clean_json_schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = self.cleaned_data["json_schema"]
        # Also what schema-only tools are validated with: the Draft 2020-12 meta-schema,
        # and no $ref out of the document.
        if problems := json_schema_problems(schema) or schema_problems(schema):
            raise ValidationError(problems)
        return schema

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        path = (cleaned.get("python_path") or "").strip()
        if cleaned.get("kind") == ToolKind.PYTHON:
            if not path:
                self.add_error("python_path", "A Python tool needs module.function.")
            else:
                try:
                    resolve_tool_function(path)
                except ValueError as exc:
                    self.add_error("python_path", str(exc))
        elif path:
            self.add_error("python_path", "Only Python tools have a Python path.")
        if cleaned.get("isolated") and cleaned.get("kind") != ToolKind.PYTHON:
            self.add_error("isolated", "Only Python tools run in an isolated worker process "
                           "(the other kinds never run code of this server).")
        kind = cleaned.get("kind")
        if kind == ToolKind.MCP:
            problems = mcp_config_problems(cleaned.get("config"))
        elif kind and "config" in cleaned:
            problems = config_problems(kind, cleaned["config"], secret_variable_problem)
        else:
            problems = []
        for problem in problems:
            self.add_error("config", problem)
        return cleaned

    def save(self, commit: bool = True) -> ToolRegistration:
        # The hash must describe what is saved, whichever field the admin changed.
        self.instance.version_hash = compute_version_hash(self.instance)
        registration: ToolRegistration = super().save(commit)
        return registration


class WritableToolForm(ToolRegistrationForm):
    """ToolRegistrationForm for the kinds a person registers by hand, HTTP and mock
    (the registry pages): Python tools come from code and MCP tools from their server's
    sync. The same checks; the kind limited to those two, no Python path and no
    isolation (which only Python tools have)."""

    class Meta(ToolRegistrationForm.Meta):
        fields: tuple[str, ...] = tuple(  # type: ignore[assignment]
            f for f in ToolRegistrationForm.Meta.fields if f not in ("python_path", "isolated"))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        kind = self.fields["kind"]
        assert isinstance(kind, forms.ChoiceField)
        kind.choices = [(k.value, k.label) for k in IMPORTABLE_KINDS]
        self.fields["json_schema"].label = "Arguments (JSON Schema)"
        self.fields["config"].label = "Configuration"


class ToolImportForm(forms.Form):
    """Paste or upload a JSON tools array; every tool becomes a mock or HTTP tool
    (tools/importing.py: all of them or none)."""

    definitions = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 14, "cols": 100}),
        help_text="An OpenAI (Chat Completions or Responses), Anthropic or MCP tools array, "
        "or one tool. A tool may carry its own configuration under x-agentforge-config.")
    file = forms.FileField(required=False, help_text="Or upload the JSON file.")
    kind = forms.ChoiceField(choices=[(k.value, k.label) for k in IMPORTABLE_KINDS])
    config = forms.JSONField(
        decoder=json_nesting.Decoder, required=False, initial=dict,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 100}),
        help_text="The configuration of tools that carry none. " + config_help())

    MAX_UPLOAD_BYTES = 2_000_000

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        upload = cleaned.get("file")
        text = cleaned.get("definitions") or ""
        if upload is not None:
            if upload.size > self.MAX_UPLOAD_BYTES:
                raise ValidationError(f"The file is larger than {self.MAX_UPLOAD_BYTES} bytes.")
            try:
                text = upload.read().decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValidationError("The file is not UTF-8 text.") from exc
        if not text.strip():
            raise ValidationError("Paste the tools JSON or upload a file.")
        try:
            cleaned["data"] = json_nesting.loads(text)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"Not JSON: {exc}") from exc
        config = cleaned.get("config")
        if config is not None and not isinstance(config, dict):
            self.add_error("config", "Give a JSON object.")
        return cleaned

    def import_tools(self) -> tuple[list[ToolRegistration], list[tuple[str, str]]]:
        """Import the valid form's tools: (the tools created, []), or ([], every problem,
        each naming its tool) with none created."""
        try:
            created = import_tools(
                self.cleaned_data["data"], kind=self.cleaned_data["kind"],
                default_config=self.cleaned_data.get("config") or {},
                secret_problem=secret_variable_problem)
        except ToolImportError as exc:
            return [], exc.problems
        return created, []


def note_person_edits(tool: ToolRegistration, changed: Iterable[str]) -> None:
    """What a person sets stays set: sync (seed_demo at every `make run`) keeps the
    fields of PERSON_FIELDS a person changed (in the admin or through the API)."""
    edited = set(changed) & set(PERSON_FIELDS)
    tool.edited_fields = sorted(set(tool.edited_fields or ()) | edited)


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
        formfield_callback = json_text_formfield
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


# -- MCP servers -----------------------------------------------------------------------

class McpServerForm(forms.ModelForm[McpServer]):
    class Meta:
        formfield_callback = json_text_formfield
        model = McpServer
        fields = ("name", "transport", "command", "args", "env", "url", "headers",
                  "tool_prefix", "startup_timeout", "call_timeout", "enabled")

    def clean_env(self) -> dict[str, str]:
        env: dict[str, str] = self.cleaned_data["env"]
        if isinstance(env, dict):
            for name, value in env.items():
                if isinstance(value, str) and value.startswith("env:"):
                    self._check_passed_on(name, value[4:])
        return env

    def clean_headers(self) -> dict[str, str]:
        headers: dict[str, str] = self.cleaned_data["headers"]
        if not isinstance(headers, dict):
            return headers  # the model's clean says what a header map looks like
        for name, value in headers.items():
            if not isinstance(value, str):
                continue
            if any(word in name.lower() for word in SECRET_HEADER_WORDS) and not (
                    value.startswith("env:") and len(value) > 4):
                raise ValidationError(
                    f"{name} carries a credential: write env:VARIABLE_NAME so the value is "
                    "read from the environment and never stored.")
            if value.startswith("env:"):
                self._check_passed_on(name, value[4:])
        return headers

    @staticmethod
    def _check_passed_on(key: str, variable: str) -> None:
        """A variable an MCP server gets must be one credentials may come from, and never
        a model endpoint's API key: provider keys are not handed to tool servers."""
        if problem := secret_variable_problem(variable):
            raise ValidationError(f"{key}: {problem}.")
        if ModelEndpoint.objects.filter(api_key_env=variable).exists():
            raise ValidationError(f"{key}: {variable} holds a model endpoint's API key, "
                                  "which is never passed on to an MCP server.")


