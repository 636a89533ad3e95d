"""The admin: endpoints, tools and error policies are edited here; the audit log is read.

Runs, rounds, tool calls, run events and policy revisions are read-only: they record
what happened, and only the engine (or a policy save) writes them. No page ever shows
an API key: endpoints store only the NAME of the environment variable holding it.

Django's admin autodiscovery imports this package; the MCP servers' admin and the
workers' heartbeats live in modules of their own (mcp.py, workers.py), imported below so
that they are registered too.
"""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import urlsplit

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.timezone import localtime
from pydantic import ValidationError as PydanticValidationError

from tools_app.runs.snapshot.access import secret_variable_problem
from tools_app.runs.snapshot.mcp import mcp_config_problems
from tools_app.runs.snapshot.parameters import default_parameter_problems
from tools_app.runs.snapshot.policy import template_problem
from tools_app.web.api.tokens import assign_new_secret

from ..engine.definitions import schema_problems
from ..engine.providers.scripted import ScriptStep
from ..models import (
    ApiToken,
    ErrorPolicy,
    ModelEndpoint,
    PolicyRevision,
    ProviderKind,
    ToolKind,
    ToolRegistration,
    env_var_validator,
)
from ..tools.importing import IMPORTABLE_KINDS, ToolImportError, import_tools
from ..tools.kinds import config_help, config_problems
from ..tools.registry import compute_version_hash, record_version, resolve_tool_function
from . import (
    mcp,  # noqa: F401  (registers the MCP servers' admin)
    workers,  # noqa: F401  (registers the workers' heartbeats)
)
from .audit import ReadOnlyAdmin
from .credentials import SECRET_HEADER_WORDS

admin.site.site_header = "AgentForge admin"
admin.site.site_title = "AgentForge admin"


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


class ToolRegistrationForm(forms.ModelForm[ToolRegistration]):
    class Meta:
        model = ToolRegistration
        fields = ("name", "kind", "python_path", "description", "json_schema", "config",
                  "return_behavior", "strict", "timeout_seconds", "requires_approval",
                  "idempotent", "enabled")
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


class ToolImportForm(forms.Form):
    """Paste or upload a JSON tools array; every tool becomes a mock or HTTP tool."""

    definitions = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 14, "cols": 100}),
        help_text="An OpenAI (Chat Completions or Responses), Anthropic or MCP tools array, "
        "or one tool. A tool may carry its own configuration under x-agentforge-config.")
    file = forms.FileField(required=False, help_text="Or upload the JSON file.")
    kind = forms.ChoiceField(choices=[(k.value, k.label) for k in IMPORTABLE_KINDS])
    config = forms.JSONField(
        required=False, initial=dict, widget=forms.Textarea(attrs={"rows": 4, "cols": 100}),
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
            cleaned["data"] = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"Not JSON: {exc}") from exc
        config = cleaned.get("config")
        if config is not None and not isinstance(config, dict):
            self.add_error("config", "Give a JSON object.")
        return cleaned


@admin.register(ToolRegistration)
class ToolRegistrationAdmin(admin.ModelAdmin[ToolRegistration]):
    form = ToolRegistrationForm
    change_list_template = "admin/tools_app/toolregistration/change_list.html"

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.import_view)
        return [path("import/", view, name="tools_app_toolregistration_import"),
                *super().get_urls()]

    def import_view(self, request: HttpRequest) -> HttpResponse:
        """Import definitions as new tools: all of them, or (listing every problem) none."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = ToolImportForm(request.POST or None, request.FILES or None)
        problems: list[tuple[str, str]] = []
        if request.method == "POST" and form.is_valid():
            try:
                created = import_tools(
                    form.cleaned_data["data"], kind=form.cleaned_data["kind"],
                    default_config=form.cleaned_data.get("config") or {},
                    secret_problem=secret_variable_problem)
            except ToolImportError as exc:
                problems = exc.problems
            else:
                self.message_user(request, f"Imported {len(created)} tools: "
                                  + ", ".join(t.name for t in created), messages.SUCCESS)
                return redirect("admin:tools_app_toolregistration_changelist")
        context = {**self.admin_site.each_context(request), "form": form,
                   "problems": problems, "title": "Import tools",
                   "opts": self.model._meta}
        return TemplateResponse(request, "admin/tools_app/toolregistration/import.html",
                                context)
    list_display = ("name", "kind", "enabled", "return_behavior", "timeout_seconds",
                    "requires_approval", "idempotent", "short_hash", "updated_at")
    list_filter = ("kind", "enabled", "return_behavior", "requires_approval", "idempotent",
                   "strict")
    search_fields = ("name", "description", "python_path")
    readonly_fields = ("version_hash", "versions_link", "created_at", "updated_at")

    @admin.display(description="versions and statistics")
    def versions_link(self, obj: ToolRegistration) -> SafeString | str:
        if obj._state.adding:  # the add page (the id is a default, so set already)
            return "-"
        count = obj.versions.count()
        return format_html('<a href="{}#versions">{} version{} on the tool page</a>',
                           reverse("tool_detail", args=[obj.name]), count,
                           "" if count == 1 else "s")

    @admin.display(description="version", ordering="version_hash")
    def short_hash(self, obj: ToolRegistration) -> str:
        return obj.version_hash[:12]

    def save_model(self, request: HttpRequest, obj: ToolRegistration, form: Any,
                   change: bool) -> None:
        super().save_model(request, obj, form, change)
        record_version(obj)  # a new registration, or an edit that changed the hash


# -- error policies --------------------------------------------------------------------

# The fields a revision records: everything an admin can edit.
POLICY_FIELDS = tuple(
    f.name for f in ErrorPolicy._meta.concrete_fields if f.editable and not f.primary_key
)


class ErrorPolicyForm(forms.ModelForm[ErrorPolicy]):
    class Meta:
        model = ErrorPolicy
        fields = POLICY_FIELDS

    def clean_arguments_error_template(self) -> str:
        return self._clean_template("arguments_error_template")

    def clean_execution_error_template(self) -> str:
        return self._clean_template("execution_error_template")

    def _clean_template(self, field: str) -> str:
        template: str = self.cleaned_data[field]
        if problem := template_problem(template):
            raise ValidationError(problem)
        return template

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        if cleaned.get("max_concurrency") is not None and cleaned.get("parallel") is False:
            self.add_error(
                "max_concurrency",
                "Only meaningful when calls run in parallel: turn parallel on or clear this.",
            )
        return cleaned


def policy_values(policy: ErrorPolicy) -> dict[str, Any]:
    return {name: getattr(policy, name) for name in POLICY_FIELDS}


def policy_changes(before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, list[Any]]:
    """field -> [old, new] for what differs; a creation (before None) records everything."""
    if before is None:
        return {name: [None, value] for name, value in after.items()}
    return {name: [before[name], value] for name, value in after.items()
            if before[name] != value}


def describe_changes(changes: dict[str, list[Any]]) -> str:
    return "; ".join(
        f"{name}: {json.dumps(old, ensure_ascii=False)} → {json.dumps(new, ensure_ascii=False)}"
        for name, (old, new) in changes.items()
    )


@admin.register(ErrorPolicy)
class ErrorPolicyAdmin(admin.ModelAdmin[ErrorPolicy]):
    form = ErrorPolicyForm
    list_display = ("name", "is_default", "arguments_error", "execution_error",
                    "hallucinated_tool", "max_round_trips", "default_tool_timeout", "parallel",
                    "max_concurrency", "provider_max_retries", "run_timeout_seconds",
                    "updated_at")
    list_filter = ("is_default", "arguments_error", "execution_error", "hallucinated_tool",
                   "parallel")
    search_fields = ("name",)
    readonly_fields = ("revision_history", "created_at", "updated_at")

    def save_model(
        self, request: HttpRequest, obj: ErrorPolicy, form: forms.ModelForm[ErrorPolicy],
        change: bool
    ) -> None:
        # The admin runs this inside a transaction: the policy, its revision and the
        # demotion of the previous default are saved together or not at all.
        before = (policy_values(ErrorPolicy.objects.select_for_update().get(pk=obj.pk))
                  if change else None)
        super().save_model(request, obj, form, change)
        user = request.user if request.user.is_authenticated else None
        if changes := policy_changes(before, policy_values(obj)):
            PolicyRevision.objects.create(policy=obj, changed_by=user, changes=changes)
        if obj.is_default:
            for other in ErrorPolicy.objects.filter(is_default=True).exclude(pk=obj.pk):
                other.is_default = False
                other.save(update_fields=["is_default", "updated_at"])
                PolicyRevision.objects.create(
                    policy=other, changed_by=user, changes={"is_default": [True, False]}
                )

    @admin.display(description="Change history")
    def revision_history(self, obj: ErrorPolicy) -> str:
        if obj.pk is None:
            return "Every save is recorded here."
        revisions = list(obj.revisions.select_related("changed_by")[:50])
        if not revisions:
            return "No changes recorded."
        rows = format_html_join(
            "", "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            ((date_format(localtime(r.changed_at), "DATETIME_FORMAT"),
              r.changed_by.get_username() if r.changed_by else "—",
              describe_changes(r.changes)) for r in revisions),
        )
        url = reverse("admin:tools_app_policyrevision_changelist") + f"?policy__id__exact={obj.pk}"
        return format_html(
            "<table><thead><tr><th>When</th><th>Who</th><th>What changed</th></tr></thead>"
            '<tbody>{}</tbody></table><p><a href="{}">All revisions of this policy</a></p>',
            rows, url,
        )


@admin.register(PolicyRevision)
class PolicyRevisionAdmin(ReadOnlyAdmin[PolicyRevision]):
    list_display = ("policy", "changed_by", "changed_at", "summary")
    list_filter = ("policy", "changed_by")
    search_fields = ("policy__name",)
    list_select_related = ("policy", "changed_by")

    @admin.display(description="what changed")
    def summary(self, obj: PolicyRevision) -> str:
        return describe_changes(obj.changes)


# -- API tokens ------------------------------------------------------------------------

# What ModelAdmin.get_fields returns: field names, or groups of names shown on one line
# (spelled out because a list[str] is not a list of that union).
FieldGroups = list[str | list[str] | tuple[str, ...]]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin[ApiToken]):
    list_display = ("name", "user", "prefix", "created_at", "last_used_at")
    list_filter = ("created_at", "last_used_at")
    search_fields = ("name", "prefix", "user__username")
    list_select_related = ("user",)

    def get_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> FieldGroups:
        if obj is None:
            return ["user", "name"]
        return ["user", "name", "prefix", "created_at", "last_used_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> list[str]:
        # Moving a token to another user would hand them a credential: issue a new one.
        return [] if obj is None else ["user", "prefix", "created_at", "last_used_at"]

    def save_model(
        self, request: HttpRequest, obj: ApiToken, form: forms.ModelForm[ApiToken], change: bool
    ) -> None:
        plaintext = None if change else assign_new_secret(obj)
        super().save_model(request, obj, form, change)
        if plaintext is not None:
            messages.success(
                request, f"Copy the token now, it will not be shown again: {plaintext}"
            )
