"""Thin views: one access selector, one form, one service, then redirect or render."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    JsonResponse,
)
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect
from django_ratelimit.core import is_ratelimited

from tools_app.audit.costs import endpoint_costs
from tools_app.audit.run_filters import (
    NEWEST_FIRST,
    SORTS,
    FilterError,
    Page,
    Sort,
    filtered_runs,
    matching_runs,
    of_kind,
    sort_of,
)
from tools_app.audit.run_totals import Tally, run_total
from tools_app.engine import ChatMessage, ChatRequestParameters, NamedToolChoice
from tools_app.models import (
    TERMINAL_STATUSES,
    ModelEndpoint,
    PlaygroundState,
    Round,
    Run,
    RunStatus,
    ToolCall,
)
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
from tools_app.runs.snapshot.frozen import price_section
from tools_app.runs.snapshot.model import snapshot_of
from tools_app.runs.store import selectors
from tools_app.runs.tasks import enqueue_probe
from tools_app.runs.worker.probing import may_probe
from tools_app.web.export import export_response
from tools_app.web.pages.forms import PlaygroundForm
from tools_app.web.pages.probes import mark_asked, probe_views


class AuthenticatedHttpRequest(HttpRequest):
    """The request a `@login_required` view is handed: the user is signed in.

    For the type checker only (django-stubs' recipe): no request is of this class.
    """

    user: User


@require_GET
@login_required
def home(request: AuthenticatedHttpRequest) -> HttpResponse:
    return redirect("playground")


def _run_for_user(request: HttpRequest, run_id: Any) -> Run:
    run = selectors.run_get_for_user(run_id, request.user)
    if run is None:
        raise Http404("No such run")
    return run


@require_http_methods(["GET", "POST"])
@login_required
def playground(request: AuthenticatedHttpRequest) -> HttpResponse:
    if request.method == "POST":
        form = PlaygroundForm(request.POST)
        if form.is_valid():
            run = _start_from_form(request, form)
            if run is not None:
                if getattr(request, "htmx", False):
                    return HttpResponseClientRedirect(run_url(run))
                return redirect("run_detail", run_id=run.pk)
    else:
        form = PlaygroundForm(initial=_remembered(request))
    script_tools = selectors.script_tools()
    return render(request, "tools_app/playground.html",
                  {"form": form, "probes": probe_views(selectors.endpoints_for_playground()),
                   "scripted_ids": selectors.scripted_endpoint_ids(),
                   "script_tools": json.dumps(script_tools),
                   "script_calls": script_tools.get(str(form["endpoint"].value()), []),
                   "may_probe": may_probe(request.user)})


def _start_from_form(request: AuthenticatedHttpRequest, form: PlaygroundForm) -> Run | None:
    data = form.cleaned_data
    choice: Any = data["tool_choice"]
    if choice == "named":
        choice = NamedToolChoice(name=data["tool_choice_name"].strip())
    try:
        run = services.run_create(
            user=request.user, endpoint=data["endpoint"], tools=list(data["tools"]),
            policy=data["policy"],
            messages=_messages_of(data),
            parameters=ChatRequestParameters(tool_choice=choice if data["tools"] else None),
            policy_overrides={"parallel": data["parallel"],
                              "max_round_trips": data["max_round_trips"],
                              "cost_cap_usd": (None if data["cost_cap_usd"] is None
                                               else str(data["cost_cap_usd"]))},
            breakpoints=form.breakpoints(),
        )
    except services.RunRequestError as exc:
        form.add_error(None, str(exc))
        return None
    PlaygroundState.objects.update_or_create(user=request.user,
                                             defaults={"data": form.remembered()})
    return run


def _messages_of(data: dict[str, Any]) -> list[ChatMessage]:
    """The starting conversation: pasted whole, or a system prompt and a user message."""
    if data["input_mode"] == "conversation":
        return list(data["messages"])
    return services.conversation(system_prompt=data["system_prompt"],
                                 user_message=data["user_message"])


def _remembered(request: AuthenticatedHttpRequest) -> dict[str, Any]:
    state = PlaygroundState.objects.filter(user_id=request.user.pk).first()
    if state is not None:
        return dict(state.data)
    policy = selectors.default_policy()
    endpoint = selectors.playground_default_endpoint()
    return {"policy": policy.pk if policy else None, "parallel": True, "tool_choice": "auto",
            "input_mode": "simple",
            "endpoint": str(endpoint.pk) if endpoint else None,
            "tools": selectors.tools_a_script_calls(endpoint) if endpoint else [],
            "user_message": selectors.PLAYGROUND_DEFAULT_MESSAGE}


def run_url(run: Run) -> str:
    from django.urls import reverse

    return reverse("run_detail", kwargs={"run_id": run.pk})


@require_GET
@login_required
def run_detail(request: AuthenticatedHttpRequest, run_id: Any) -> HttpResponse:
    run = _run_for_user(request, run_id)
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
    run = services.run_cancel(run=_run_for_user(request, run_id), user=request.user)
    messages.info(request, _cancel_text(run))
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
    run = _run_for_user(request, run_id)
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
    return fixture_response(_run_for_user(request, run_id))


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
    run = _run_for_user(request, run_id)
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
    problems = "; ".join(f"{where or 'arguments'}: {what}"
                         for where, what in error.problems.items())
    return f"{prefix}: {error}" + (f" ({problems})" if problems else "")


@require_POST
@login_required
def run_continue(request: AuthenticatedHttpRequest, run_id: Any) -> HttpResponse:
    """The paused run's buttons (`step`: run, call, round, abort), with the held calls'
    arguments as edited (`arguments-<call pk>`) and a message before the model call."""
    run = _run_for_user(request, run_id)
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
    run = _run_for_user(request, run_id)
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
    run = _run_for_user(request, run_id)
    call = get_object_or_404(ToolCall, run=run, pk=call_id)
    response = HttpResponse(call.result_text or "", content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="call-{call.pk}-result.txt"'
    return response


@require_GET
@login_required
def round_wire(request: AuthenticatedHttpRequest, run_id: Any, index: int,
               which: str) -> HttpResponse:
    """The full wire request or response of one round, as a JSON download."""
    if which not in ("request", "response"):
        raise Http404("No such wire body")
    run = _run_for_user(request, run_id)
    round_ = get_object_or_404(Round, run=run, index=index)
    body = round_.request_json if which == "request" else round_.response_json
    response = HttpResponse(json.dumps(body, indent=2, ensure_ascii=False),
                            content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="round-{index + 1}-{which}.json"'
    return response


RUNS_PAGE_SIZE = 25
# The runs list's sortable columns: the sort a click asks for first, then the other way.
RUN_SORT_COLUMNS = {"started": ("-started", "started"), "duration": ("-duration", "duration"),
                    "errors": ("-errors", "errors")}


@require_GET
@login_required
def run_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The runs this user may see, filtered as `GET /api/runs` filters them, newest
    first or sorted, a keyset page at a time, with how many there are; the filters live
    in the URL (shareable, and the form updates the list with htmx, pushing the URL, so
    the back button works). Try-it runs are left out unless the `tryit` filter asks for
    them (`GET /api/runs` lists them unless asked not to)."""
    # A form sends every field: an empty one is no filter.
    filters = {k: v for k, v in request.GET.dict().items() if v.strip()}
    applied = _run_list_defaults(filters)
    visible = selectors.run_list_for_user(request.user)
    status, error, sort, total = 200, None, SORTS[NEWEST_FIRST], None
    try:
        sort = sort_of(applied)
        # the filters read once (a search looks its words up): counted of the kind asked
        # for, then listed
        kind = applied.get("tryit", "any")
        matched = matching_runs(visible, {k: v for k, v in applied.items() if k != "tryit"})
        total = run_total(matched, kind)
        page = filtered_runs(visible, {"limit": str(RUNS_PAGE_SIZE)} | applied,
                             matched=of_kind(matched, kind),
                             matches=total.value if total.exact else None)
    except FilterError as exc:
        status, error, page = 400, f"{exc.field}: {exc}", Page([], None)
    shown = {k: v for k, v in filters.items() if k not in ("cursor", "limit", "sort")}
    sorted_by = {"sort": filters["sort"]} if "sort" in filters else {}
    response = render(request, "tools_app/run_list.html", {
        "runs": page.runs, "error": error, "filters": shown, "total": _total_text(total),
        "tryit_hidden": applied.get("tryit") == "false" and "tryit" not in filters,
        "show_tryit_query": urlencode(shown | {"tryit": "any"} | sorted_by),
        "sort": sort, "sorted": bool(sorted_by), "sort_links": _run_sort_links(shown, sort),
        "next_query": urlencode(filters | {"cursor": page.next_cursor})
        if page.next_cursor else None,
        "first_query": urlencode(shown | sorted_by),
        # the exports list what the page lists (try-it runs left out by default)
        "filters_query": urlencode({k: v for k, v in applied.items()
                                    if k not in ("cursor", "limit", "sort")}),
        "paged": "cursor" in filters,
        "statuses": RunStatus.choices, "live_statuses": LIVE_STATUSES,
        "endpoint_names": selectors.endpoint_names(),
        "tool_names": selectors.tool_names(),
        "policy_names": selectors.policy_names(),
    }, status=status)
    if getattr(request, "htmx", False):
        # The URL the history keeps: the filters in use, not every empty field.
        query = urlencode(filters)
        response["HX-Push-Url"] = f"{request.path}?{query}" if query else request.path
    return response


def _run_list_defaults(filters: dict[str, str]) -> dict[str, str]:
    """The runs list's filters with its default: no try-it runs, unless the filters say
    which (tryit=any shows them, true only them) or ask for the runs waiting for the
    user (a try-it run of a tool that needs approval waits like any)."""
    if "tryit" in filters or filters.get("waiting_for_me") == "true":
        return filters
    return filters | {"tryit": "false"}


def _total_text(total: Tally | None) -> str:
    """"1,234 runs", "more than 10,000 runs", or why there is no count."""
    if total is None:
        return ""
    if total.value is None:
        return "Not counted: too many runs to count quickly (narrow the filters to see how many)"
    if total.more:
        return f"more than {total.value:,} runs"
    return f"{total.value:,} run{'' if total.value == 1 else 's'}"


def _run_sort_links(shown: dict[str, str], sort: Sort) -> dict[str, dict[str, str]]:
    """Each sortable column's link (the filters kept, the page's cursor dropped), and
    its aria-sort when the list is sorted by it (newest first is a sort by start)."""
    links = {}
    for column, (first, second) in RUN_SORT_COLUMNS.items():
        target = second if sort.name == first else first
        state = ("" if sort.name not in (first, second)
                 else "descending" if sort.descending else "ascending")
        links[column] = {"href": "?" + urlencode(shown | {"sort": target}), "aria": state,
                         "title": f"Sort: {SORTS[target].label.lower()}",
                         "arrow": {"ascending": " ↑", "descending": " ↓"}.get(state, "")}
    return links


# Rows of runs in these statuses poll for their own update (hx-trigger="every 2s") until
# the run ends; a row that comes back finished stops polling, having no trigger.
LIVE_STATUSES = tuple(s for s in RunStatus.values if s not in TERMINAL_STATUSES)


@require_GET
@login_required
def run_row(request: AuthenticatedHttpRequest, run_id: Any) -> HttpResponse:
    """One row of the runs list, as it is now (the row's live update)."""
    run = _run_for_user(request, run_id)
    return render(request, "tools_app/run_list.html#row",
                  {"run": run, "live_statuses": LIVE_STATUSES})


@require_GET
@login_required
def runs_export(request: AuthenticatedHttpRequest, fmt: str) -> HttpResponseBase:
    """Download the runs this user may see, filtered as `GET /api/runs` filters them."""
    try:
        return export_response(selectors.run_list_for_user(request.user),
                               request.GET.dict(), fmt)
    except FilterError as exc:
        return HttpResponseBadRequest(f"{exc.field}: {exc}", content_type="text/plain")


@require_GET
@login_required
def endpoint_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    return _endpoint_list_page(request)


def _endpoint_list_page(request: AuthenticatedHttpRequest, status: int = 200) -> HttpResponse:
    endpoints = list(selectors.endpoints_for_playground())
    # What each endpoint's runs cost, over the runs this user may see (staff: all).
    costs = endpoint_costs(selectors.run_list_for_user(request.user))
    return render(request, "tools_app/endpoint_list.html",
                  {"probes": [view | {"cost": costs.get(str(view["endpoint"].pk), (None, 0)),
                                      "price": price_section(view["endpoint"])}
                              for view in probe_views(endpoints)],
                   "may_probe": may_probe(request.user)}, status=status)


@require_POST
@login_required
def endpoint_probe(request: AuthenticatedHttpRequest, endpoint_id: Any) -> HttpResponse:
    if not may_probe(request.user):
        raise PermissionDenied("Only staff may probe endpoints (AGENTFORGE_PROBE_NON_STAFF)")
    endpoint = get_object_or_404(ModelEndpoint, pk=endpoint_id)
    if is_ratelimited(request, group="endpoint-probe", key="user",
                      rate=settings.AGENTFORGE_PROBE_RATE, increment=True):
        messages.error(request, "Too many probes: at most "
                       f"{settings.AGENTFORGE_PROBE_RATE} per user. Try again later.")
        return _endpoint_list_page(request, status=429)
    enqueue_probe(str(endpoint.pk))
    mark_asked(endpoint, request.user)
    messages.info(request, f"Probing {endpoint.name}: its report shows here as soon as the "
                  "probe ends.")
    # Back where the probe was asked for (only these two pages: no open redirect); the
    # playground's script restores the draft it saved before the probe left the page.
    if request.POST.get("back") == "playground":
        return redirect("playground")
    return redirect("endpoint_list")
