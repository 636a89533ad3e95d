"""What an error policy may hold, checked in one place for the admin and for the
per-run overrides of the playground and the API (the same limits for both)."""

from __future__ import annotations

import math
import string
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError

from tools_app.models import ErrorPolicy

TEMPLATE_PLACEHOLDERS = ("tool", "error", "arguments")
TEMPLATE_FIELDS = ("arguments_error_template", "execution_error_template")
TEMPLATE_MAX_CHARS = 2_000
TEMPLATE_MAX_PLACEHOLDERS = 10
"""A template's size limits: each placeholder copies model output (the arguments) into
the text, so their number bounds how much a template multiplies it."""

LOOP_DETECTORS = ("repeat", "ping_pong", "no_progress")
"""Loop health's detectors as a policy names its fields: loop_<detector>_at, _action,
_stop_at (engine/loop/health.py)."""
LOOP_COUNT_FIELDS = tuple(f"loop_{d}_{end}" for d in LOOP_DETECTORS for end in ("at", "stop_at"))
LOOP_ACTION_FIELDS = tuple(f"loop_{d}_action" for d in LOOP_DETECTORS)

OVERRIDABLE_FIELDS = frozenset({
    "arguments_error", "arguments_error_template", "execution_error",
    "execution_error_template", "hallucinated_tool", "max_round_trips",
    "default_tool_timeout", "parallel", "max_concurrency", "provider_max_retries",
    "cost_cap_usd", *LOOP_COUNT_FIELDS, *LOOP_ACTION_FIELDS,
})
"""A run may change these for itself; never the policy's name, id or default flag
(the run page would show a policy the run did not use)."""


class PolicyOverrideError(ValueError):
    """Overrides a run cannot use; the message names every offending field."""

    def __init__(self, problems: Mapping[str, str]) -> None:
        self.problems = dict(problems)
        super().__init__("; ".join(f"policy_overrides.{field}: {problem}"
                                   for field, problem in self.problems.items()))


def template_problem(template: str) -> str | None:
    """Why a policy template would not format, or None.

    Conversions and format specs are refused too: "{error:>999999999}" would format,
    and allocate a gigabyte on the worker. So are templates over 2,000 characters or 10
    placeholders: 90,000 {arguments} would turn 2 KB of arguments into 180 MB.
    """
    allowed = ", ".join(f"{{{name}}}" for name in TEMPLATE_PLACEHOLDERS)
    if "\x00" in template:
        return "A template cannot hold a NUL character."
    if len(template) > TEMPLATE_MAX_CHARS:
        return (f"At most {TEMPLATE_MAX_CHARS:,} characters (this one has "
                f"{len(template):,}).")
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        return f"Not a valid template ({exc}). Write {{{{ and }}}} for literal braces."
    placeholders = sum(1 for _, name, _, _ in parsed if name is not None)
    if placeholders > TEMPLATE_MAX_PLACEHOLDERS:
        return (f"At most {TEMPLATE_MAX_PLACEHOLDERS} placeholders (this one has "
                f"{placeholders}).")
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in TEMPLATE_PLACEHOLDERS or spec or conversion:
            shown = "{" + name + (f"!{conversion}" if conversion else "") + (
                f":{spec}" if spec else "") + "}"
            return (f"Unknown placeholder {shown}: use only {allowed}. "
                    "Write {{ and }} for literal braces.")
    try:
        template.format(tool="tool", error="error", arguments="{}")
    except (ValueError, KeyError, IndexError, AttributeError) as exc:
        return f"The template does not format: {exc}"
    return None


def loop_problems(values: Mapping[str, Any]) -> dict[str, str]:
    """Loop-health thresholds that contradict each other, by field: a detector's stop
    threshold must come after its flag threshold (a detector that should stop at its
    first flag says so with the action "stop")."""
    problems = {}
    for detector in LOOP_DETECTORS:
        at, stop_at = values.get(f"loop_{detector}_at"), values.get(f"loop_{detector}_stop_at")
        if isinstance(at, int) and isinstance(stop_at, int) and stop_at <= at:
            problems[f"loop_{detector}_stop_at"] = (
                f"must be more than the flag threshold ({at}): to stop the run at the "
                "first flag, choose the action \"Stop the run\"")
    return problems


def checked_overrides(policy: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The overrides as the run will use them, validated like the admin form validates
    a policy (field types, choices, limits, templates, parallel vs max_concurrency, loop
    health's thresholds). A None value means "keep the policy's"."""
    unknown = sorted(set(overrides) - OVERRIDABLE_FIELDS)
    if unknown:
        raise PolicyOverrideError({
            name: "cannot be overridden per run (allowed: "
                  f"{', '.join(sorted(OVERRIDABLE_FIELDS))})" for name in unknown})
    given = {k: v for k, v in overrides.items() if v is not None}
    problems = _type_problems(given)
    if problems:
        raise PolicyOverrideError(problems)
    if "cost_cap_usd" in given:  # dollars, exactly as written ("0.1", not 0.1000000000000000055)
        given["cost_cap_usd"] = _decimal(given["cost_cap_usd"])
    values = {name: policy[name] for name in OVERRIDABLE_FIELDS if name in policy} | given
    candidate = ErrorPolicy(name="override check", **values)
    try:
        candidate.clean_fields(exclude=[f.name for f in ErrorPolicy._meta.concrete_fields
                                        if f.name not in given])
    except ValidationError as exc:
        problems |= {field: " ".join(messages) for field, messages in exc.message_dict.items()}
    for field in TEMPLATE_FIELDS:
        if field in given and (problem := template_problem(given[field])):
            problems[field] = problem
    if ({"max_concurrency", "parallel"} & set(given) and values.get("parallel") is False
            and values.get("max_concurrency") is not None):
        problems["max_concurrency"] = ("only meaningful when calls run in parallel: turn "
                                       "parallel on or leave it out")
    problems |= {field: problem for field, problem in loop_problems(values).items()
                 if field in given or field.replace("stop_at", "at") in given}
    if problems:
        raise PolicyOverrideError(problems)
    return {field: getattr(candidate, field) for field in given}


_TYPES: dict[str, tuple[type, ...]] = {
    "parallel": (bool,), "max_round_trips": (int,), "max_concurrency": (int,),
    "provider_max_retries": (int,), "default_tool_timeout": (int, float),
    "cost_cap_usd": (int, float, str),
    "arguments_error": (str,), "execution_error": (str,), "hallucinated_tool": (str,),
    "arguments_error_template": (str,), "execution_error_template": (str,),
    **dict.fromkeys(LOOP_COUNT_FIELDS, (int,)), **dict.fromkeys(LOOP_ACTION_FIELDS, (str,)),
}


def _decimal(value: int | float | str) -> Decimal | str:
    """A number as the decimal it reads as; text that is no number stays text, for the
    field's own check to refuse."""
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        return str(value)
    return number if number.is_finite() else str(value)


def _type_problems(given: Mapping[str, Any]) -> dict[str, str]:
    """JSON types first: the model fields would turn "yes" into True and 3.7 into 3."""
    problems = {}
    for field, value in given.items():
        expected = _TYPES[field]
        if isinstance(value, float) and not math.isfinite(value):
            problems[field] = "must be a finite number"
            continue
        if (isinstance(value, bool) and bool not in expected) or not isinstance(value, expected):
            kinds = " or ".join("a boolean" if t is bool else "an integer" if t is int
                                else "a number" if t is float else "a string" for t in expected)
            problems[field] = f"must be {kinds}"
    return problems
