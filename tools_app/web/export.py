"""Exporting a filtered selection of runs (or of tool calls) as CSV or JSON Lines,
streamed: rows are read in chunks and written as they come, so memory stays flat however
many match.

What is exported is what the run pages show (stored values are already redacted; the
snapshot's endpoint holds only the NAME of a key's variable, and is not exported).
CSV cells that a spreadsheet would run as a formula (=, +, -, @, tab, CR at the start)
get a leading apostrophe: tool output and model text are untrusted."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Mapping
from typing import Any

from django.db.models import QuerySet
from django.http import StreamingHttpResponse

from tools_app.audit.call_filters import CALL_EXPORT_FILTERS, STATE_NAMES, matching_calls
from tools_app.audit.run_filters import EXPORT_FILTERS, matching_runs
from tools_app.audit.selectors import call_rows
from tools_app.models.prices import export_usd
from tools_app.runs.snapshot.model import listed, price_revision

from ..models import Run, ToolCall

COLUMNS = ("id", "created_at", "status", "title", "endpoint", "model", "tools", "started_by",
           "rounds", "tool_calls", "errors", "total_tokens", "cost_usd", "price_revision",
           "wall_ms", "error_type", "error_message", "final_text")
CHUNK = 500
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def export_response(runs: QuerySet[Run], params: Mapping[str, str],
                    fmt: str) -> StreamingHttpResponse:
    """The `runs` the filters in `params` select (FilterError names a bad one), streamed
    as `fmt` ("csv" or "jsonl")."""
    runs = matching_runs(runs, params, EXPORT_FILTERS)
    rows = (_row(run) for run in runs.select_related("created_by").iterator(chunk_size=CHUNK))
    return _streamed(rows, COLUMNS, fmt, "runs")


CALL_COLUMNS = ("id", "run_id", "run_title", "run_status", "endpoint", "started_by", "round",
                "call_index", "call_id", "tool", "state", "stored_state", "handled_by",
                "is_error", "stopped_run", "duration_ms", "cost_usd", "started_at",
                "finished_at", "error_type", "error_message", "arguments", "result_text")


def calls_export_response(calls: QuerySet[ToolCall], params: Mapping[str, str],
                          fmt: str) -> StreamingHttpResponse:
    """The `calls` the filters in `params` select (FilterError names a bad one), streamed
    as `fmt`; the columns a call's lane shows, nothing of the run's configuration."""
    calls = call_rows(matching_calls(calls, params, CALL_EXPORT_FILTERS)).select_related(
        "round").defer("round__request_json", "round__response_json", "round__response",
                       "round__ai_text", "round__thinking", "round__attempts")
    rows = (_call_row(call) for call in calls.iterator(chunk_size=CHUNK))
    return _streamed(rows, CALL_COLUMNS, fmt, "calls")


def _streamed(rows: Iterator[dict[str, Any]], columns: tuple[str, ...], fmt: str,
              name: str) -> StreamingHttpResponse:
    if fmt == "csv":
        response = StreamingHttpResponse(_csv_lines(rows, columns),
                                         content_type="text/csv; charset=utf-8")
    else:
        response = StreamingHttpResponse(
            (json.dumps(row, ensure_ascii=False) + "\n" for row in rows),
            content_type="application/x-ndjson; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{name}.{fmt}"'
    return response


def _call_row(call: ToolCall) -> dict[str, Any]:
    run = call.run
    return {
        "id": call.pk, "run_id": str(run.pk), "run_title": run.title,
        "run_status": run.status, "endpoint": run.endpoint.name if run.endpoint else "",
        "started_by": run.created_by.get_username() if run.created_by else None,
        "round": call.round.index, "call_index": call.call_index, "call_id": call.call_id,
        "tool": call.tool_name, "state": STATE_NAMES.get(call.state, call.state),
        "stored_state": call.state, "handled_by": call.handled_by, "is_error": call.is_error,
        "stopped_run": call.stopped_run, "duration_ms": call.duration_ms,
        "cost_usd": export_usd(call.cost_usd),  # its share of its round's cost
        "started_at": call.started_at.isoformat() if call.started_at else None,
        "finished_at": call.finished_at.isoformat() if call.finished_at else None,
        "error_type": call.error_type, "error_message": call.error_message,
        "arguments": call.arguments_raw, "result_text": call.result_text,
    }


def _row(run: Run) -> dict[str, Any]:
    frozen = listed(run.snapshot)
    return {
        "id": str(run.pk), "created_at": run.created_at.isoformat(), "status": run.status,
        "title": run.title, "endpoint": frozen.endpoint, "model": frozen.model,
        "tools": frozen.tools,
        "started_by": run.created_by.get_username() if run.created_by else None,
        "rounds": run.rounds_count, "tool_calls": run.tool_calls_count,
        "errors": run.errors_count, "total_tokens": run.total_tokens,
        "cost_usd": export_usd(run.cost_usd), "price_revision": price_revision(run.snapshot),
        "wall_ms": run.wall_ms, "error_type": run.error_type, "error_message": run.error_message,
        "final_text": run.final_text,
    }


class _Line:
    """A file-like object csv.writer writes one line to, handed back at once."""

    def write(self, value: str) -> str:
        return value


def _csv_lines(rows: Iterator[dict[str, Any]], columns: tuple[str, ...]) -> Iterator[str]:
    writer = csv.writer(_Line())
    yield writer.writerow(columns)
    for row in rows:
        yield writer.writerow([_cell(row[column]) for column in columns])


def _cell(value: Any) -> str:
    if value is None:
        return ""
    text = " ".join(value) if isinstance(value, list) else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text
