"""`manage.py sync_tools`: register the @tool functions of AGENTFORGE_TOOL_MODULES."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from tools_app.tools.registry import ToolSyncError, sync_tools


class Command(BaseCommand):
    help = "Create, update or disable ToolRegistration rows to match the @tool functions."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = sync_tools()
        except ToolSyncError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"sync_tools: {report.summary()}")
        if options["verbosity"] > 1:
            for label in ("created", "updated", "disabled"):
                for name in getattr(report, label):
                    self.stdout.write(f"  {label}: {name}")
