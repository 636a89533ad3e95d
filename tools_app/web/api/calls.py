"""The calls router of the JSON API: the audit log's tool calls (bearer token, like the rest):

GET /api/calls?<filters>                  one keyset page of calls -> {"calls", "next_cursor"}
GET /api/calls/export.csv|jsonl?<filters> every matching call, streamed

The filters are `audit.call_filters`'; an unknown one or a bad value is a 400 naming it.
"""

from __future__ import annotations

from typing import Any, Literal

from django.http import HttpRequest, JsonResponse
from django.http.response import HttpResponseBase
from ninja import Router

from tools_app.audit.call_filters import (
    CALL_EXPORT_FILTERS,
    CALL_FILTERS,
    STATE_NAMES,
    filtered_calls,
)
from tools_app.audit.selectors import call_rows, calls_listed_for_user
from tools_app.models import ToolCall
from tools_app.web.api.base import answers, query, streamed
from tools_app.web.export import calls_export_response

router = Router(tags=["calls"])


@router.get("", url_name="api_calls", response=answers({200: None}, 400),
            openapi_extra=query(*CALL_FILTERS),
            summary="One keyset page of the tool calls the user may see")
def list_calls(request: HttpRequest) -> JsonResponse:
    """`{"calls": [...], "next_cursor"}`."""
    page = filtered_calls(calls_listed_for_user(request.user), request.GET.dict(), call_rows)
    return JsonResponse({"calls": [call_json(c) for c in page.calls],
                         "next_cursor": page.next_cursor})


@router.get("/export.{export_format:fmt}", url_name="api_calls_export",
            # 404: a format other than csv or jsonl is no route.
            response=answers({}, 400, 404),
            openapi_extra=query(*CALL_EXPORT_FILTERS) | streamed("text/csv",
                                                                 "application/x-ndjson"),
            summary="Every matching tool call, streamed as CSV or JSON Lines")
def export_calls(request: HttpRequest, fmt: Literal["csv", "jsonl"]) -> HttpResponseBase:
    return calls_export_response(calls_listed_for_user(request.user), request.GET.dict(), fmt)


def call_json(call: ToolCall) -> dict[str, Any]:
    """A call as the list shows it: where it ran, what it was, how it ended."""
    run = call.run
    return {
        "id": call.pk, "run": str(run.pk), "run_status": run.status,
        "url": f"/runs/{run.pk}/#call-{call.pk}",
        "endpoint": run.endpoint.name if run.endpoint else None,
        "started_by": run.created_by.get_username() if run.created_by else None,
        "call_id": call.call_id, "tool": call.tool_name,
        "state": STATE_NAMES.get(call.state, call.state), "stored_state": call.state,
        "handled_by": call.handled_by or None, "is_error": call.is_error,
        "duration_ms": call.duration_ms, "arguments": call.arguments_raw,
        "error_type": call.error_type or None, "error_message": call.error_message or None,
        "started_at": call.started_at.isoformat() if call.started_at else None,
    }
