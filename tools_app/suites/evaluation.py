"""Evaluating a finished run: its stored rows read as a `RunRecord` (the run, its calls
in round and call order), the case's assertions checked against it, and the verdict
kept on the suite cell's run (each failing assertion's sentence and reason)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tools_app.models import Run, RunStatus, ToolCall

from .assertions import Assertion, CallRecord, RunRecord, evaluate_all


@dataclass(frozen=True)
class RunVerdict:
    passed: bool
    failures: list[dict[str, str]] = field(default_factory=list)


def run_record(run: Run) -> RunRecord:
    calls = ToolCall.objects.filter(run=run).select_related("round").order_by(
        "round__index", "call_index")
    return RunRecord(
        status=run.status,
        calls=[CallRecord(name=c.tool_name, arguments=_arguments(c),
                          round_index=c.round.index if c.round is not None else 0,
                          error_type=c.error_type) for c in calls],
        rounds=run.rounds_count, final_text=run.final_text, error_type=run.error_type,
        error_message=run.error_message, cost_usd=run.cost_usd)


def _arguments(call: ToolCall) -> Any:
    if call.arguments is not None:
        return call.arguments
    try:
        return json.loads(call.arguments_raw)
    except ValueError:
        return None


def verdict_of(run: Run, assertions: list[Assertion]) -> RunVerdict:
    """The run passes when it was not cancelled and every assertion holds."""
    failures: list[dict[str, str]] = []
    if run.status == RunStatus.CANCELLED:
        failures.append({"sentence": "The run finishes.",
                         "reason": f"the run was cancelled: {run.error_message}".rstrip(": ")})
    for verdict in evaluate_all(assertions, run_record(run)):
        if not verdict.passed:
            failures.append({"sentence": verdict.sentence, "reason": verdict.reason})
    return RunVerdict(passed=not failures, failures=failures)
