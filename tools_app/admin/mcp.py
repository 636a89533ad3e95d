"""The MCP server admin: a server's command or URL, validated (no stored credentials,
no model endpoint's API key passed on), its synced tools with the hints the server gave,
and the "Sync tools" action."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from tools_app.runs.snapshot.access import secret_variable_problem
from tools_app.runs.snapshot.mcp import McpSyncError, annotation_words, sync_server

from ..models import McpServer, McpTransport, ModelEndpoint, ToolKind, ToolRegistration
from .credentials import SECRET_HEADER_WORDS


class McpServerForm(forms.ModelForm[McpServer]):
    class Meta:
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


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin[McpServer]):
    form = McpServerForm
    list_display = ("name", "transport", "target", "enabled", "tool_count", "last_synced_at")
    list_filter = ("transport", "enabled")
    search_fields = ("name", "command", "url")
    readonly_fields = ("synced_tools", "last_synced_at", "created_at", "updated_at")
    actions = ("sync_tools",)
    fieldsets = (
        (None, {"fields": ("name", "transport", "enabled", "tool_prefix")}),
        ("stdio", {"fields": ("command", "args", "env")}),
        ("Streamable HTTP", {"fields": ("url", "headers")}),
        ("Timeouts", {"fields": ("startup_timeout", "call_timeout")}),
        ("Tools", {"fields": ("synced_tools", "last_synced_at")}),
        ("Dates", {"fields": ("created_at", "updated_at")}),
    )

    @admin.display(description="command or URL")
    def target(self, obj: McpServer) -> str:
        if obj.transport == McpTransport.STDIO:
            return " ".join([obj.command, *obj.args])
        return obj.url

    @admin.display(description="tools")
    def tool_count(self, obj: McpServer) -> int:
        return _mcp_tools_of(obj).filter(enabled=True).count()

    @admin.display(description="registered tools")
    def synced_tools(self, obj: McpServer) -> SafeString:
        """Each registration with the hints the server gave (escaped: the server's
        words are untrusted)."""
        rows = [(reverse("admin:tools_app_toolregistration_change", args=[tool.pk]),
                 tool.name, "" if tool.enabled else " (disabled)",
                 ", ".join(annotation_words(tool.config)) or "no hints")
                for tool in _mcp_tools_of(obj)]
        if not rows:
            return format_html("{}", "None yet: select the server and run \"Sync tools\".")
        return format_html("<ul>{}</ul>", format_html_join(
            "", '<li><a href="{}">{}</a>{}: {}</li>', rows))

    # The change permission, not just view: a sync starts the server's configured command
    # (stdio) or connects to its URL, and rewrites its tool registrations.
    @admin.action(description="Sync tools (list each server's tools into registrations)",
                  permissions=["change"])
    def sync_tools(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        for server in queryset:
            try:
                report = sync_server(server)
            except McpSyncError as exc:
                self.message_user(request, f"{server.name}: sync failed: {exc}",
                                  messages.ERROR)
            else:
                self.message_user(request, report.summary(), messages.SUCCESS)


def _mcp_tools_of(server: McpServer) -> QuerySet[ToolRegistration]:
    return ToolRegistration.objects.filter(kind=ToolKind.MCP, config__server=server.name)
