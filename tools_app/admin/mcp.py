"""The MCP server admin: a server's command or URL, validated (no stored credentials,
no model endpoint's API key passed on), its synced tools with the hints the server gave,
and the "Sync tools" action."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from tools_app.runs.snapshot.mcp import McpSyncError, annotation_words, sync_server
from tools_app.web.registry_forms import JSON_TEXT_OVERRIDES, McpServerForm

from ..models import McpServer, McpTransport, ToolKind, ToolRegistration

# The form lives with the API's (web/registry_forms.py): one validator.
__all__ = ["McpServerAdmin", "McpServerForm"]


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin[McpServer]):
    form = McpServerForm
    formfield_overrides = JSON_TEXT_OVERRIDES
    list_display = ("name", "transport", "target", "enabled", "tool_count", "last_synced_at")
    list_filter = ("transport", "enabled")
    search_fields = ("name", "command", "url")
    readonly_fields = ("synced_tools", "last_synced_at", "last_sync_report", "created_at",
                       "updated_at")
    actions = ("sync_tools",)
    fieldsets = (
        (None, {"fields": ("name", "transport", "enabled", "tool_prefix")}),
        ("stdio", {"fields": ("command", "args", "env")}),
        ("Streamable HTTP", {"fields": ("url", "headers")}),
        ("Timeouts", {"fields": ("startup_timeout", "call_timeout")}),
        ("Tools", {"fields": ("synced_tools", "last_synced_at", "last_sync_report")}),
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

    @admin.display(description="last sync")
    def last_sync_report(self, obj: McpServer) -> SafeString | str:
        """Whether the last sync worked (its reason if not), and the registry page that
        shows what it listed and its JSON-RPC log."""
        if obj._state.adding:
            return "-"
        last = obj.last_sync or {}
        outcome = ("never" if not last else "ok" if last.get("ok")
                   else f"failed: {last.get('error', '')}")
        return format_html('{} · <a href="{}">resources, prompts and JSON-RPC log</a>',
                           outcome, reverse("mcp_server_detail", args=[obj.pk]))

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
