"""`manage.py import_tools FILE [--kind mock|http] [--config JSON]`: register the tools
of a JSON tools array (OpenAI, Anthropic or MCP shapes) as mock or HTTP tools; all of
them or, if any has a problem, none (every problem is listed)."""

from __future__ import annotations

import json
import sys
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from tools_app.engine import json_nesting
from tools_app.runs.snapshot.access import secret_variable_problem
from tools_app.tools.importing import IMPORTABLE_KINDS, ToolImportError, import_tools


class Command(BaseCommand):
    help = ("Import a JSON tools array (OpenAI, Anthropic or MCP shapes) as mock or HTTP "
            "tools. A tool may carry its own configuration under x-agentforge-config.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("file", help="the JSON file, or - for standard input")
        parser.add_argument("--kind", choices=[str(k) for k in IMPORTABLE_KINDS],
                            default="mock", help="the kind of the new tools (default mock)")
        parser.add_argument("--config", default="{}",
                            help="the JSON configuration of tools that carry none")

    def handle(self, *args: Any, **options: Any) -> None:
        data = _json(_read(options["file"]), options["file"])
        config = _json(options["config"], "--config")
        if not isinstance(config, dict):
            raise CommandError("--config must be a JSON object")
        try:
            created = import_tools(data, kind=options["kind"], default_config=config,
                                   secret_problem=secret_variable_problem)
        except ToolImportError as exc:
            lines = "\n".join(f"  {tool}: {reason}" for tool, reason in exc.problems)
            raise CommandError(f"nothing imported:\n{lines}") from exc
        self.stdout.write(f"import_tools: created {len(created)} {options['kind']} tools: "
                          + ", ".join(tool.name for tool in created))


def _read(file: str) -> str:
    if file == "-":
        return sys.stdin.read()
    try:
        return Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"cannot read {file}: {exc}") from exc


def _json(text: str, source: str) -> Any:
    try:
        return json_nesting.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{source} is not JSON: {exc}") from exc
