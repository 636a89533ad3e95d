"""Each assertion kind passes and fails, with the reason a person reads (expected
against actual), and reads as a sentence."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from pydantic import ValidationError

from tools_app.suites.assertions import (
    CallRecord,
    RunRecord,
    dump_assertions,
    load_assertions,
)

RUN = RunRecord(
    status="succeeded",
    calls=[CallRecord("get_weather", {"city": "Paris", "days": 3}, 0),
           CallRecord("get_time", {"zone": "CET"}, 0),
           CallRecord("get_weather", {"city": "Lima", "days": 9}, 1,
                      error_type="ToolExecutionError")],
    rounds=3, final_text="Paris is sunny, 21 °C.")

# (assertion, passes on RUN?, the reason's telling part when it fails)
CASES: list[tuple[dict[str, Any], bool, str]] = [
    ({"kind": "tool_called", "tool": "get_time"}, True, ""),
    ({"kind": "tool_called", "tool": "calculator"}, False,
     "expected calculator called at least 1 time(s), it was called 0 time(s); actual calls: "
     'get_weather({"city": "Paris", "days": 3})'),
    ({"kind": "tool_called", "tool": "get_weather", "min_times": 3}, False,
     "called 2 time(s)"),
    ({"kind": "tool_not_called", "tool": "calculator"}, True, ""),
    ({"kind": "tool_not_called", "tool": "get_time"}, False,
     "expected no call of get_time, it was called 1 time(s)"),
    ({"kind": "no_tool_called"}, False, "expected no tool calls; actual calls: get_weather("),
    ({"kind": "call_sequence", "tools": ["get_weather", "get_time", "get_weather"]}, True, ""),
    ({"kind": "call_sequence", "tools": ["get_time", "get_weather", "get_weather"]}, False,
     "expected exactly these calls, in this order: [get_time, get_weather, get_weather]; "
     "actual: [get_weather, get_time, get_weather]"),
    ({"kind": "call_sequence", "tools": ["get_weather", "get_weather"], "match": "in_order"},
     True, ""),
    ({"kind": "call_sequence", "tools": ["get_time", "get_time"], "match": "in_order"},
     False, "actual: [get_weather, get_time, get_weather]"),
    ({"kind": "call_sequence", "tools": ["get_time", "get_weather", "get_weather"],
      "match": "any_order"}, True, ""),
    ({"kind": "call_sequence", "tools": ["get_time", "get_weather"], "match": "any_order"},
     False, "exactly these calls, in any order: [get_time, get_weather]"),
    ({"kind": "call_sequence", "tools": ["get_weather", "get_time", "calculator"],
      "match": "subset"}, True, ""),
    ({"kind": "call_sequence", "tools": ["get_weather"], "match": "subset"}, False,
     "only calls among these: [get_weather]"),
    ({"kind": "call_sequence", "tools": ["get_time", "get_weather"], "match": "superset"},
     True, ""),
    ({"kind": "call_sequence", "tools": ["get_time", "get_time"], "match": "superset"},
     False, "at least these calls, in any order: [get_time, get_time]"),
    ({"kind": "arguments_match", "tool": "get_weather", "pointer": "/city",
      "check": {"kind": "equals", "value": "Lima"}}, True, ""),
    ({"kind": "arguments_match", "tool": "get_weather", "pointer": "/city", "calls": "all",
      "check": {"kind": "equals", "value": "Paris"}}, False,
     'get_weather({"city": "Lima", "days": 9}): at /city, "Lima" is not equal to "Paris"'),
    ({"kind": "arguments_match", "tool": "get_time", "pointer": "/zone",
      "check": {"kind": "regex", "pattern": "^C"}}, True, ""),
    ({"kind": "arguments_match", "tool": "get_time", "pointer": "/zone",
      "check": {"kind": "regex", "pattern": "^UTC$"}}, False,
     '"CET" does not match /^UTC$/'),
    ({"kind": "arguments_match", "tool": "get_time", "pointer": "/zone",
      "check": {"kind": "one_of", "values": ["UTC", "CET"]}}, True, ""),
    ({"kind": "arguments_match", "tool": "get_time", "pointer": "/zone",
      "check": {"kind": "one_of", "values": ["UTC", "PST"]}}, False,
     '"CET" is not one of "UTC", "PST"'),
    ({"kind": "arguments_match", "tool": "get_weather", "pointer": "/days", "calls": "all",
      "check": {"kind": "range", "min": 1, "max": 10}}, True, ""),
    ({"kind": "arguments_match", "tool": "get_weather", "pointer": "/days",
      "check": {"kind": "range", "max": 2}}, False,
     "at /days, 3 is not at most 2; get_weather"),
    ({"kind": "arguments_match", "tool": "get_weather", "pointer": "", "calls": "all",
      "check": {"kind": "schema", "schema": {"type": "object", "required": ["city"]}}},
     True, ""),
    ({"kind": "arguments_match", "tool": "get_time", "pointer": "",
      "check": {"kind": "schema", "schema": {"type": "object", "required": ["city"]}}},
     False, "fails the schema: 'city' is a required property"),
    ({"kind": "arguments_match", "tool": "get_time", "pointer": "/missing",
      "check": {"kind": "equals", "value": 1}}, False, "has no value at /missing"),
    ({"kind": "arguments_match", "tool": "calculator", "pointer": "/x",
      "check": {"kind": "equals", "value": 1}}, False, "expected a call of calculator"),
    ({"kind": "rounds_at_most", "rounds": 3}, True, ""),
    ({"kind": "rounds_at_most", "rounds": 2}, False,
     "expected at most 2 rounds, the run took 3"),
    ({"kind": "final_text_contains", "text": "SUNNY"}, True, ""),
    ({"kind": "final_text_contains", "text": "SUNNY", "case_sensitive": True}, False,
     "expected the final answer to contain 'SUNNY'; it was \"Paris is sunny, 21 °C.\""),
    ({"kind": "final_text_matches", "pattern": r"\d+ °C"}, True, ""),
    ({"kind": "final_text_matches", "pattern": r"^Lima"}, False,
     "expected the final answer to match /^Lima/"),
    ({"kind": "no_error", "error_type": "TimeoutError"}, True, ""),
    ({"kind": "no_error", "error_type": "ToolExecutionError"}, False,
     'expected no error; got ToolExecutionError in get_weather({"city": "Lima"'),
    ({"kind": "no_error"}, False, "ToolExecutionError"),
]


@pytest.mark.parametrize(("raw", "passes", "reason"), CASES,
                         ids=[f"{c[0]['kind']}-{i}" for i, c in enumerate(CASES)])
def test_each_assertion_passes_or_fails_with_its_reason(raw: dict[str, Any], passes: bool,
                                                       reason: str) -> None:
    [assertion] = load_assertions([raw])

    verdict = assertion.evaluate(RUN)

    assert verdict.passed is passes
    assert verdict.sentence == assertion.sentence()
    if passes:
        assert verdict.reason == ""
    else:
        assert reason in verdict.reason


def test_a_run_that_did_not_succeed_fails_no_error() -> None:
    [assertion] = load_assertions([{"kind": "no_error"}])
    failed = RunRecord(status="failed", error_type="ProviderError", final_text=None)

    assert assertion.evaluate(failed).reason == "expected no error; got ProviderError in the run"
    assert assertion.evaluate(RunRecord(status="cancelled")).reason == (
        "expected no error; got cancelled in the run")


@pytest.mark.parametrize(("raw", "sentence"), [
    ({"kind": "tool_called", "tool": "get_time"}, "The model calls get_time."),
    ({"kind": "tool_not_called", "tool": "delete_all"}, "The model never calls delete_all."),
    ({"kind": "no_tool_called"}, "The model calls no tool."),
    ({"kind": "call_sequence", "tools": ["a", "b"], "match": "superset"},
     "The model makes at least these calls, in any order: a, b."),
    ({"kind": "arguments_match", "tool": "get_weather", "pointer": "/city",
      "check": {"kind": "one_of", "values": ["Paris", "Lima"]}},
     'In a call of get_weather, /city is one of "Paris", "Lima".'),
    ({"kind": "arguments_match", "tool": "t", "pointer": "/n", "calls": "all",
      "check": {"kind": "range", "min": 1, "max": 5}},
     "In every call of t, /n is between 1 and 5."),
    ({"kind": "rounds_at_most", "rounds": 2}, "The run takes at most 2 model rounds."),
    ({"kind": "final_text_contains", "text": "Paris"}, 'The final answer contains "Paris".'),
    ({"kind": "no_error", "error_type": "ToolTimeoutError"}, "No ToolTimeoutError error occurs."),
])
def test_assertions_read_as_sentences(raw: dict[str, Any], sentence: str) -> None:
    assert load_assertions([raw])[0].sentence() == sentence


@pytest.mark.parametrize(("raw", "problem"), [
    ({"kind": "tool_caled", "tool": "x"}, "does not match any of the expected tags"),
    ({"kind": "arguments_match", "tool": "x", "pointer": "city",
      "check": {"kind": "equals", "value": 1}}, "not a JSON pointer"),
    ({"kind": "arguments_match", "tool": "x", "check": {"kind": "regex", "pattern": "("}},
     "not a regular expression"),
    ({"kind": "final_text_matches", "pattern": "[a-"},
     "not a regular expression: unterminated character set"),
    ({"kind": "arguments_match", "tool": "x", "check": {"kind": "range"}},
     "a range needs min, max or both"),
    ({"kind": "arguments_match", "tool": "x", "check": {"kind": "range", "min": 5, "max": 1}},
     "min (5.0) is above max (1.0)"),
    ({"kind": "arguments_match", "tool": "x", "check": {"kind": "schema",
                                                          "schema": {"type": "nope"}}},
     "not a valid JSON Schema"),
    ({"kind": "rounds_at_most", "rounds": 0}, "greater than or equal to 1"),
    ({"kind": "tool_called", "tool": "x", "extra": 1}, "Extra inputs are not permitted"),
])
def test_a_bad_assertion_is_refused_with_why(raw: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        load_assertions([raw])


@pytest.mark.parametrize(("cost", "passes", "reason"), [
    (Decimal("0.0042"), True, ""),
    (Decimal("0.0051"), False, "expected a cost of at most $0.005, the run cost $0.0051"),
    (None, False, "the run has no cost: its model has no price"),
])
def test_cost_at_most(cost: Decimal | None, passes: bool, reason: str) -> None:
    [assertion] = load_assertions([{"kind": "cost_at_most", "dollars": "0.005"}])

    verdict = assertion.evaluate(RunRecord(status="succeeded", cost_usd=cost))

    assert assertion.sentence() == "The run costs at most $0.005."
    assert verdict.passed is passes
    assert reason in verdict.reason
    assert bool(verdict.reason) is not passes


def test_assertions_round_trip_through_json() -> None:
    assertions = load_assertions([raw for raw, _, _ in CASES]
                                 + [{"kind": "cost_at_most", "dollars": "0.25"}])

    assert load_assertions(dump_assertions(assertions)) == assertions
