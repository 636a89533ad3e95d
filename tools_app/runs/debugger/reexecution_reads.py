"""Reads of re-executions (runs/debugger/reexecution.py) for the timeline's lanes and the API: each
with its arguments and result compared with the original call's, as line diffs.

Rows are read with values() for the lanes, as the rest of the timeline is (a finished
run may have many calls)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import pydantic_core
from django.conf import settings
from django.db.models import QuerySet

from tools_app.models import (
    REEXECUTABLE_CALL_STATES,
    REEXECUTION_FINISHED,
    CallReexecution,
    ReexecutionState,
    Run,
    ToolCall,
)
from tools_app.runs.snapshot.model import snapshot_of
from tools_app.runs.store.sql import prepared

FIELDS = ("pk", "tool_call_id", "number", "tool_name", "tool_kind", "tool_version_hash",
          "arguments", "approved", "state", "result_text", "is_error", "error_type",
          "error_message", "requested_by_label", "requested_at", "started_at",
          "finished_at", "duration_ms")
_LABELS = dict(ReexecutionState.choices)


def lane_adder(run: Run, indexes: Iterable[int] | None = None, *, call_pk: int | None = None,
               ) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Adds to a call's dict (the timeline's) its re-executions, latest first, and
    whether it may be executed again (a finished call of a tool the run has)."""
    wanted = list(indexes) if indexes is not None else None
    by_call: dict[int, list[dict[str, Any]]] = {}
    for row in _rows(run, wanted, call_pk):
        by_call.setdefault(row["tool_call_id"], []).append(row)
    tools = frozenset(snapshot_of(run).tool_names())

    def add(call: dict[str, Any]) -> dict[str, Any]:
        original = (call["arguments"], call["result_text"])
        return call | {
            "reexecutable": (call["state"] in REEXECUTABLE_CALL_STATES
                             and call["tool_name"] in tools),
            "reexecutions": [execution_view(row, *original)
                             for row in by_call.get(call["pk"], [])],
        }

    return add


def _rows(run: Run, indexes: list[int] | None, call_pk: int | None) -> list[dict[str, Any]]:
    """The run's re-executions (of the rounds `indexes`, or of one call), by call and
    latest first. Prepared (prepared.py): every live batch of a run asks for them."""
    if indexes == []:
        return []
    arguments: tuple[Any, ...] = (run.pk,)
    if indexes is not None:
        arguments += (indexes,)
    if call_pk is not None:
        arguments += (call_pk,)
    return prepared.rows(("reexecutions", indexes is not None, call_pk is not None),
                         partial(_query, indexes is not None, call_pk is not None), *arguments)


def _query(by_rounds: bool, by_call: bool, run_pk: Any, *wanted: Any,
           ) -> QuerySet[CallReexecution, Any]:
    rows = CallReexecution.objects.filter(run=run_pk).order_by("tool_call_id", "-number")
    rest = list(wanted)
    if by_rounds:
        rows = rows.filter(tool_call__round__index__in=rest.pop(0))
    if by_call:
        rows = rows.filter(tool_call_id=rest.pop(0))
    picked: QuerySet[CallReexecution, Any] = rows.values(*FIELDS)
    return picked


def call_lane(run: Run, call: ToolCall) -> dict[str, Any]:
    """What a lane's re-execution area needs of one call (the area's own views)."""
    row = {"pk": call.pk, "state": call.state, "tool_name": call.tool_name,
           "arguments": call.arguments, "arguments_raw": call.arguments_raw,
           "result_text": call.result_text}
    return lane_adder(run, call_pk=call.pk)(row)


def execution_view(row: dict[str, Any], original_arguments: Any,
                   original_result: str | None) -> dict[str, Any]:
    """A re-execution as its lane and the API show it: display values and the diffs
    against the original call (arguments as JSON values, results as text lines)."""
    finished = row["state"] in REEXECUTION_FINISHED
    edited = row["arguments"] != original_arguments
    same = finished and row["result_text"] == original_result
    # Past the display limit only a head is shown and compared (the whole texts are in
    # the API): a diff of two huge texts would cost more than a page may take.
    limit = settings.AGENTFORGE_DISPLAY_LIMIT
    original_result = original_result[:limit] if original_result is not None else None
    result = row["result_text"][:limit] if row["result_text"] is not None else None
    return row | {
        "result_head": result, "result_cut": len(row["result_text"] or "") > limit,
        "finished": finished, "state_label": _LABELS.get(row["state"], row["state"]),
        "version": (row["tool_version_hash"] or "")[:12],
        "arguments_text": _pretty(row["arguments"]), "arguments_edited": edited,
        "arguments_diff": line_diff(_json_lines(original_arguments),
                                    _json_lines(row["arguments"])) if edited else [],
        "original_result": original_result, "same_result": same,
        "result_diff": line_diff(*_result_lines(original_result, result))
        if finished and not same else [],
    }


def execution_row(execution: CallReexecution) -> dict[str, Any]:
    """One re-execution's view (polling, the API), from its model instance."""
    row = {name: getattr(execution, name) for name in FIELDS}
    call = execution.tool_call
    return execution_view(row, call.arguments, call.result_text)


def line_diff(a: list[str], b: list[str]) -> list[str]:
    """A unified diff, "original" against "re-executed"."""
    return list(difflib.unified_diff(a, b, "original", "re-executed", lineterm="", n=2))


def _result_lines(a: str | None, b: str | None) -> tuple[list[str], list[str]]:
    """Two results as lines to compare: indented JSON when both are JSON objects or
    arrays (a one-line JSON result would otherwise differ as one line), else text."""
    parsed = [_json_container(a), _json_container(b)]
    if parsed[0] is not None and parsed[1] is not None:
        return _json_lines(parsed[0]), _json_lines(parsed[1])
    return (a or "").splitlines(), (b or "").splitlines()


def _json_container(text: str | None) -> Any:
    try:
        value = json.loads(text or "")
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, (dict, list)) else None


def _json_lines(value: Any) -> list[str]:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


def _pretty(value: Any) -> str:
    return pydantic_core.to_json(value, indent=2).decode()
