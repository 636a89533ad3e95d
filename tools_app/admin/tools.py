"""Tools: registrations checked against their kind (schema, config, import path), and a
JSON tools array imported in one step."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from tools_app.web.registry_forms import (
    JSON_TEXT_OVERRIDES,
    ToolImportForm,
    ToolRegistrationForm,
    json_schema_problems,
    note_person_edits,
)

from ..models import ToolRegistration
from ..tools.registry import record_version

# The forms and their checks live with the API's and the registry pages'
# (web/registry_forms.py): one validator.
__all__ = ["ToolImportForm", "ToolRegistrationAdmin", "ToolRegistrationForm",
           "json_schema_problems"]


@admin.register(ToolRegistration)
class ToolRegistrationAdmin(admin.ModelAdmin[ToolRegistration]):
    form = ToolRegistrationForm
    formfield_overrides = JSON_TEXT_OVERRIDES
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
            created, problems = form.import_tools()
            if not problems:
                self.message_user(request, f"Imported {len(created)} tools: "
                                  + ", ".join(t.name for t in created), messages.SUCCESS)
                return redirect("admin:tools_app_toolregistration_changelist")
        context = {**self.admin_site.each_context(request), "form": form,
                   "problems": problems, "title": "Import tools",
                   "opts": self.model._meta}
        return TemplateResponse(request, "admin/tools_app/toolregistration/import.html",
                                context)
    list_display = ("name", "kind", "enabled", "return_behavior", "timeout_seconds",
                    "requires_approval", "idempotent", "isolated", "short_hash", "updated_at")
    list_filter = ("kind", "enabled", "return_behavior", "requires_approval", "idempotent",
                   "isolated", "strict")
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
        note_person_edits(obj, form.changed_data)
        super().save_model(request, obj, form, change)
        record_version(obj)  # a new registration, or an edit that changed the hash


# -- error policies --------------------------------------------------------------------

# The fields a revision records: everything an admin can edit.
