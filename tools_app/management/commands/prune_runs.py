"""`manage.py prune_runs --older-than 30d [--keep-failed]`: retention for the audit log."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tools_app.runs.store.retention import AgeError, parse_age, prune_runs


def positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


class Command(BaseCommand):
    help = ("Delete finished runs (succeeded, failed, cancelled) that ended longer ago than "
            "--older-than, with their rounds, tool calls and events, in batches. Runs in "
            "progress are never touched.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than", required=True,
                            help="an age: 30d, 12h or 90m (days, hours, minutes)")
        parser.add_argument("--keep-failed", action="store_true",
                            help="keep failed runs whatever their age")
        parser.add_argument("--batch-size", type=positive_int, default=200,
                            help="runs deleted per transaction (default 200)")
        parser.add_argument("--dry-run", action="store_true",
                            help="only count what would be deleted")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            age = parse_age(options["older_than"])
        except AgeError as exc:
            raise CommandError(f"--older-than: {exc}") from exc
        report = prune_runs(age, keep_failed=options["keep_failed"],
                            batch_size=options["batch_size"], dry_run=options["dry_run"])
        self.stdout.write(str(report))
