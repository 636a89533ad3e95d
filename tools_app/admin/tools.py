"""Tools: registrations checked against their kind (schema, config, import path), and a
JSON tools array imported in one step."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from tools_app.runs.snapshot.access import secret_variable_problem
from tools_app.runs.snapshot.mcp import mcp_config_problems

from ..engine.definitions import schema_problems
from ..models import (
    ToolKind,
    ToolRegistration,
)
from ..tools.importing import IMPORTABLE_KINDS, ToolImportError, import_tools
from ..tools.kinds import config_help, config_problems
from ..tools.registry import (
    PERSON_FIELDS,
    compute_version_hash,
    record_version,
    resolve_tool_function,
)


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
        # What a person sets here stays set: sync (seed_demo at every `make run`) keeps it.
        changed = set(form.changed_data) & set(PERSON_FIELDS)
        obj.edited_fields = sorted(set(obj.edited_fields or ()) | changed)
        super().save_model(request, obj, form, change)
        record_version(obj)  # a new registration, or an edit that changed the hash


# -- error policies --------------------------------------------------------------------

# The fields a revision records: everything an admin can edit.
