"""The endpoints page: each endpoint's probe report and what its runs cost, and the
button that asks for a probe."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST
from django_ratelimit.core import is_ratelimited

from tools_app.audit.costs import endpoint_costs
from tools_app.models import ModelEndpoint
from tools_app.runs.snapshot.frozen import price_section
from tools_app.runs.store import selectors
from tools_app.runs.tasks import enqueue_probe
from tools_app.runs.worker.probing import may_probe
from tools_app.web.pages.access import AuthenticatedHttpRequest
from tools_app.web.pages.registry.probes import mark_asked, probe_views


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
