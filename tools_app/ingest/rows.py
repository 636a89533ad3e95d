"""A received run's rounds and calls brought in line with its plan (`assemble.RunPlan`):
rows are found again by their keys (the run's layout, `IngestedLayout`: each round's span
id and its calls' keys, with a digest of the fields each row was last written with),
moved where a late span says they belong, created, updated where something changed,
and removed when no span stands for them any more. Only ids and places are read back
(`Existing`, two queries for all the runs of a request): a kept row whose digest is
unchanged is not written. Rows a person works on (a call re-executed) keep their ids
as long as their spans do.

Every value from a span is untrusted: cleaned (`store.sanitize`) before it is stored
(JSON values through `clean_json_data`: JSON data, whose encoded text shows at once
whether anything needs cleaning).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
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
from tools_app.runs.store.eventlog import run_key
from tools_app.runs.store.sanitize import clean_json_data, clean_text, fit_column
from tools_app.runs.store.sql import rowsql
from tools_app.runs.store.sql.rowsql import In

ROUND_FIELDS_VERSION = 1  # raised when `round_fields` changes: kept rounds written again
CALL_FIELDS_VERSION = 2  # the same for `call_fields` (or `_call_digest`) and kept calls
OFFSET = 1_000_000  # indexes parked out of the way while rows change places
_CALL_PLAN_FIELDS = tuple(f.name for f in dataclasses.fields(CallPlan))
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


@dataclass
class Stored:
    """A row kept from the last build: its id, place (a round's index, a call's
    call_index), a call's round, and the digest of the fields last written to it."""

    pk: int
    place: int
    round_id: int | None = None
    digest: str = ""


@dataclass
class Existing:
    """The rows of the runs a request rebuilds, read in two queries for them all: by
    run key (`eventlog.run_key`), each round's (id, index) and call's (id, round id,
    call_index)."""

    rounds: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    calls: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)

    @classmethod
    def of(cls, run_ids: Sequence[str]) -> Existing:
        existing = cls()
        if not run_ids:
            return existing
        runs = In(tuple(run_ids))
        for pk, run, index in rowsql.select(Round, ("id", "run", "index"), {"run": runs}):
            existing.rounds.setdefault(run_key(run), []).append((pk, index))
        for pk, run, round_id, call_index in rowsql.select(
                ToolCall, ("id", "run", "round", "call_index"), {"run": runs}):
            existing.calls.setdefault(run_key(run), []).append((pk, round_id, call_index))
        return existing


def sync(run_id: str, plan: RunPlan, old_layout: Layout, new_rows: NewRows,
         existing: Existing | None = None) -> tuple[Layout, set[int]]:
    """Bring the run's rows (`existing`; none for a new run) in line with the plan (the
    new ones into `new_rows`); returns the new layout and the indexes of the rounds that
    changed (what live viewers re-render). A kept row is written only when its fields'
    digest differs from the one the layout recorded when they were last written."""
    rounds: dict[Any, Stored] = {}
    calls: dict[Any, Stored] = {}
    touched: set[int] = set()
    if old_layout and existing is not None:
        touched = _keep(run_key(run_id), plan, old_layout, existing, rounds, calls)
    layout: Layout = []
    for index, round_plan in enumerate(plan.rounds):
        round_digest = _round_digest(round_plan, index)
        row = rounds.get(round_plan.key)
        if row is None:
            new_rows.rounds.append(round_fields(round_plan) | {"index": index, "run": run_id})
            new_rows.round_keys.append((run_id, round_plan.key))
            touched.add(index)
        else:
            new_rows.existing[run_id, round_plan.key] = row.pk
            if round_digest != row.digest:
                _write(Round, row, round_fields(round_plan) | {"index": index})
                touched.add(index)
        call_digests = []
        for call_index, call_plan in enumerate(round_plan.calls):
            # A call that changes places was parked, its digest dropped: written again.
            call_digests.append(_call_digest(call_plan, call_index))
            call = calls.get(call_plan.key)
            if call is not None and row is None:
                ToolCall.objects.filter(pk=call.pk).delete()  # made again in its new round
                call = None
            if call is None:
                new_rows.calls.append((run_id, round_plan.key,
                                       call_fields(call_plan) | {"call_index": call_index}))
                touched.add(index)
            elif row is not None and call_digests[-1] != call.digest:
                _write(ToolCall, call, call_fields(call_plan) | {"call_index": call_index,
                                                                 "round_id": row.pk})
                touched.add(index)
        layout.append([round_plan.key, [c.key for c in round_plan.calls], round_digest,
                       call_digests])
    return layout, touched


def digest(fields: dict[str, Any]) -> str:
    """A row's fields, as one short string: equal fields give equal digests."""
    return hashlib.blake2b(repr(sorted(fields.items())).encode(), digest_size=12).hexdigest()


def _round_digest(plan: RoundPlan, index: int) -> str:
    """A round's fields are its model-call span's (stored once, never changed) read
    by `round_fields`, and its index: those stand for them, without reading them."""
    return digest({"span": plan.span.span_id if plan.span else "", "key": plan.key,
                   "index": index, "fields": ROUND_FIELDS_VERSION})


def _call_digest(plan: CallPlan, call_index: int) -> str:
    """A call's fields are `call_fields` of its plan, and its place: the plan's fields
    and the place stand for them, without making them (cleaning its arguments and
    result) for every call of every rebuild. Each value hashed as its text (a string's
    own, else its repr), marked with its kind and length: no two differ alike."""
    hashed = hashlib.blake2b(digest_size=12)
    for value in (CALL_FIELDS_VERSION, call_index, *(getattr(plan, name)
                                                     for name in _CALL_PLAN_FIELDS)):
        text = (b"s" + value.encode("utf-8", "surrogatepass") if isinstance(value, str)
                else b"r" + repr(value).encode())
        hashed.update(b"%d:" % len(text))
        hashed.update(text)
    return hashed.hexdigest()


def _write(model: type[Round] | type[ToolCall], row: Stored, fields: dict[str, Any]) -> None:
    model.objects.filter(pk=row.pk).update(**fields)


def _keep(key: str, plan: RunPlan, old_layout: Layout, existing: Existing,
          rounds: dict[Any, Stored], calls: dict[Any, Stored]) -> set[int]:
    """The rows the plan keeps, by key, into `rounds` and `calls`; the others removed,
    the kept ones that change places parked. Returns the rounds that moved."""
    for pk, index in existing.rounds.get(key, []):
        if index < len(old_layout):
            rounds[_key_at(old_layout, index)] = Stored(pk, index,
                                                        digest=_digest_at(old_layout, index))
    index_of = {r.pk: r.place for r in rounds.values()}
    placed: dict[int, tuple[str | None, int]] = {}  # call pk -> (its round's key, index)
    for pk, round_id, call_index in existing.calls.get(key, []):
        at = index_of.get(round_id)
        if at is not None:
            calls[_call_key_at(old_layout, at, call_index)] = Stored(
                pk, call_index, round_id, _call_digest_at(old_layout, at, call_index))
            placed[pk] = (_key_at(old_layout, at), call_index)
    wanted_rounds = {r.key for r in plan.rounds}
    wanted_calls = {c.key for r in plan.rounds for c in r.calls}
    gone = {k for k in rounds if k not in wanted_rounds}
    gone_ids = {rounds[k].pk for k in gone}  # their calls go with them
    _delete(Round, rounds, gone)
    for key in [k for k, c in calls.items() if c.round_id in gone_ids]:
        del calls[key]
    _delete(ToolCall, calls, {k for k in calls if k not in wanted_calls})
    return _park_moved(plan, rounds, calls, placed)


def _key_at(layout: Layout, index: int) -> str | None:
    entry = layout[index]
    return str(entry[0]) if isinstance(entry, list) and entry else None


def _call_key_at(layout: Layout, index: int, call_index: int) -> str | None:
    entry = layout[index]
    keys = entry[1] if isinstance(entry, list) and len(entry) > 1 else []
    return str(keys[call_index]) if call_index < len(keys) else None


def _digest_at(layout: Layout, index: int) -> str:
    """The digest a round's fields had when last written ("" when the layout has none:
    the row is written again)."""
    entry = layout[index]
    return str(entry[2]) if isinstance(entry, list) and len(entry) > 2 else ""


def _call_digest_at(layout: Layout, index: int, call_index: int) -> str:
    entry = layout[index]
    digests = entry[3] if isinstance(entry, list) and len(entry) > 3 else []
    return str(digests[call_index]) if call_index < len(digests) else ""


def _delete(model: type[Round] | type[ToolCall], by_key: dict[Any, Stored],
            keys: set[Any]) -> None:
    ids = [by_key.pop(key).pk for key in keys]
    if ids:
        model.objects.filter(pk__in=ids).delete()


def _park_moved(plan: RunPlan, rounds: dict[Any, Stored], calls: dict[Any, Stored],
                placed: dict[int, tuple[str | None, int]]) -> set[int]:
    """Rows whose place changes first move out of the way (the unique indexes hold at
    every statement); returns the new indexes of the rounds that moved or changed calls.
    A moved row's digest is dropped: all its fields are written again."""
    touched: set[int] = set()
    for index, round_plan in enumerate(plan.rounds):
        row = rounds.get(round_plan.key)
        if row is not None and row.place != index:
            Round.objects.filter(pk=row.pk).update(index=OFFSET + index)
            row.digest = ""
            touched.add(index)
        for call_index, call_plan in enumerate(round_plan.calls):
            call = calls.get(call_plan.key)
            if call is not None and placed[call.pk] != (round_plan.key, call_index):
                ToolCall.objects.filter(pk=call.pk).update(call_index=OFFSET + call.pk)
                call.digest = ""
                touched.add(index)
    return touched


def round_fields(plan: RoundPlan) -> dict[str, Any]:
    facts, span = plan.facts, plan.span
    output = facts.output if facts else None
    request = ({"model": facts.model, "messages": [m.wire() for m in facts.inputs]}
               if facts and facts.inputs is not None else None)
    return {
        "status": plan.status,
        "request_json": clean_json_data(request),
        "response": clean_json_data(_response(plan, facts, output).model_dump(mode="json"))
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
        "arguments": clean_json_data(_parsed(plan.arguments)),
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
