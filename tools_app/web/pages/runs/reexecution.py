"""The lane's "Re-execute" area (runs/debugger/reexecution.py): the arguments editor, loaded on
demand (so a long timeline carries no editor per call) and submitted with htmx; the
re-executions, each polling for itself until it has finished; splicing one into a new
run. Only users who may see the run (its owner, or staff) reach any of it."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from tools_app.models import CallReexecution, Run, ToolCall
from tools_app.runs.debugger import reexecution
from tools_app.runs.debugger.reexecution_reads import call_lane, execution_row
from tools_app.runs.snapshot.model import ToolSnapshot
from tools_app.runs.store import selectors
from tools_app.web.pages.access import AuthenticatedHttpRequest

AREA = "tools_app/_reexec.html#area"
EXECUTION = "tools_app/_reexec.html#execution"


def _call_of(request: HttpRequest, run_id: Any, call_id: int) -> tuple[Run, ToolCall]:
    run = selectors.run_get_for_user(run_id, request.user)
    if run is None:  # not theirs (or no such run): the same answer either way
        raise Http404("No such run")
    return run, get_object_or_404(ToolCall.objects.select_related("round"), run=run,
                                  pk=call_id)


@require_http_methods(["GET", "POST"])
@login_required
def call_reexecute(request: AuthenticatedHttpRequest, run_id: Any,
                   call_id: int) -> HttpResponse:
    """GET: the lane's area with the editor open (prefilled with the call's arguments).
    POST: start a re-execution; the area again (htmx) or the run page (a plain post)."""
    run, call = _call_of(request, run_id, call_id)
    if request.method == "GET":
        return _area(request, run, call, editor=_editor(run, call))
    text = request.POST.get("arguments", "")
    try:
        arguments = reexecution.parse_arguments_text(text)
        execution = reexecution.request_reexecution(
            run=run, call=call, user=request.user,
            request=reexecution.ReexecutionRequest(
                arguments, approve=request.POST.get("approve") == "on"))
    except reexecution.ReexecutionError as exc:
        if not getattr(request, "htmx", False):
            messages.error(request, f"Not re-executed: {exc}")
            return redirect(_lane_url(run, call))
        # 400 is the status htmx swaps (htmx_config.html): the editor comes back with
        # the text as typed and what is wrong with it.
        return _area(request, run, call, status=400, editor=_editor(
            run, call, text=text, error=str(exc), problems=exc.problems))
    if not getattr(request, "htmx", False):
        messages.info(request, f"Re-execution {execution.number} started")
        return redirect(_lane_url(run, call))
    return _area(request, run, call, editor=_editor(run, call, text=text))


def _editor(run: Run, call: ToolCall, *, text: str | None = None, error: str = "",
            problems: dict[str, str] | None = None) -> dict[str, Any]:
    problem = reexecution.runnable_problem(run, call)
    tool = _tool_or_none(run, call)
    if text is None:
        text = (json.dumps(call.arguments, indent=2, ensure_ascii=False)
                if call.arguments is not None else call.arguments_raw or "{}")
    return {"text": text, "error": error or problem or "", "problems": problems or {},
            "refused": problem is not None,
            "requires_approval": bool(tool and tool.requires_approval),
            "version": (tool.version_hash if tool else "")[:12]}


def _tool_or_none(run: Run, call: ToolCall) -> ToolSnapshot | None:
    try:
        return reexecution.snapshot_tool(run, call)
    except reexecution.ReexecutionError:
        return None


def _area(request: HttpRequest, run: Run, call: ToolCall, *, editor: dict[str, Any],
          status: int = 200) -> HttpResponse:
    return render(request, AREA, {"run": run, "call": call_lane(run, call),
                                  "editor": editor}, status=status)


def _lane_url(run: Run, call: ToolCall) -> str:
    return reverse("run_detail", kwargs={"run_id": run.pk}) + f"#call-{call.pk}"


@require_POST
@login_required
def call_reexecute_check(request: AuthenticatedHttpRequest, run_id: Any,
                         call_id: int) -> JsonResponse:
    """Arguments checked as the user types (the body is the JSON text): the problems by
    JSON pointer of the arguments ("" for the whole object)."""
    run, call = _call_of(request, run_id, call_id)
    try:
        tool = reexecution.snapshot_tool(run, call)
        text = request.body.decode("utf-8")
        problems = reexecution.argument_problems(tool, reexecution.parse_arguments_text(text))
    except UnicodeDecodeError:
        problems = {"": "the arguments are not UTF-8 text"}
    except reexecution.ReexecutionError as exc:
        problems = exc.problems or {"": str(exc)}
    return JsonResponse({"ok": not problems, "problems": problems})


def _execution_of(request: HttpRequest, run_id: Any, call_id: int,
                  number: int) -> tuple[Run, CallReexecution]:
    run, call = _call_of(request, run_id, call_id)
    execution = get_object_or_404(CallReexecution.objects.select_related("tool_call__round"),
                                  tool_call=call, number=number)
    return run, execution


@require_GET
@login_required
def call_execution(request: AuthenticatedHttpRequest, run_id: Any, call_id: int,
                   number: int) -> HttpResponse:
    """One re-execution as its lane shows it (a pending one polls this until it ends)."""
    run, execution = _execution_of(request, run_id, call_id, number)
    return render(request, EXECUTION, {"run": run, "execution": execution_row(execution)})


@require_POST
@login_required
def call_splice(request: AuthenticatedHttpRequest, run_id: Any, call_id: int,
                number: int) -> HttpResponse:
    """Splice and continue: a new run with this re-execution's result in place of the
    call's; the new run's page."""
    run, execution = _execution_of(request, run_id, call_id, number)
    try:
        new = reexecution.splice(run=run, execution=execution, user=request.user)
    except reexecution.ReexecutionError as exc:
        messages.error(request, str(exc))
        return redirect(_lane_url(run, execution.tool_call))
    return redirect("run_detail", run_id=new.pk)
