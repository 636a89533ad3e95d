"""Model endpoints: the form checks a scripted model's script, the model name, the key's
environment variable (its NAME, never a key) and the default parameters."""

from __future__ import annotations

import json
import os
from typing import Any

from django.contrib import admin
from django.db.models import Count, QuerySet, Sum
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from tools_app.web.registry_forms import JSON_TEXT_OVERRIDES, ModelEndpointForm, script_problems

from ..models import ModelEndpoint
from ..models.prices import format_usd

# The form and its checks live with the API's (web/registry_forms.py): one validator.
__all__ = ["ModelEndpointAdmin", "ModelEndpointForm", "script_problems"]


def _pretty_json(value: Any) -> SafeString:
    # format_html escapes: capability reports and scripts hold provider/model text.
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False))


# -- model endpoints -------------------------------------------------------------------

@admin.register(ModelEndpoint)
class ModelEndpointAdmin(admin.ModelAdmin[ModelEndpoint]):
    form = ModelEndpointForm
    formfield_overrides = JSON_TEXT_OVERRIDES
    list_display = ("name", "kind", "model", "base_url", "api_key_env", "api_key_status",
                    "stream", "runs_cost", "updated_at")
    list_filter = ("kind", "stream")
    search_fields = ("name", "model", "base_url")
    readonly_fields = ("api_key_status", "capability_report_pretty", "capability_checked_at",
                       "runs_cost", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "kind", "model", "base_url", "stream")}),
        ("Credentials", {"fields": ("api_key_env", "api_key_status", "extra_headers")}),
        ("Requests", {"fields": ("default_parameters", "proxy_url", "timeout_seconds")}),
        ("Scripted model", {"fields": ("script",)}),
        ("Capabilities", {"fields": ("capability_report_pretty", "capability_checked_at")}),
        ("Cost", {"fields": ("runs_cost",),
                  "description": "Prices are set per model under Model prices."}),
        ("Dates", {"fields": ("created_at", "updated_at")}),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[ModelEndpoint]:
        # Each endpoint's runs' cost and priced runs, in the list's one query.
        return super().get_queryset(request).annotate(
            cost_of_runs=Sum("runs__cost_usd"), priced_runs=Count("runs__cost_usd"))

    @admin.display(description="cost of its runs", ordering="cost_of_runs")
    def runs_cost(self, obj: ModelEndpoint) -> str:
        priced = getattr(obj, "priced_runs", 0)
        total = format_usd(getattr(obj, "cost_of_runs", None))
        return f"{total} ({priced} priced run{'s' if priced != 1 else ''})" if priced else total

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
