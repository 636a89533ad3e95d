"""`manage.py run_suite`: exit 0 when every cell meets its bar, 1 when one does not (with
what failed printed), 2 for a file or configuration it cannot use; its JUnit XML is
read back with junitparser, as CI systems read it."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from junitparser import Failure, JUnitXml

from tools_app.models import ModelEndpoint, Run, SuiteRun
from tools_app.suites import runner
from tools_app.suites.files import SuiteFile, dump_suite_file

from .support import execute_inline, sloppy_passes, weather_case

pytestmark = pytest.mark.both

QUESTION = "Weather in Paris?"


@pytest.fixture(autouse=True)
def runs_execute_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs the command starts are executed in this process (no worker in tests)."""
    monkeypatch.setattr(runner, "wait_for_a_finished_run", execute_inline)


@pytest.fixture
def suite_file(tmp_path: Path) -> Path:
    path = tmp_path / "weather.yaml"
    path.write_text(dump_suite_file(SuiteFile.model_validate(
        {"name": "weather", "cases": [weather_case("paris", QUESTION)]})), encoding="utf-8")
    return path


def run_suite(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("run_suite", *args, stdout=out, stderr=err)
    except SystemExit as exit_:
        return int(exit_.code or 0), out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def test_every_cell_meeting_its_bar_exits_0_with_a_valid_junit_file(
        suite_world: dict[str, ModelEndpoint], suite_file: Path, tmp_path: Path) -> None:
    junit = tmp_path / "report.xml"

    status, out, _ = run_suite(str(suite_file), "--endpoint", "good", "--repeat", "3",
                               "--junit", str(junit))

    assert status == 0, out
    assert "PASS paris on good: 3/3 100%" in out
    assert "Suite weather passed" in out
    xml = JUnitXml.fromfile(str(junit))
    [suite] = list(xml)
    assert (suite.name, suite.tests, suite.failures, suite.errors) == (
        "weather on good", 1, 0, 0)
    [case] = list(suite)
    assert (case.name, case.classname, case.is_passed) == ("paris", "weather.good", True)


def test_a_cell_below_its_bar_exits_1_and_prints_expected_against_actual(
        suite_world: dict[str, ModelEndpoint], suite_file: Path, tmp_path: Path) -> None:
    junit = tmp_path / "report.xml"

    status, out, _ = run_suite(str(suite_file), "--endpoint", "good", "--endpoint", "bad",
                               "--repeat", "2", "--junit", str(junit))

    assert status == 1
    assert "PASS paris on good: 2/2 100%" in out
    assert "FAIL paris on bad: 0/2 passed (0%, needs 100%)" in out
    assert ("In a call of get_weather, /city is equal to \"Paris\".\n"
            "    get_weather({\"city\": \"Lima\"}): at /city, \"Lima\" is not equal to "
            "\"Paris\"") in out
    assert "expected exactly these calls, in this order" not in out  # the sequence held
    suites = {s.name: s for s in JUnitXml.fromfile(str(junit))}
    assert suites["weather on bad"].failures == 1
    [case] = list(suites["weather on bad"])
    [failure] = case.result
    assert isinstance(failure, Failure)
    assert failure.message == "0/2 runs passed (0%), the bar is 100%"
    assert '"Lima" is not equal to "Paris"' in (failure.text or "")


def test_the_pass_rate_bar_decides_for_a_flaky_cell(
        suite_world: dict[str, ModelEndpoint], suite_file: Path) -> None:
    repeat = 5
    passes = sloppy_passes(QUESTION, repeat)
    assert 0 < passes < repeat  # the seed makes this cell flaky: the test means it

    lenient, out, _ = run_suite(str(suite_file), "--endpoint", "sloppy", "--repeat",
                                str(repeat), "--min-pass-rate", str(passes / repeat))

    assert lenient == 0, out
    assert "(flaky)" in out


@pytest.mark.parametrize(("args", "message"), [
    (["missing-suite", "--endpoint", "good"], "no suite named 'missing-suite'"),
    (["{file}"], "name at least one endpoint with --endpoint"),
    (["{file}", "--endpoint", "nope"], "no endpoint named 'nope'"),
    (["{file}", "--endpoint", "good", "--repeat", "0"], "repeat: Input should be greater"),
    (["{file}", "--endpoint", "good", "--min-pass-rate", "2"], "min_pass_rate"),
    (["{bad_file}", "--endpoint", "good"],
     "case 'paris' (cases[0]), field assertions[0]"),
    (["{tmp}/absent.yaml", "--endpoint", "good"], "cannot read the suite file"),
])
def test_a_file_or_configuration_it_cannot_use_exits_2(
        suite_world: dict[str, ModelEndpoint], suite_file: Path, tmp_path: Path,
        args: list[str], message: str) -> None:
    bad_file = tmp_path / "bad.yaml"
    bad_file.write_text("name: s\ncases:\n  - name: paris\n    messages: [{role: user, "
                        "content: hi}]\n    assertions: [{kind: nope}]\n", encoding="utf-8")
    values: dict[str, Any] = {"file": suite_file, "bad_file": bad_file, "tmp": tmp_path}

    status, out, err = run_suite(*(a.format(**values) for a in args))

    assert status == 2, out
    assert message in err
    assert not Run.objects.exists()
    assert not SuiteRun.objects.exists()
