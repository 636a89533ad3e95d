"""The decisions router of the JSON API: approvals and breakpoints
(runs/debugger/approvals.py and breakpoints.py), bearer-token auth like the rest:

POST /api/runs/<id>/decisions        decide a call awaiting approval:
     {"call_id", "decision": "approve"|"reject"|"edit", "arguments"?, "message"?}
POST /api/runs/<id>/continue         go on from a breakpoint:
     {"step": "run"|"call"|"round"|"abort", "arguments"?: {call_id: {...}}, "message"?}
"""

from __future__ import annotations

import uuid
from typing import Any

from django.http import HttpRequest, JsonResponse
from ninja import Router

from tools_app.models import RunPause
from tools_app.runs.debugger import approvals, breakpoints
from tools_app.web.api.base import answers, visible
from tools_app.web.api.schemas import ContinueBody, DecisionBody

router = Router(tags=["decisions"])


@router.post("/{uuid:run_id}/decisions", url_name="api_run_decisions",
             response=answers({201: None, 200: None}, 400, 404, 409, 413),
             summary="Decide a call awaiting approval")
def decide_call(request: HttpRequest, run_id: uuid.UUID, body: DecisionBody) -> JsonResponse:
    """A decision on a call awaiting approval: 201 when stored, 200 when the same
    decision was already stored (nothing changes), 409 when it cannot be taken now."""
    run = visible(request, run_id)
    decided = approvals.decide(run=run, user=request.user,
                               request=approvals.DecisionRequest(
                                   body.call_id, body.decision,
                                   arguments=body.arguments, message=body.message))
    stored = decided.decision
    return JsonResponse({"call_id": stored.tool_call.call_id, "decision": stored.decision,
                         "arguments": stored.arguments, "message": stored.message,
                         "decided_by": stored.decided_by_label,
                         "decided_at": stored.decided_at.isoformat(),
                         "created": decided.created, "run_status": decided.run_status},
                        status=201 if decided.created else 200)


@router.post("/{uuid:run_id}/continue", url_name="api_run_continue",
             response=answers({200: None}, 400, 404, 409, 413),
             summary="Go on from the breakpoint the run is paused at")
def continue_run(request: HttpRequest, run_id: uuid.UUID, body: ContinueBody) -> JsonResponse:
    """Go on from the breakpoint the run is paused at: run on, step one call or one
    round, or abort; optionally with edited arguments for the held calls (call id ->
    object) or a message added before the model call. `{"pause", "run_status"}`."""
    run = visible(request, run_id)
    continued = breakpoints.continue_run(run=run, user=request.user, step=body.step,
                                         arguments=body.arguments, message=body.message)
    return JsonResponse({"pause": pause_json(continued.pause),
                         "run_status": continued.run_status})


def pause_json(pause: RunPause | None) -> dict[str, Any] | None:
    """A breakpoint's pause as the API shows it (here and in a run's detail)."""
    if pause is None:
        return None
    return {"round": pause.round_index + 1, "before": pause.before, "calls": pause.call_ids,
            "reason": pause.reason, "resolution": pause.resolution or None,
            "resolved_by": pause.resolved_by_label or None}
