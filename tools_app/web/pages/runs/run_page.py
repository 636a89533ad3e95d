"""The run page and its actions: the timeline, cancel, rerun, export as a run file,
the approval and breakpoint buttons, one round's wire bodies (its panel, and as
downloads) and the download of one call's result."""

from __future__ import annotations

import json
from typing import Any, cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from tools_app.models import Round, Run, RunStatus, ToolCall
from tools_app.runs import services
from tools_app.runs.debugger import (
    approvals,
    breakpoints,
    fork,
    lineage,
    rerun,
    run_files,
    run_header,
    timeline,
)
from tools_app.runs.snapshot.model import snapshot_of
from tools_app.runs.store import selectors
from tools_app.web.pages.access import AuthenticatedHttpRequest, run_for_user


@require_GET
@login_required
def run_detail(request: AuthenticatedHttpRequest, run_id: Any) -> HttpResponse:
    run = run_for_user(request, run_id)
    conversation = run_header.starting_conversation(run)
    snapshot = snapshot_of(run)
    labels = None
    if snapshot.fork is not None:
        # Each message of a fork's (or a splice's) conversation says what it is.
        labels = fork.conversation_labels(snapshot.fork, snapshot.splice, conversation)
        for message, mark in zip(conversation, labels.marks, strict=True):
            message |= {"mark": mark, "mark_words": fork.MARK_WORDS[mark],
                        "inherited": mark == "inherited"}
    return render(request, "tools_app/run_detail.html",
                  {"run": run, "rounds": timeline.round_views(run), "seq": run.last_seq,
                   "header": run_header.header_view(run),
                   "lineage": lineage.run_lineage(
                       run, selectors.run_list_for_user(request.user)),
                   "conversation": conversation, "fork": snapshot.fork,
                   "fork_labels": labels,
                   "whole_conversation": any(m["role"] in ("assistant", "tool")
                                             for m in conversation)})


@require_POST
@login_required
def run_cancel(request: AuthenticatedHttpRequest, run_id: Any) -> HttpResponse:
    run = services.run_cancel(run=run_for_user(request, run_id), user=request.user)
    # "Cancel requested" holds until the run ends: the live page then says how it ended.
    pending = "" if run.is_terminal else "cancel-pending"
    messages.info(request, _cancel_text(run), extra_tags=pending)
    return redirect("run_detail", run_id=run.pk)


def _cancel_text(run: Run) -> str:
    """The confirmation the run page shows after its Cancel button."""
    if run.status == RunStatus.CANCELLED:
        return "Run cancelled."
    if run.is_terminal:
        return f"The run had already ended ({run.get_status_display().lower()})."
    return "Cancel requested: the run stops at its next step (this page follows it)."


@require_POST
@login_required
def run_rerun(request: AuthenticatedHttpRequest, run_id: Any) -> HttpResponse:
    run = run_for_user(request, run_id)
    mode = request.POST.get("mode", "as_it_was")
    options = rerun.ReplayOptions(
        model=request.POST.get("model", "live"),  # type: ignore[arg-type]  # checked inside
        tools=request.POST.get("tools", "live"),  # type: ignore[arg-type]
        on_divergence=request.POST.get("on_divergence", "stop"),  # type: ignore[arg-type]
    )
    try:
        new = rerun.run_rerun(run=run, user=request.user,
                              mode=mode,  # type: ignore[arg-type]  # checked inside
                              replay=options)
    except rerun.RerunError as exc:
        messages.error(request, f"Cannot rerun: {exc}")
        return redirect("run_detail", run_id=run.pk)
    return redirect("run_detail", run_id=new.pk)


@require_GET
@login_required
def run_export(request: AuthenticatedHttpRequest, run_id: Any) -> HttpResponse:
    """The run as a regression fixture (docs/run-run_files.md), downloaded."""
    return fixture_response(run_for_user(request, run_id))


def fixture_response(run: Run) -> HttpResponse:
    """A fixture download: JSON, never rendered (its content is untrusted text)."""
    response = HttpResponse(json.dumps(run_files.export_run(run), indent=2, ensure_ascii=False),
                            content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{run_files.export_filename(run)}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


@require_POST
@login_required
def run_decide(request: AuthenticatedHttpRequest, run_id: Any) -> HttpResponse:
    """The timeline's decision buttons (`decide` = "<approve|edit|reject>:<call pk>" or
    "approve_round:<round index>"); a refusal is shown as a message on the run page."""
    run = run_for_user(request, run_id)
    kind, _, target = request.POST.get("decide", "").partition(":")
    if not target.isascii() or not target.isdigit() or len(target) > 18:
        return HttpResponseBadRequest("decide must be <decision>:<number>")
    try:
        if kind == "approve_round":
            approvals.decide_round(run=run, user=request.user, round_index=int(target))
        else:
            call = get_object_or_404(ToolCall, run=run, pk=int(target))
            approvals.decide(run=run, user=request.user,
                             request=_decision_from_form(request, kind, call))
    except approvals.DecisionError as exc:
        messages.error(request, _refusal_text(exc))
    return redirect("run_detail", run_id=run.pk)


def _decision_from_form(request: HttpRequest, kind: str,
                        call: ToolCall) -> approvals.DecisionRequest:
    arguments = None
    if kind == "edit":
        arguments = approvals.parse_arguments(request.POST.get(f"arguments-{call.pk}", ""))
    return approvals.DecisionRequest(call.call_id, kind, arguments=arguments,
                                     message=request.POST.get(f"message-{call.pk}", ""))


def _refusal_text(error: approvals.DecisionError, prefix: str = "Decision not recorded") -> str:
    """The refusal, then where it applies, each problem once (a message that already
    says it, as "not valid JSON: ..." does, is not followed by it again)."""
    problems = "; ".join(f"{where or 'arguments'}: {what}"
                         for where, what in error.problems.items() if what not in str(error))
    return f"{prefix}: {error}" + (f" ({problems})" if problems else "")


@require_POST
@login_required
def run_continue(request: AuthenticatedHttpRequest, run_id: Any) -> HttpResponse:
    """The paused run's buttons (`step`: run, call, round, abort), with the held calls'
    arguments as edited (`arguments-<call pk>`) and a message before the model call."""
    run = run_for_user(request, run_id)
    try:
        breakpoints.continue_run(run=run, user=request.user,
                                 step=request.POST.get("step", ""),
                                 arguments=_edited_held_calls(request, run),
                                 message=request.POST.get("message", "").strip())
    except approvals.DecisionError as exc:
        messages.error(request, _refusal_text(exc, "Could not continue"))
    return redirect("run_detail", run_id=run.pk)


def _edited_held_calls(request: HttpRequest, run: Run) -> dict[str, Any]:
    """Call id -> the arguments typed for it, for the held calls whose text changed."""
    edited: dict[str, Any] = {}
    pause = run.open_pause
    held = pause.call_ids if pause is not None else []
    for call in ToolCall.objects.filter(run=run, call_id__in=held):
        text = request.POST.get(f"arguments-{call.pk}")
        if text is None:
            continue
        value = approvals.parse_arguments(text)
        if value != call.arguments:
            edited[call.call_id] = value
    return edited


@require_POST
@login_required
def call_check_arguments(request: AuthenticatedHttpRequest, run_id: Any,
                         call_id: int) -> JsonResponse:
    """Edited arguments checked as the user types: the body is the JSON text; the answer
    maps each argument ("" for the whole object) to what is wrong with it."""
    run = run_for_user(request, run_id)
    call = get_object_or_404(ToolCall, run=run, pk=call_id)
    try:
        text = request.body.decode("utf-8")
        problems = approvals.argument_problems(run, call.tool_name,
                                               approvals.parse_arguments(text))
    except UnicodeDecodeError:
        problems = {"": "the arguments are not UTF-8 text"}
    except approvals.DecisionError as exc:
        problems = exc.problems
    return JsonResponse({"ok": not problems, "problems": problems})


@require_GET
@login_required
def call_result(request: AuthenticatedHttpRequest, run_id: Any, call_id: int) -> HttpResponse:
    """The full result text of one call, as a download (never rendered as HTML)."""
    run = run_for_user(request, run_id)
    call = get_object_or_404(ToolCall, run=run, pk=call_id)
    response = HttpResponse(call.result_text or "", content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="call-{call.pk}-result.txt"'
    return response


@require_GET
def round_wire_panel(request: HttpRequest, run_id: Any, index: int) -> HttpResponse:
    """One round's wire request and response and its stream, for its panel on the run
    page (loaded when the panel is opened). A page whose login ended is answered 401
    (the panel says it could not load), not sent the login page to show in the panel."""
    if not request.user.is_authenticated:
        if request.headers.get("HX-Request") == "true":
            return HttpResponse("Log in again to see this round's bodies.", status=401,
                                content_type="text/plain; charset=utf-8")
        return redirect_to_login(request.get_full_path())
    run = run_for_user(cast(AuthenticatedHttpRequest, request), run_id)
    panel = timeline.wire_panel(run, index)
    if panel is None:
        raise Http404("No such round")
    return render(request, "tools_app/run_detail.html#wire_panel", {"run": run, "panel": panel})


@require_GET
@login_required
def round_wire(request: AuthenticatedHttpRequest, run_id: Any, index: int,
               which: str) -> HttpResponse:
    """The full wire request or response of one round, as a JSON download."""
    if which not in ("request", "response"):
        raise Http404("No such wire body")
    run = run_for_user(request, run_id)
    round_ = get_object_or_404(Round, run=run, index=index)
    body = round_.request_json if which == "request" else round_.response_json
    response = HttpResponse(json.dumps(body, indent=2, ensure_ascii=False),
                            content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="round-{index + 1}-{which}.json"'
    return response
