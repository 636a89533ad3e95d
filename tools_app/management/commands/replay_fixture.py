"""`manage.py replay_fixture FILE [--model recorded|live] [--tools live|recorded|mock]`.

Replays an exported run (docs/run-fixtures.md) in this process, with no web server, and
compares its tool calls (names, arguments) and results with the recorded ones. Exit
status: 0 they match, 1 they diverge (a readable diff is printed), 2 the file is
unusable.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandParser

from tools_app.runs.debugger.replay import MODEL_MODES, TOOLS_MODES, describe, replay_fixture
from tools_app.runs.debugger.run_files import (
    FixtureError,
    RunFixture,
    load_fixture,
    unregistered_tool_code,
)

MATCHES, DIVERGES, UNUSABLE = 0, 1, 2


class Command(BaseCommand):
    help = ("Replay an exported run and compare its tool calls and results with the "
            "recording: exit 0 if they match, 1 if they diverge, 2 if the file is unusable.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="A run exported as JSON (format agentforge-run).")
        parser.add_argument("--model", choices=MODEL_MODES, default="recorded",
                            help="recorded: answer from the recording (default); live: ask "
                                 "the endpoint the run used.")
        parser.add_argument("--tools", choices=TOOLS_MODES, default="live",
                            help="live: execute the tools (default); recorded: serve the "
                                 "recorded results; mock: recorded results, a placeholder "
                                 "for calls the recording lacks.")

    def handle(self, *args: Any, **options: Any) -> None:
        fixture = self._fixture(options["file"], options["tools"])
        try:
            outcome = replay_fixture(fixture, model=options["model"], tools=options["tools"])
        except (ImproperlyConfigured, ValueError, KeyError, TypeError) as exc:
            # Building the engine failed (a tool or key missing here, a value the engine
            # refuses): the run's own failures are part of the report instead.
            self._exit(UNUSABLE, f"{options['file']}: cannot replay: {exc}")
        report = describe(outcome, [f"model {options['model']}", f"tools {options['tools']}"])
        self.stdout.write(report)
        if not outcome.matches:
            sys.exit(DIVERGES)

    def _fixture(self, path: str, tools: str) -> RunFixture:
        try:
            fixture = load_fixture(Path(path).read_bytes())
        except OSError as exc:
            self._exit(UNUSABLE, f"{path}: cannot read it: {exc.strerror or exc}")
        except FixtureError as exc:
            self._exit(UNUSABLE, f"{path}: {exc}")
        if tools == "live" and (foreign := unregistered_tool_code(fixture.run_snapshot())):
            # A fixture may name any import path; only tools registered here may run.
            self._exit(UNUSABLE, f"{path}: tools not registered here (with the same code): "
                                 f"{', '.join(foreign)}; replay with --tools recorded or mock")
        return fixture

    def _exit(self, code: int, message: str) -> Any:
        self.stderr.write(message)
        sys.exit(code)
