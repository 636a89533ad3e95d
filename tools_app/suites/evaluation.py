"""Evaluating a finished run: its stored rows read as a `RunRecord` (the run, its calls
in round and call order), the case's assertions checked against it, and the verdict
kept on the suite cell's run (each failing assertion's sentence and reason)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tools_app.engine import json_nesting
from tools_app.models import Run, RunStatus, ToolCall

from .assertions import Assertion, CallRecord, RunRecord, evaluate_all


@dataclass(frozen=True)
class RunVerdict:
    passed: bool
    failures: list[dict[str, str]] = field(default_factory=list)


def run_record(run: Run) -> RunRecord:
    return run_records([run])[run.pk]


def run_records(runs: Sequence[Run]) -> dict[Any, RunRecord]:
    """Each run's record by its id; the calls of all of them read in one query."""
    calls: dict[Any, list[CallRecord]] = defaultdict(list)
    for call in ToolCall.objects.filter(run__in=[r.pk for r in runs]).select_related(
            "round").order_by("run_id", "round__index", "call_index"):
        calls[call.run_id].append(CallRecord(
            name=call.tool_name, arguments=_arguments(call),
            round_index=call.round.index if call.round is not None else 0,
            error_type=call.error_type))
    return {run.pk: RunRecord(status=run.status, calls=calls[run.pk], rounds=run.rounds_count,
                              final_text=run.final_text, error_type=run.error_type,
                              error_message=run.error_message, cost_usd=run.cost_usd)
            for run in runs}


def _arguments(call: ToolCall) -> Any:
    if call.arguments is not None:
        return call.arguments
    try:
        return json_nesting.loads(call.arguments_raw)
    except ValueError:
        return None


def verdict_of(run: Run, assertions: list[Assertion],
               record: RunRecord | None = None) -> RunVerdict:
    """The run passes when it was not cancelled and every assertion holds (checked
    against `record`, the run's as `run_records` read it, else read now)."""
    failures: list[dict[str, str]] = []
    if run.status == RunStatus.CANCELLED:
        failures.append({"sentence": "The run finishes.",
                         "reason": f"the run was cancelled: {run.error_message}".rstrip(": ")})
    for verdict in evaluate_all(assertions, record or run_record(run)):
        if not verdict.passed:
            failures.append({"sentence": verdict.sentence, "reason": verdict.reason})
    return RunVerdict(passed=not failures, failures=failures)
