"""The re-executions router of the JSON API (runs/debugger/reexecution.py), bearer-token
auth like the rest. `<call>` is the tool call's row id (`GET /api/calls`' `id`; `row_id`
in a run's detail).

POST /api/runs/<id>/calls/<call>/execute      {"arguments": {...}, "approve"?: true}
     -> 202 {"id", "number", "state", "url"}: the re-execution runs in a worker; poll url
GET  /api/runs/<id>/calls/<call>/executions/<n>           one re-execution
POST /api/runs/<id>/calls/<call>/executions/<n>/splice    -> 201 the new run (200: the run
                                                               an earlier identical splice made)

Refusals: 404 for a run the user may not see (or no such call); 400 for arguments that
do not fit the tool's schema (`problems` by JSON pointer) or a missing approval; 409 for
a hallucinated tool, a tool that can no longer run, or a call not finished yet.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.http import HttpRequest, JsonResponse
from ninja import Router

from tools_app.models import CallReexecution, Run, ToolCall
from tools_app.runs.debugger import reexecution
from tools_app.runs.debugger.reexecution_reads import execution_row
from tools_app.runs.snapshot.model import snapshot_of
from tools_app.web.api.base import ApiError, answers, visible
from tools_app.web.api.runs import execution_url, reexecution_json
from tools_app.web.api.schemas import Created, ExecuteBody, Queued

router = Router(tags=["re-executions"])
CALL = "/{uuid:run_id}/calls/{int:call_id}"


def _call(request: HttpRequest, run_id: uuid.UUID, call_id: int) -> tuple[Run, ToolCall]:
    run = visible(request, run_id)
    call = ToolCall.objects.select_related("round").filter(run=run, pk=call_id).first()
    if call is None:
        raise ApiError(404, "unknown_call", f"The run has no tool call {call_id}")
    return run, call


@router.post(f"{CALL}/execute", url_name="api_call_execute",
             response=answers({202: Queued}, 400, 404, 409, 413),
             summary="Re-execute the tool call, in a worker")
def execute_call(request: HttpRequest, run_id: uuid.UUID, call_id: int,
                 body: ExecuteBody) -> JsonResponse:
    run, call = _call(request, run_id, call_id)
    execution = reexecution.request_reexecution(
        run=run, call=call, user=request.user,
        request=reexecution.ReexecutionRequest(body.arguments, approve=body.approve))
    return JsonResponse({"id": execution.pk, "number": execution.number,
                         "state": execution.state,
                         "url": execution_url(execution.run_id, execution.tool_call_id,
                                              execution.number)}, status=202)


@router.get(f"{CALL}/executions/{{int:number}}", url_name="api_call_execution",
            response=answers({200: None}, 404),
            summary="One re-execution of the call")
def get_execution(request: HttpRequest, run_id: uuid.UUID, call_id: int,
                  number: int) -> JsonResponse:
    return JsonResponse(execution_json(_execution(request, run_id, call_id, number)[1]))


@router.post(f"{CALL}/executions/{{int:number}}/splice", url_name="api_call_splice",
             response=answers({200: Created, 201: Created}, 404, 409),
             summary="A new run with this re-execution's result spliced in")
def splice_execution(request: HttpRequest, run_id: uuid.UUID, call_id: int,
                     number: int) -> JsonResponse:
    run, found = _execution(request, run_id, call_id, number)
    new, made = reexecution.splice_once(run=run, execution=found, user=request.user)
    # A repeated request (a client's retry) gets the run the first one made: 200.
    return JsonResponse({"id": str(new.pk), "status": new.status, "parent": str(run.pk),
                         "splice": _spliced(new), "url": f"/runs/{new.pk}/"},
                        status=201 if made else 200)


def _execution(request: HttpRequest, run_id: uuid.UUID, call_id: int,
               number: int) -> tuple[Run, CallReexecution]:
    run, call = _call(request, run_id, call_id)
    found = (CallReexecution.objects.select_related("tool_call__round")
             .filter(tool_call=call, number=number).first())
    if found is None:
        raise ApiError(404, "unknown_execution", f"The call has no re-execution {number}")
    return run, found


def execution_json(execution: CallReexecution) -> dict[str, Any]:
    return reexecution_json(execution_row(execution), str(execution.run_id))


def _spliced(run: Run) -> dict[str, Any]:
    section = snapshot_of(run).splice
    assert section is not None  # a splice always writes it
    return section.stored()
