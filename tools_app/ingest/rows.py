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
from tools_app.models import Round, ToolCall
from tools_app.runs.store import rowsql
from tools_app.runs.store.sanitize import clean_json, clean_text, fit_column

OFFSET = 1_000_000  # indexes parked out of the way while rows change places
Layout = list[list[Any]]


class NewRows:
    """Rounds and calls to insert, for all the runs of a request: two INSERTs in all
    (`flush`), the calls pointing at their rounds once these have ids."""

    def __init__(self) -> None:
        self.rounds: list[dict[str, Any]] = []
        self.round_keys: list[tuple[str, Any]] = []  # (run id, round key), per round
        self.calls: list[tuple[str, Any, dict[str, Any]]] = []  # run id, round key, fields
        self.existing: dict[tuple[str, Any], int] = {}  # rounds already stored

    def flush(self) -> None:
        ids = rowsql.insert(Round, self.rounds, returning="id")
        round_ids = self.existing | dict(zip(self.round_keys, ids, strict=True))
        rowsql.insert(ToolCall, [fields | {"run": run_id, "round": round_ids[run_id, key]}
                                 for run_id, key, fields in self.calls])
        self.rounds, self.round_keys, self.calls = [], [], []


def sync(run_id: str, plan: RunPlan, old_layout: Layout,
         new_rows: NewRows) -> tuple[Layout, set[int]]:
    """Bring the run's rows in line with the plan (the new ones into `new_rows`);
    returns the new layout and the indexes of the rounds that changed (what live
    viewers re-render)."""
    rounds: dict[Any, Round] = {}
    calls: dict[Any, ToolCall] = {}
    touched: set[int] = set()
    if old_layout:  # a new run has no rows yet
        touched = _keep(run_id, plan, old_layout, rounds, calls)
    for index, round_plan in enumerate(plan.rounds):
        fields = round_fields(round_plan) | {"index": index}
        row = rounds.get(round_plan.key)
        if row is None:
            new_rows.rounds.append(fields | {"run": run_id})
            new_rows.round_keys.append((run_id, round_plan.key))
            touched.add(index)
        else:
            new_rows.existing[run_id, round_plan.key] = row.pk
            if _save_changes(row, fields):
                touched.add(index)
        for call_index, call_plan in enumerate(round_plan.calls):
            fields = call_fields(call_plan) | {"call_index": call_index}
            call = calls.get(call_plan.key)
            if call is not None and row is None:
                call.delete()  # it moves into a round made now: made again there
                call = None
            if call is None:
                new_rows.calls.append((run_id, round_plan.key, fields))
                touched.add(index)
            elif row is not None and _save_changes(call, fields | {"round_id": row.pk}):
                touched.add(index)
    layout = [[r.key, [c.key for c in r.calls]] for r in plan.rounds]
    return layout, touched


def _keep(run_id: str, plan: RunPlan, old_layout: Layout, rounds: dict[Any, Round],
          calls: dict[Any, ToolCall]) -> set[int]:
    """The rows the plan keeps, by key, into `rounds` and `calls`; the others removed,
    the kept ones that change places parked. Returns the rounds that moved."""
    loaded = [r for r in Round.objects.filter(run_id=run_id) if r.index < len(old_layout)]
    rounds |= {_key_at(old_layout, r.index): r for r in loaded}
    index_of = {r.pk: r.index for r in loaded}
    placed: dict[int, tuple[str | None, int]] = {}  # call pk -> (its round's key, index)
    for call in ToolCall.objects.filter(run_id=run_id):
        index = index_of.get(call.round_id)
        if index is not None:
            calls[_call_key_at(old_layout, index, call.call_index)] = call
            placed[call.pk] = (_key_at(old_layout, index), call.call_index)
    wanted_rounds = {r.key for r in plan.rounds}
    wanted_calls = {c.key for r in plan.rounds for c in r.calls}
    gone = [r for key, r in rounds.items() if key not in wanted_rounds]
    gone_ids = {r.pk for r in gone}  # their calls go with them
    _delete(gone, rounds)
    for key in [k for k, c in calls.items() if c.round_id in gone_ids]:
        del calls[key]
    _delete([c for key, c in calls.items() if key not in wanted_calls], calls)
    return _park_moved(plan, rounds, calls, placed)


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
