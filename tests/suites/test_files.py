"""Suites as files: YAML and JSON round trips, the stored suite and back, and a bad file
refused with the case and the field named."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools_app.models import Suite
from tools_app.suites.files import (
    SuiteFile,
    SuiteFileError,
    dump_suite_file,
    load_suite_file,
    parse_suite_text,
    save_suite_file,
    suite_file_of,
)

from .support import WEATHER_ASSERTIONS, weather_case

SUITE = SuiteFile.model_validate({
    "name": "weather", "description": "Which model asks for the weather right",
    "cases": [weather_case("paris", "Weather in Paris?"),
              {"name": "greeting", "messages": [{"role": "system", "content": "Be brief."},
                                                {"role": "user", "content": "Hi!"}],
               "tools": ["get_weather"], "tool_modes": {"get_weather": "mock"},
               "assertions": [{"kind": "no_tool_called"},
                              {"kind": "arguments_match", "tool": "t", "pointer": "",
                               "check": {"kind": "schema", "schema": {"type": "object"}}}]}]})


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_a_suite_file_round_trips(fmt: str) -> None:
    text = dump_suite_file(SUITE, fmt)  # type: ignore[arg-type]

    assert parse_suite_text(text, fmt) == SUITE  # type: ignore[arg-type]
    assert dump_suite_file(parse_suite_text(text, fmt), fmt) == text  # type: ignore[arg-type]


def test_the_yaml_reads_as_documented(tmp_path: Path) -> None:
    path = tmp_path / "weather.yaml"
    path.write_text(dump_suite_file(SUITE), encoding="utf-8")

    text = path.read_text(encoding="utf-8")
    assert "kind: call_sequence" in text
    assert "pointer: /city" in text
    assert load_suite_file(path) == SUITE


def test_a_stored_suite_is_the_file_again(db: None) -> None:
    suite = save_suite_file(SUITE)

    assert suite_file_of(suite) == SUITE
    again = save_suite_file(SUITE.model_copy(update={"cases": SUITE.cases[:1]}))
    assert again.pk == suite.pk
    assert [c.name for c in again.cases.all()] == ["paris"]
    assert Suite.objects.count() == 1


@pytest.mark.parametrize(("text", "message"), [
    ("name: s\ncases:\n  - name: paris\n    messages: []\n",
     "case 'paris' (cases[0]), field messages: List should have at least 1 item"),
    ("name: s\ncases:\n  - name: paris\n    messages: [{role: robot, content: hi}]\n",
     "case 'paris' (cases[0]), field messages: Value error, messages[0]: role must be one of"),
    ("name: s\ncases:\n  - name: ok\n    messages: [{role: user, content: hi}]\n"
     "  - name: paris\n    messages: [{role: user, content: hi}]\n"
     "    assertions: [{kind: arguments_match, tool: t, pointer: /a,"
     " check: {kind: regex, pattern: '('}}]\n",
     "case 'paris' (cases[1]), field assertions[0].check.pattern: Value error, not a "
     "regular expression"),
    ("name: s\ncases:\n  - name: paris\n    messages: [{role: user, content: hi}]\n"
     "    assertions: [{kind: tool_caled, tool: t}]\n",
     "case 'paris' (cases[0]), field assertions[0]: Input tag 'tool_caled' found using"),
    ("name: s\ncases:\n  - name: paris\n    messages: [{role: user, content: hi}]\n"
     "    tool_modes: {get_weather: sometimes}\n",
     "case 'paris' (cases[0]), field tool_modes.get_weather: Input should be 'recorded', "
     "'live' or 'mock'"),
    ("name: s\ncases:\n  - messages: [{role: user, content: hi}]\n",
     "cases[0], field name: Field required"),
    ("name: s\ncases:\n  - name: a\n    messages: [{role: user, content: hi}]\n"
     "  - name: a\n    messages: [{role: user, content: hi}]\n",
     "two cases are named 'a'"),
    ("cases: []\n", "field name: Field required"),
    ("name: s\ncases: [\n", "the suite file is not valid YAML"),
    ("[" * 5000 + "]" * 5000, "the suite file is not valid YAML: nested too deeply"),
    ("- just a list\n", "the suite file must hold one object"),
])
def test_a_bad_file_is_refused_naming_the_case_and_the_field(text: str, message: str) -> None:
    with pytest.raises(SuiteFileError) as caught:
        parse_suite_text(text, "yaml")
    assert message in str(caught.value)


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(SuiteFileError, match=r"cannot read the suite file .*nope\.json"):
        load_suite_file(tmp_path / "nope.json")


def test_a_case_assertions_keep_their_order_and_values(db: None) -> None:
    suite = save_suite_file(SUITE)
    stored = suite.cases.get(name="paris").assertions

    assert [a["kind"] for a in stored] == [a["kind"] for a in WEATHER_ASSERTIONS]
