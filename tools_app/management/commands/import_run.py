"""`manage.py import_run FILE [--user USERNAME]`: load an exported run (docs/run-fixtures.md)
as a finished run, with its rounds, calls and events, to inspect on its timeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tools_app.runs.debugger.run_files import FixtureError, import_fixture, load_fixture


class Command(BaseCommand):
    help = "Import an exported run as a finished run and print its id and page."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="A run exported as JSON (format agentforge-run).")
        parser.add_argument("--user", default=None,
                            help="Who imports the run and owns it; its page says \"Imported "
                                 "by\" them (without it: \"Imported from a file\", and only "
                                 "staff see the run).")

    def handle(self, *args: Any, **options: Any) -> None:
        user = self._user(options["user"]) if options["user"] else None
        path = options["file"]
        try:
            fixture = load_fixture(Path(path).read_bytes())
        except OSError as exc:
            raise CommandError(f"{path}: cannot read it: {exc.strerror or exc}",
                               returncode=2) from exc
        except FixtureError as exc:
            raise CommandError(f"{path}: {exc}", returncode=2) from exc
        run = import_fixture(fixture, user=user)
        self.stdout.write(f"Imported run {run.pk} ({run.status}, {run.rounds_count} rounds, "
                          f"{run.tool_calls_count} tool calls): /runs/{run.pk}/")

    def _user(self, username: str) -> Any:
        user_model = get_user_model()
        try:
            return user_model.objects.get_by_natural_key(username)
        except user_model.DoesNotExist:
            raise CommandError(f"No user named {username!r}", returncode=2) from None
