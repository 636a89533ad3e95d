"""The audit log's tool pages: the tools index, a tool's page (statistics, chart, recent
calls, definition versions; its Try it form from `tryit_form`) and the diff of two
versions. Everything is limited to what the viewer may see."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from tools_app.audit.call_filters import STATE_NAMES
from tools_app.audit.costs import calls_cost
from tools_app.audit.selectors import (
    DiffError,
    call_rows,
    calls_for_user,
    diff_versions,
    version_by_hash,
    versions_of,
)
from tools_app.audit.tool_stats import tool_stats
from tools_app.audit.tools_overview import RECENT_TIMED, tools_overview
from tools_app.models import McpServer, ToolCall, ToolKind, ToolRegistration
from tools_app.web.pages.access import AuthenticatedHttpRequest
from tools_app.web.pages.audit.tryit_form import tryit_context
from tools_app.web.pages.charts import calls_chart, sparkline

RECENT_CALLS = 10


@require_GET
@login_required
def tools_index(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Every tool with its calls, errors, p95 and last day (`audit.tools_overview`)."""
    rows = tools_overview(calls_for_user(request.user), every_call=request.user.is_staff)
    return render(request, "tools_app/tool_index.html", {
        "tools": [(row, sparkline(row.hours)) for row in rows],
        "recent_timed": RECENT_TIMED})


@require_GET
@login_required
def tool_detail(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    context = tool_page_context(request, name)
    return render(request, "tools_app/tool_detail.html",
                  context | tryit_context(request.user, context["registration"]))


@require_GET
@login_required
def tool_figures(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    """A tool page's figures alone (statistics, chart, errors, recent calls): what the
    page asks for again when one of its try-it runs ends."""
    context = tool_page_context(request, name)
    registration = context["registration"]
    return render(request, "tools_app/_tool_figures.html", context | {
        "tryit": registration is not None and registration.enabled})


def tool_page_context(request: AuthenticatedHttpRequest, name: str) -> dict[str, Any]:
    """A tool's statistics over the calls this user may see, and its versions. A name
    with no registration has a page only if the user's calls used it (hallucinated)."""
    registration = ToolRegistration.objects.filter(name=name).first()
    calls = calls_for_user(request.user).filter(tool_name=name)
    if registration is None and not calls.exists():
        raise Http404("No such tool")
    # staff see every call of the tool: the chart adds up the counts kept per quarter hour
    stats = tool_stats(calls, every_call_of=name if request.user.is_staff else None)
    return {
        "name": name, "registration": registration, "stats": stats,
        "chart": calls_chart(stats.buckets, stats.bucket_unit),
        "recent": [(call, STATE_NAMES.get(call.state, call.state))
                   for call in call_rows(ToolCall.objects.filter(
                       pk__in=calls.order_by("-pk").values("pk")[:RECENT_CALLS]))
                   .order_by("-pk")],
        "versions": versions_of(registration) if registration else [],
        "percentiles": list(stats.percentiles.items()),
        "mcp_server": _mcp_server_of(registration),
        "cost": calls_cost(calls),
    }


def _mcp_server_of(registration: ToolRegistration | None) -> McpServer | None:
    """The server an MCP tool comes from (its registry page is linked), if it exists."""
    if registration is None or registration.kind != ToolKind.MCP:
        return None
    name = (registration.config or {}).get("server")
    return McpServer.objects.filter(name=name).first() if isinstance(name, str) else None


@require_GET
@login_required
def tool_diff(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    """Two of a tool's versions side by side as a unified diff (?old=<hash>&new=<hash>)."""
    registration = ToolRegistration.objects.filter(name=name).first()
    if registration is None:
        raise Http404("No such tool")
    unknown = sorted(set(request.GET) - {"old", "new"})
    context: dict[str, Any] = {"name": name, "lines": [], "error": None}
    try:
        if unknown:
            raise DiffError(unknown[0], f"unknown parameter {unknown[0]}: give old and new")
        old = version_by_hash(registration, "old", request.GET.get("old", ""))
        new = version_by_hash(registration, "new", request.GET.get("new", ""))
    except DiffError as exc:
        context["error"] = f"{exc.field}: {exc}"
        return render(request, "tools_app/tool_diff.html", context, status=400)
    context |= {"old": old, "new": new, "lines": diff_versions(old, new)}
    return render(request, "tools_app/tool_diff.html", context)
