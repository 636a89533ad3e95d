"""A received run's rounds and calls brought in line with its plan (`assemble.RunPlan`):
rows are found again by their keys (the layout the snapshot keeps: each round's span id
and its calls' keys), moved where a late span says they belong, created, updated where
something changed, and removed when no span stands for them any more. Rows a person
works on (a call re-executed) keep their ids as long as their spans do.

Every value from a span is untrusted: cleaned (`store.sanitize`) before it is stored.
"""

from __future__ import annotations

import json
from typing import Any

from tools_app.engine import (
    AiMessage,
    ChatResponse,
    FinishReason,
    TokenUsage,
    ToolExecutionRequest,
)
from tools_app.ingest.assemble import CallPlan, RoundPlan, RunPlan, moment
from tools_app.ingest.conventions import RoundFacts
from tools_app.ingest.messages import Message
from tools_app.models import Round, Run, ToolCall
from tools_app.runs.store.sanitize import clean_json, clean_text, fit_column

OFFSET = 1_000_000  # indexes parked out of the way while rows change places
Layout = list[list[Any]]


def sync(run: Run, plan: RunPlan, old_layout: Layout) -> tuple[Layout, set[int]]:
    """Write the plan's rounds and calls; returns the new layout and the indexes of the
    rounds that changed (what live viewers re-render)."""
    rounds = {_key_at(old_layout, r.index): r
              for r in Round.objects.filter(run=run) if r.index < len(old_layout)}
    calls: dict[Any, ToolCall] = {}
    placed: dict[int, tuple[str | None, int]] = {}  # call pk -> (its round's key, index)
    for call in ToolCall.objects.filter(run=run).select_related("round"):
        if call.round.index < len(old_layout):
            calls[_call_key_at(old_layout, call.round.index, call.call_index)] = call
            placed[call.pk] = (_key_at(old_layout, call.round.index), call.call_index)
    wanted_rounds = {r.key for r in plan.rounds}
    wanted_calls = {c.key for r in plan.rounds for c in r.calls}
    gone = [r for key, r in rounds.items() if key not in wanted_rounds]
    gone_ids = {r.pk for r in gone}  # their calls go with them
    _delete(gone, rounds)
    calls = {k: c for k, c in calls.items() if c.round_id not in gone_ids}
    _delete([c for key, c in calls.items() if key not in wanted_calls], calls)
    touched = _park_moved(plan, rounds, calls, placed)
    for index, round_plan in enumerate(plan.rounds):
        row = rounds.get(round_plan.key)
        if _write_round(run, row, index, round_plan, rounds):
            touched.add(index)
        for call_index, call_plan in enumerate(round_plan.calls):
            if _write_call(run, rounds[round_plan.key], call_index, call_plan, calls):
                touched.add(index)
    layout = [[r.key, [c.key for c in r.calls]] for r in plan.rounds]
    return layout, touched


def _key_at(layout: Layout, index: int) -> str | None:
    entry = layout[index]
    return str(entry[0]) if isinstance(entry, list) and entry else None


def _call_key_at(layout: Layout, index: int, call_index: int) -> str | None:
    entry = layout[index]
    keys = entry[1] if isinstance(entry, list) and len(entry) > 1 else []
    return str(keys[call_index]) if call_index < len(keys) else None


def _delete(rows: list[Any], by_key: dict[Any, Any]) -> None:
    doomed = {id(row) for row in rows}
    for key in [k for k, row in by_key.items() if id(row) in doomed]:
        del by_key[key]
    for row in rows:
        row.delete()


def _park_moved(plan: RunPlan, rounds: dict[Any, Round], calls: dict[Any, ToolCall],
                placed: dict[int, tuple[str | None, int]]) -> set[int]:
    """Rows whose place changes first move out of the way (the unique indexes hold at
    every statement); returns the new indexes of the rounds that moved or changed calls."""
    touched: set[int] = set()
    for index, round_plan in enumerate(plan.rounds):
        row = rounds.get(round_plan.key)
        if row is not None and row.index != index:
            Round.objects.filter(pk=row.pk).update(index=OFFSET + index)
            touched.add(index)
        for call_index, call_plan in enumerate(round_plan.calls):
            call = calls.get(call_plan.key)
            if call is not None and placed[call.pk] != (round_plan.key, call_index):
                ToolCall.objects.filter(pk=call.pk).update(call_index=OFFSET + call.pk)
                call.call_index = -1  # written again below
                touched.add(index)
    return touched


def _write_round(run: Run, row: Round | None, index: int, plan: RoundPlan,
                 rounds: dict[Any, Round]) -> bool:
    fields = round_fields(plan) | {"index": index}
    if row is None:
        rounds[plan.key] = Round.objects.create(run=run, **fields)
        return True
    return _save_changes(row, fields)


def _write_call(run: Run, round_: Round, call_index: int, plan: CallPlan,
                calls: dict[Any, ToolCall]) -> bool:
    fields = call_fields(plan) | {"call_index": call_index, "round": round_}
    row = calls.get(plan.key)
    if row is None:
        calls[plan.key] = ToolCall.objects.create(run=run, **fields)
        return True
    return _save_changes(row, fields)


def _save_changes(row: Round | ToolCall, fields: dict[str, Any]) -> bool:
    changed = [name for name, value in fields.items() if getattr(row, name) != value]
    for name in changed:
        setattr(row, name, fields[name])
    if changed:
        row.save(update_fields=changed)
    return bool(changed)


def round_fields(plan: RoundPlan) -> dict[str, Any]:
    facts, span = plan.facts, plan.span
    output = facts.output if facts else None
    request = ({"model": facts.model, "messages": [m.wire() for m in facts.inputs]}
               if facts and facts.inputs is not None else None)
    return {
        "status": plan.status,
        "request_json": clean_json(request),
        "response": clean_json(_response(plan, facts, output).model_dump(mode="json"))
        if facts is not None and output is not None else None,
        "ai_text": clean_text(output.text) if output else None,
        "thinking": clean_text(output.thinking) if output else None,
        "finish_reason": fit_column(Round, "finish_reason", plan.finish_reason),
        "input_tokens": facts.input_tokens if facts else None,
        "output_tokens": facts.output_tokens if facts else None,
        "latency_ms": span.duration_ms if span else None,
        "started_at": moment(span.start_ns) if span else None,
        "finished_at": moment(span.end_ns) if span else None,
    }


def _response(plan: RoundPlan, facts: RoundFacts, output: Message) -> ChatResponse:
    """The model's answer as the engine records one (what replay and compare read)."""
    requests = tuple(ToolExecutionRequest(id=c.call_id, name=c.name,
                                          arguments=c.arguments or "")
                     for c in output.calls)
    usage = (TokenUsage(input_tokens=facts.input_tokens, output_tokens=facts.output_tokens)
             if facts.input_tokens is not None or facts.output_tokens is not None else None)
    return ChatResponse(
        ai_message=AiMessage(text=output.text, thinking=output.thinking,
                             tool_execution_requests=requests),
        finish_reason=FinishReason(plan.finish_reason) if plan.finish_reason else None,
        usage=usage, model_name=facts.model, response_id=facts.response_id)


def call_fields(plan: CallPlan) -> dict[str, Any]:
    return {
        "call_id": fit_column(ToolCall, "call_id", plan.call_id),
        "tool_name": fit_column(ToolCall, "tool_name", plan.tool_name),
        "arguments_raw": clean_text(plan.arguments) or "",
        "arguments": clean_json(_parsed(plan.arguments)),
        "state": plan.state,
        "result_text": clean_text(plan.result_text),
        "is_error": plan.is_error,
        "error_type": fit_column(ToolCall, "error_type", plan.error_type),
        "error_message": clean_text(plan.error_message),
        "attempts": 1 if plan.span_id else 0,
        "started_at": plan.started_at,
        "finished_at": plan.finished_at,
        "duration_ms": plan.duration_ms,
    }


def _parsed(arguments: str | None) -> Any:
    if not arguments:
        return None
    try:
        return json.loads(arguments)
    except (ValueError, RecursionError):
        return None
