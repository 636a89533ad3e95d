"""A known audit log, written row by row (no engine): runs of bob and charlie with tool
calls of every outcome, known durations, handlers, errors and times, so filters and
statistics can be checked against numbers worked out by hand."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth.models import AbstractUser

from tools_app.models import ModelEndpoint, Round, Run, ToolCall

BASE = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
EXEC = "execution_error_to_model"
ARGS = "arguments_error_rethrow"
HALL = "hallucinated_tool_raise"


@dataclass(frozen=True)
class Call:
    label: str
    tool: str
    state: str
    ms: float | None
    minute: int | None  # minutes after BASE it started; None: it never started
    handler: str = ""
    error: str = ""
    arguments: str = "{}"
    result: str | None = None


# run label -> (owner, endpoint, status, created minutes after BASE, calls)
RUNS: dict[str, tuple[str, str, str, int, list[Call]]] = {
    "a": ("bob", "alpha", "succeeded", 0, [
        Call("a1", "get_weather", "succeeded", 10.0, 5, arguments='{"city": "Paris"}',
             result="Sunny in Paris"),
        Call("a2", "get_weather", "execution_error", 200.0, 40, EXEC, "HTTP 500 from weather"),
        Call("a3", "calculator", "arguments_error", 5.0, 41, ARGS, "expression: field required"),
    ]),
    "b": ("bob", "beta", "failed", 120, [
        Call("b1", "get_weather", "timed_out", 1000.0, 130, EXEC, "timed out after 1 s"),
        Call("b2", "get_weather", "execution_error", 50.0, 131, EXEC, "HTTP 500 from weather"),
        Call("b3", "ghost", "hallucinated", None, None, HALL, "no tool named ghost"),
    ]),
    "c": ("charlie", "alpha", "running", 180, [
        Call("c1", "get_weather", "succeeded", 30.0, 185, arguments='{"city": "Rome"}'),
        Call("c2", "get_weather", "started", None, 186, arguments='{"city": "Oslo"}'),
        Call("c3", "lookup", "rejected", 0.5, 187, EXEC, "needs approval"),
        Call("c4", "lookup", "unknown_outcome", None, 188, EXEC, "worker lost mid-call"),
    ]),
}
ERROR_STATES = {"arguments_error", "execution_error", "timed_out", "hallucinated", "rejected",
                "unknown_outcome"}


def at(minute: int) -> datetime:
    return BASE + timedelta(minutes=minute)


def build(users: dict[str, AbstractUser]) -> dict[str, Any]:
    """The runs and calls of RUNS; returns label -> Run or ToolCall."""
    endpoints = {name: ModelEndpoint.objects.create(name=name, kind="scripted")
                 for name in ("alpha", "beta")}
    found: dict[str, Any] = {}
    for label, (owner, endpoint, status, minute, calls) in RUNS.items():
        run = Run.objects.create(created_by=users[owner], endpoint=endpoints[endpoint],
                                 status=status, title=f"run {label}",
                                 snapshot={"endpoint": {"name": endpoint}, "tools": []})
        Run.objects.filter(pk=run.pk).update(created_at=at(minute))  # auto_now_add
        round_ = Round.objects.create(run=run, index=0, status="done")
        found[label] = run
        for index, call in enumerate(calls):
            found[call.label] = _call(run, round_, index, call)
    return found


def _call(run: Run, round_: Round, index: int, call: Call) -> ToolCall:
    started = at(call.minute) if call.minute is not None else None
    finished = started + timedelta(milliseconds=call.ms) if started and call.ms else None
    return ToolCall.objects.create(
        run=run, round=round_, call_index=index, call_id=f"call_{call.label}",
        tool_name=call.tool, state=call.state, duration_ms=call.ms, handled_by=call.handler,
        is_error=call.state in ERROR_STATES, error_message=call.error,
        error_type="ToolExecutionError" if call.error else "",
        arguments_raw=call.arguments, result_text=call.result,
        started_at=started, finished_at=finished)


def labels(found: dict[str, Any], ids: list[int]) -> list[str]:
    by_id = {obj.pk: label for label, obj in found.items() if isinstance(obj, ToolCall)}
    return [by_id[i] for i in ids]
