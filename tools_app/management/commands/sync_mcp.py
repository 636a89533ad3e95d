"""`manage.py sync_mcp [NAME ...]`: register the tools of MCP servers (all enabled ones
when no name is given)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tools_app.models import McpServer
from tools_app.runs.snapshot.mcp import McpSyncError, sync_server


class Command(BaseCommand):
    help = ("List the tools of MCP servers into ToolRegistration rows (created, updated, "
            "re-enabled; tools a server no longer has are disabled).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("names", nargs="*", metavar="NAME", help="MCP server names")

    def handle(self, *args: Any, **options: Any) -> None:
        names: list[str] = options["names"]
        servers = list(McpServer.objects.filter(name__in=names) if names
                       else McpServer.objects.filter(enabled=True))
        if missing := sorted(set(names) - {server.name for server in servers}):
            raise CommandError(f"No MCP server named {', '.join(missing)}")
        failures = []
        for server in servers:
            try:
                report = sync_server(server)
            except McpSyncError as exc:
                failures.append(f"{server.name}: {exc}")
                self.stderr.write(f"sync_mcp: {server.name}: sync failed: {exc}")
                continue
            self.stdout.write(f"sync_mcp: {report.summary()}")
        if failures:
            raise CommandError(f"{len(failures)} MCP server(s) could not be synced")
