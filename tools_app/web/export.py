"""Exporting a filtered selection of runs as CSV or JSON Lines, streamed: rows are read
in chunks and written as they come, so memory stays flat however many runs match.

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

from ..models import Run
from ..runs.filters import EXPORT_FILTERS, matching_runs

COLUMNS = ("id", "created_at", "status", "title", "endpoint", "model", "tools", "started_by",
           "rounds", "tool_calls", "errors", "total_tokens", "wall_ms", "error_type",
           "error_message", "final_text")
CHUNK = 500
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def export_response(runs: QuerySet[Run], params: Mapping[str, str],
                    fmt: str) -> StreamingHttpResponse:
    """The `runs` the filters in `params` select (FilterError names a bad one), streamed
    as `fmt` ("csv" or "jsonl")."""
    runs = matching_runs(runs, params, EXPORT_FILTERS)
    rows = (_row(run) for run in runs.select_related("created_by").iterator(chunk_size=CHUNK))
    if fmt == "csv":
        response = StreamingHttpResponse(_csv_lines(rows), content_type="text/csv; charset=utf-8")
    else:
        response = StreamingHttpResponse(
            (json.dumps(row, ensure_ascii=False) + "\n" for row in rows),
            content_type="application/x-ndjson; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="runs.{fmt}"'
    return response


def _row(run: Run) -> dict[str, Any]:
    endpoint = run.snapshot.get("endpoint", {})
    return {
        "id": str(run.pk), "created_at": run.created_at.isoformat(), "status": run.status,
        "title": run.title, "endpoint": endpoint.get("name", ""),
        "model": endpoint.get("model", ""),
        "tools": [tool["name"] for tool in run.snapshot.get("tools", [])],
        "started_by": run.created_by.get_username() if run.created_by else None,
        "rounds": run.rounds_count, "tool_calls": run.tool_calls_count,
        "errors": run.errors_count, "total_tokens": run.total_tokens, "wall_ms": run.wall_ms,
        "error_type": run.error_type, "error_message": run.error_message,
        "final_text": run.final_text,
    }


class _Line:
    """A file-like object csv.writer writes one line to, handed back at once."""

    def write(self, value: str) -> str:
        return value


def _csv_lines(rows: Iterator[dict[str, Any]]) -> Iterator[str]:
    writer = csv.writer(_Line())
    yield writer.writerow(COLUMNS)
    for row in rows:
        yield writer.writerow([_cell(row[column]) for column in COLUMNS])


def _cell(value: Any) -> str:
    if value is None:
        return ""
    text = " ".join(value) if isinstance(value, list) else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text
