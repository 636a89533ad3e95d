"""`manage.py run_suite NAME|FILE --endpoint NAME [--endpoint ...] [--repeat N]
[--tools live|recorded|mock] [--concurrency N] [--junit FILE] [--min-pass-rate R]`.

Runs a test suite (a stored suite by name, or a suite file, docs/suites.md, which is
stored first under its name) on the endpoints, each case repeated, and waits for it.
Exit status: 0 every cell meets its pass-rate bar, 1 one does not (what failed is
printed: each failing assertion, expected against actual), 2 the file or the
configuration cannot be used. The runs execute on the task backend: in the embedded
configuration in this process, in the scale-out one on the db_workers.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandParser

from tools_app.models import Suite, SuiteRun
from tools_app.runs.debugger.replay import TOOLS_MODES
from tools_app.suites import runner
from tools_app.suites.files import SuiteFileError, load_suite_file, save_suite_file
from tools_app.suites.junit import write_junit
from tools_app.suites.matrix import SuiteMatrix, failure_report, percent, suite_matrix

PASSED, FAILED, UNUSABLE = 0, 1, 2
SUITE_FILE_SUFFIXES = (".yaml", ".yml", ".json")


class Command(BaseCommand):
    help = ("Run a test suite on endpoints: exit 0 if every cell meets its pass-rate bar, "
            "1 if one does not, 2 if the file or configuration cannot be used.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("suite", help="A stored suite's name, or a suite file "
                                          "(.yaml, .yml, .json).")
        parser.add_argument("--endpoint", action="append", default=[], dest="endpoints",
                            help="An endpoint's name; repeat for a matrix of endpoints.")
        parser.add_argument("--repeat", type=int, default=1,
                            help="Runs per case and endpoint (default 1).")
        parser.add_argument("--tools", choices=TOOLS_MODES, default=None,
                            help="One mode for every tool (default: per tool, read-only "
                                 "tools live and destructive ones mocked).")
        parser.add_argument("--concurrency", type=int, default=4,
                            help="Runs at once (default 4).")
        parser.add_argument("--min-pass-rate", type=float, default=1.0,
                            help="The share of a cell's runs that must pass (default 1).")
        parser.add_argument("--junit", default=None, help="Write a JUnit XML report here.")

    def handle(self, *args: Any, **options: Any) -> None:
        suite = self._suite(options["suite"])
        config = {"endpoints": options["endpoints"], "repeat": options["repeat"],
                  "tools": options["tools"], "concurrency": options["concurrency"],
                  "min_pass_rate": options["min_pass_rate"]}
        if not options["endpoints"]:
            self._exit(UNUSABLE, "name at least one endpoint with --endpoint")
        try:
            suite_run = runner.suite_run_start(suite=suite, config=config)
        except runner.SuiteConfigError as exc:
            self._exit(UNUSABLE, f"cannot run the suite {suite.name!r}: {exc}")
        matrix = suite_matrix(runner.drive(suite_run))
        if options["junit"]:
            write_junit(matrix, options["junit"])
        self._report(suite_run, matrix)
        if not matrix.passed:
            sys.exit(FAILED)

    def _suite(self, name_or_file: str) -> Suite:
        path = Path(name_or_file)
        if name_or_file.endswith(SUITE_FILE_SUFFIXES):
            try:
                return save_suite_file(load_suite_file(path))
            except SuiteFileError as exc:
                self._exit(UNUSABLE, f"{name_or_file}: {exc}")
        suite = Suite.objects.filter(name=name_or_file).first()
        if suite is None:
            self._exit(UNUSABLE, f"no suite named {name_or_file!r} and no such suite file")
        return suite

    def _report(self, suite_run: SuiteRun, matrix: SuiteMatrix) -> None:
        for cell in matrix.cells.values():
            mark = "PASS" if cell.meets_bar else "FAIL"
            flaky = " (flaky)" if cell.flaky else ""
            self.stdout.write(f"{mark} {cell.case_name} on {cell.endpoint_name}: "
                              f"{cell.passed}/{cell.evaluated} {percent(cell.pass_rate)}{flaky}")
        for line in failure_report(matrix):
            self.stdout.write(line)
        verdict = "passed" if matrix.passed else "failed"
        self.stdout.write(f"Suite {suite_run.suite.name} {verdict} (suite run {suite_run.pk})")

    def _exit(self, status: int, message: str) -> NoReturn:
        self.stderr.write(message)
        sys.exit(status)
