"""What a case asserts about a finished run, as a typed union (`Assertion`, discriminated
by `kind`). Each assertion reads as a sentence (`sentence()`, shown in the UI) and is
checked against a `RunRecord` (the stored run's rounds and calls, read by
`suites.evaluation`) by `evaluate()`, which returns a `Verdict` with a specific reason:
what was expected against what happened.

Arguments are checked at an RFC 6901 JSON pointer (the `jsonpointer` library) with one
of the `ArgumentCheck` kinds (`argument_checks`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Annotated, Any, Literal, get_args

from jsonpointer import JsonPointer, JsonPointerException
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from .argument_checks import ArgumentCheck, RegexPattern, shown

_MISSING = object()


@dataclass(frozen=True)
class CallRecord:
    name: str
    arguments: Any
    """The parsed arguments (None when the model's were not valid JSON)."""
    round_index: int
    error_type: str = ""

    def describe(self) -> str:
        shown = json.dumps(self.arguments, ensure_ascii=False, sort_keys=True)
        return f"{self.name}({shown if len(shown) <= 80 else shown[:77] + '...'})"


@dataclass(frozen=True)
class RunRecord:
    """What a finished run did, as the assertions read it."""

    status: str
    calls: list[CallRecord] = field(default_factory=list)
    rounds: int = 0
    final_text: str | None = None
    error_type: str = ""
    error_message: str = ""
    cost_usd: Decimal | None = None
    """What the run cost in dollars; None when its model has no price."""

    def names(self) -> list[str]:
        return [c.name for c in self.calls]

    def describe_calls(self) -> str:
        return ", ".join(c.describe() for c in self.calls) if self.calls else "no tool calls"


@dataclass(frozen=True)
class Verdict:
    passed: bool
    sentence: str
    reason: str = ""


class _Assertion(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def sentence(self) -> str:
        raise NotImplementedError

    def evaluate(self, record: RunRecord) -> Verdict:
        problem = self.problem(record)
        return Verdict(passed=problem is None, sentence=self.sentence(), reason=problem or "")

    def problem(self, record: RunRecord) -> str | None:
        """None when the run satisfies the assertion, else why it does not."""
        raise NotImplementedError


def _names(names: list[str] | tuple[str, ...]) -> str:
    return ", ".join(names) if names else "none"


class ToolCalled(_Assertion):
    kind: Literal["tool_called"] = "tool_called"
    tool: str = Field(min_length=1)
    min_times: int = Field(default=1, ge=1)

    def sentence(self) -> str:
        times = "" if self.min_times == 1 else f" at least {self.min_times} times"
        return f"The model calls {self.tool}{times}."

    def problem(self, record: RunRecord) -> str | None:
        count = record.names().count(self.tool)
        if count >= self.min_times:
            return None
        return (f"expected {self.tool} called at least {self.min_times} time(s), it was "
                f"called {count} time(s); actual calls: {record.describe_calls()}")


class ToolNotCalled(_Assertion):
    kind: Literal["tool_not_called"] = "tool_not_called"
    tool: str = Field(min_length=1)

    def sentence(self) -> str:
        return f"The model never calls {self.tool}."

    def problem(self, record: RunRecord) -> str | None:
        count = record.names().count(self.tool)
        if not count:
            return None
        return f"expected no call of {self.tool}, it was called {count} time(s)"


class NoToolCalled(_Assertion):
    kind: Literal["no_tool_called"] = "no_tool_called"

    def sentence(self) -> str:
        return "The model calls no tool."

    def problem(self, record: RunRecord) -> str | None:
        if not record.calls:
            return None
        return f"expected no tool calls; actual calls: {record.describe_calls()}"


SequenceMatch = Literal["exact", "in_order", "any_order", "subset", "superset"]
_SEQUENCE_WORDS: dict[SequenceMatch, str] = {
    "exact": "exactly these calls, in this order",
    "in_order": "these calls in this order (others may come between)",
    "any_order": "exactly these calls, in any order",
    "subset": "only calls among these",
    "superset": "at least these calls, in any order",
}


class CallSequence(_Assertion):
    kind: Literal["call_sequence"] = "call_sequence"
    tools: tuple[str, ...]
    match: SequenceMatch = "exact"

    def sentence(self) -> str:
        return f"The model makes {_SEQUENCE_WORDS[self.match]}: {_names(self.tools)}."

    def problem(self, record: RunRecord) -> str | None:
        actual = record.names()
        if _sequence_matches(self.match, list(self.tools), actual):
            return None
        return (f"expected {_SEQUENCE_WORDS[self.match]}: [{_names(self.tools)}]; "
                f"actual: [{_names(actual)}]")


def _sequence_matches(match: SequenceMatch, expected: list[str], actual: list[str]) -> bool:
    if match == "exact":
        return actual == expected
    if match == "any_order":
        return Counter(actual) == Counter(expected)
    if match == "subset":
        return set(actual) <= set(expected)
    if match == "superset":
        return not Counter(expected) - Counter(actual)
    remaining = iter(actual)  # in order: expected is a subsequence of actual
    return all(name in remaining for name in expected)


# -- arguments ---------------------------------------------------------------------------


class ArgumentsMatch(_Assertion):
    """The value at `pointer` in a call of `tool`'s arguments passes `check`: in some call
    (`calls: any`, the default) or in every call of the tool (`calls: all`)."""

    kind: Literal["arguments_match"] = "arguments_match"
    tool: str = Field(min_length=1)
    pointer: str = ""
    check: ArgumentCheck
    calls: Literal["any", "all"] = "any"

    @field_validator("pointer")
    @classmethod
    def _valid_pointer(cls, pointer: str) -> str:
        try:
            JsonPointer(pointer)
        except JsonPointerException as exc:
            raise ValueError(f"not a JSON pointer ({exc}): write it as /city or /items/0"
                             ) from exc
        return pointer

    def sentence(self) -> str:
        where = f"{self.pointer} is" if self.pointer else "the arguments are"
        which = "every call" if self.calls == "all" else "a call"
        return f"In {which} of {self.tool}, {where} {self.check.words()}."

    def problem(self, record: RunRecord) -> str | None:
        calls = [c for c in record.calls if c.name == self.tool]
        if not calls:
            return (f"expected a call of {self.tool}; actual calls: "
                    f"{record.describe_calls()}")
        problems = [self._call_problem(c) for c in calls]
        failing = [p for p in problems if p is not None]
        if self.calls == "all" and failing:
            return "; ".join(failing)
        if self.calls == "any" and len(failing) == len(calls):
            return "; ".join(failing)
        return None

    def _call_problem(self, call: CallRecord) -> str | None:
        where = self.pointer or "the arguments"
        value = JsonPointer(self.pointer).resolve(call.arguments, _MISSING)
        if value is _MISSING:
            return f"{call.describe()} has no value at {where}"
        problem = self.check.problem(value)
        return None if problem is None else f"{call.describe()}: at {where}, {problem}"


# -- the run as a whole ------------------------------------------------------------------


class RoundsAtMost(_Assertion):
    kind: Literal["rounds_at_most"] = "rounds_at_most"
    rounds: int = Field(ge=1)

    def sentence(self) -> str:
        return f"The run takes at most {self.rounds} model rounds."

    def problem(self, record: RunRecord) -> str | None:
        if record.rounds <= self.rounds:
            return None
        return f"expected at most {self.rounds} rounds, the run took {record.rounds}"


class FinalTextContains(_Assertion):
    kind: Literal["final_text_contains"] = "final_text_contains"
    text: str = Field(min_length=1)
    case_sensitive: bool = False

    def sentence(self) -> str:
        return f"The final answer contains {json.dumps(self.text, ensure_ascii=False)}."

    def problem(self, record: RunRecord) -> str | None:
        final = record.final_text or ""
        haystack, needle = (final, self.text) if self.case_sensitive else (
            final.casefold(), self.text.casefold())
        if needle in haystack:
            return None
        return f"expected the final answer to contain {self.text!r}; it was {_final(record)}"


class FinalTextMatches(_Assertion):
    kind: Literal["final_text_matches"] = "final_text_matches"
    pattern: RegexPattern

    def sentence(self) -> str:
        return f"The final answer matches /{self.pattern}/."

    def problem(self, record: RunRecord) -> str | None:
        if re.search(self.pattern, record.final_text or ""):
            return None
        return f"expected the final answer to match /{self.pattern}/; it was {_final(record)}"


class NoError(_Assertion):
    """No error of `error_type` in the run or any of its calls (any error when empty)."""

    kind: Literal["no_error"] = "no_error"
    error_type: str = ""

    def sentence(self) -> str:
        if self.error_type:
            return f"No {self.error_type} error occurs."
        return "The run ends without any error."

    def problem(self, record: RunRecord) -> str | None:
        seen = [("the run", record.error_type)] + [
            (c.describe(), c.error_type) for c in record.calls]
        found = [(where, kind) for where, kind in seen
                 if kind and (not self.error_type or kind == self.error_type)]
        if record.status != "succeeded" and not self.error_type and not found:
            found = [("the run", record.status)]
        if not found:
            return None
        return "expected no error; got " + "; ".join(f"{kind} in {where}" for where, kind in found)


class CostAtMost(_Assertion):
    """The run cost at most `dollars` (its rounds priced with the endpoint's model price)."""

    kind: Literal["cost_at_most"] = "cost_at_most"
    dollars: Decimal = Field(ge=0)

    def sentence(self) -> str:
        return f"The run costs at most ${self.dollars}."

    def problem(self, record: RunRecord) -> str | None:
        if record.cost_usd is None:
            return (f"expected a cost of at most ${self.dollars}; the run has no cost: its "
                    "model has no price (Model prices in the admin)")
        if record.cost_usd <= self.dollars:
            return None
        return f"expected a cost of at most ${self.dollars}, the run cost ${record.cost_usd}"


Assertion = Annotated[
    ToolCalled | ToolNotCalled | NoToolCalled | CallSequence | ArgumentsMatch
    | RoundsAtMost | FinalTextContains | FinalTextMatches | NoError | CostAtMost,
    Field(discriminator="kind"),
]
ASSERTIONS: TypeAdapter[list[Assertion]] = TypeAdapter(list[Assertion])
KINDS = frozenset(member.model_fields["kind"].default
                  for union in (Assertion, ArgumentCheck)
                  for member in get_args(get_args(union)[0]))
"""Every assertion's and argument check's `kind` (the unions' tags)."""


def load_assertions(raw: Any) -> list[Assertion]:
    """Parse stored or submitted assertions (raises pydantic's ValidationError)."""
    return ASSERTIONS.validate_python(raw)


def dump_assertions(assertions: list[Assertion]) -> list[dict[str, Any]]:
    dumped: list[dict[str, Any]] = ASSERTIONS.dump_python(assertions, mode="json",
                                                          by_alias=True)
    return dumped


def evaluate_all(assertions: list[Assertion], record: RunRecord) -> list[Verdict]:
    return [a.evaluate(record) for a in assertions]


def _final(record: RunRecord) -> str:
    return "empty" if not record.final_text else shown(record.final_text)
