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
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect
from django_ratelimit.core import is_ratelimited

from ..engine import ChatRequestParameters, NamedToolChoice
from ..models import (
    TERMINAL_STATUSES,
    ModelEndpoint,
    PlaygroundState,
    Round,
    Run,
    RunStatus,
    ToolCall,
)
from ..runs import rerun, selectors, services
from ..runs.filters import FilterError, Page, filtered_runs
from ..runs.probing import may_probe
from ..runs.tasks import enqueue_probe
from .export import export_response
from .forms import PlaygroundForm


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
    return render(request, "tools_app/playground.html",
                  {"form": form, "endpoints": selectors.endpoints_for_playground(),
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
            messages=services.conversation(system_prompt=data["system_prompt"],
                                           user_message=data["user_message"]),
            parameters=ChatRequestParameters(tool_choice=choice if data["tools"] else None),
            policy_overrides={"parallel": data["parallel"],
                              "max_round_trips": data["max_round_trips"]},
        )
    except services.RunRequestError as exc:
        form.add_error(None, str(exc))
        return None
    PlaygroundState.objects.update_or_create(user=request.user,
                                             defaults={"data": form.remembered()})
    return run


def _remembered(request: AuthenticatedHttpRequest) -> dict[str, Any]:
    state = PlaygroundState.objects.filter(user_id=request.user.pk).first()
    if state is not None:
        return dict(state.data)
    policy = selectors.default_policy()
    return {"policy": policy.pk if policy else None, "parallel": True, "tool_choice": "auto",
            "user_message": "What's the weather in Hangzhou and in Paris?"}


def run_url(run: Run) -> str:
    from django.urls import reverse

    return reverse("run_detail", kwargs={"run_id": run.pk})


@require_GET
@login_required
def run_detail(request: AuthenticatedHttpRequest, run_id: Any) -> HttpResponse:
    run = _run_for_user(request, run_id)
    return render(request, "tools_app/run_detail.html",
                  {"run": run, "rounds": selectors.round_views(run), "seq": run.last_seq})


@require_POST
@login_required
def run_cancel(request: AuthenticatedHttpRequest, run_id: Any) -> HttpResponse:
    run = services.run_cancel(run=_run_for_user(request, run_id))
    messages.info(request, f"Run {run.status}")
    return redirect("run_detail", run_id=run.pk)


@require_POST
@login_required
def run_rerun(request: AuthenticatedHttpRequest, run_id: Any) -> HttpResponse:
    run = _run_for_user(request, run_id)
    mode = request.POST.get("mode", "as_it_was")
    try:
        new = rerun.run_rerun(run=run, user=request.user,
                              mode=mode)  # type: ignore[arg-type]  # checked inside
    except rerun.RerunError as exc:
        messages.error(request, f"Cannot rerun: {exc}")
        return redirect("run_detail", run_id=run.pk)
    return redirect("run_detail", run_id=new.pk)


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


@require_GET
@login_required
def run_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The runs this user may see, filtered as `GET /api/runs` filters them, newest
    first, a keyset page at a time; the filters live in the URL (shareable, and the
    form updates the list with htmx, pushing the URL, so the back button works)."""
    # A form sends every field: an empty one is no filter.
    filters = {k: v for k, v in request.GET.dict().items() if v.strip()}
    status, error = 200, None
    try:
        page = filtered_runs(selectors.run_list_for_user(request.user),
                             {"limit": str(RUNS_PAGE_SIZE)} | filters)
    except FilterError as exc:
        status, error, page = 400, f"{exc.field}: {exc}", Page([], None)
    shown = {k: v for k, v in filters.items() if k not in ("cursor", "limit")}
    response = render(request, "tools_app/run_list.html", {
        "runs": page.runs, "error": error, "filters": shown,
        "next_query": urlencode(filters | {"cursor": page.next_cursor})
        if page.next_cursor else None,
        "filters_query": urlencode(shown), "paged": "cursor" in filters,
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
    return render(request, "tools_app/endpoint_list.html",
                  {"endpoints": selectors.endpoints_for_playground(),
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
    messages.info(request, f"Probing {endpoint.name}; reload in a few seconds for the report.")
    return redirect("endpoint_list")
