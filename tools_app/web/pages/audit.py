"""The audit log's pages: every tool call across runs (filtered, paged, exported), the
tools index, a tool's page (statistics, chart, recent calls, definition versions) and
the diff of two versions. Everything is limited to what the viewer may see."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.db.models import QuerySet
from django.db.models.functions import Substr
from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.views.decorators.http import require_GET

from tools_app.audit.call_filters import STATE_LABELS, STATE_NAMES, CallPage, filtered_calls
from tools_app.audit.call_sorts import SORTS, Sort, sort_of
from tools_app.audit.call_totals import CallTotals, call_totals, slot_count
from tools_app.audit.costs import calls_cost
from tools_app.audit.run_filters import FilterError
from tools_app.audit.selectors import (
    DiffError,
    call_rows,
    calls_for_user,
    calls_listed_for_user,
    diff_versions,
    handler_names,
    version_by_hash,
    versions_of,
)
from tools_app.audit.tool_stats import tool_stats
from tools_app.audit.tools_overview import RECENT_TIMED, tools_overview
from tools_app.models import McpServer, RunStatus, ToolCall, ToolKind, ToolRegistration
from tools_app.runs.store import selectors
from tools_app.web.export import calls_export_response
from tools_app.web.pages.access import AuthenticatedHttpRequest
from tools_app.web.pages.charts import calls_chart, sparkline
from tools_app.web.pages.timeline_tags import percent
from tools_app.web.pages.tryit_form import tryit_context

CALLS_PAGE_SIZE = 50
RECENT_CALLS = 10
# How much of a call's arguments and error a row reads (its expander shows this much;
# the run page shows all of it).
CELL_CHARS = 4_000
# The sortable columns: the sort a click asks for first, then the other direction.
SORT_COLUMNS = {"tool": ("tool", "-tool"), "duration": ("-duration", "duration"),
                "started": ("started", "-started")}


def call_list_rows(calls: QuerySet[ToolCall]) -> QuerySet[ToolCall]:
    """What a row of the calls page shows: `call_rows`, with the arguments and the error
    message read up to CELL_CHARS characters (one more tells that there is more)."""
    return (call_rows(calls).defer("arguments_raw", "error_message")
            .annotate(arguments_head=Substr("arguments_raw", 1, CELL_CHARS + 1),
                      error_head=Substr("error_message", 1, CELL_CHARS + 1)))


@require_GET
@login_required
def call_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Every call this user may see, filtered like `GET /api/calls`, newest first or
    sorted, a keyset page at a time; the filters live in the URL as on the runs page.
    The selection's totals come in a request of their own (`call_list_totals`), so
    counting never holds up the list."""
    filters = {k: v for k, v in request.GET.dict().items() if v.strip()}  # empty = none
    visible = calls_for_user(request.user)
    listed = calls_listed_for_user(request.user)
    status, error, sort = 200, None, None
    try:
        sort = sort_of(filters)
        page = filtered_calls(listed, {"limit": str(CALLS_PAGE_SIZE)} | filters,
                              call_list_rows, matches=_known_count(request, filters, sort))
    except FilterError as exc:
        status, error, page = 400, f"{exc.field}: {exc}", CallPage([], None)
    shown = {k: v for k, v in filters.items() if k not in ("cursor", "limit", "sort")}
    response = render(request, "tools_app/call_list.html", {
        "calls": [(call, STATE_NAMES.get(call.state, call.state)) for call in page.calls],
        "error": error, "filters": shown, "sort": sort,
        "sort_links": _sort_links(shown, sort), "cell_chars": CELL_CHARS,
        "next_query": urlencode(filters | {"cursor": page.next_cursor})
        if page.next_cursor else None,
        "first_query": urlencode(shown | ({"sort": sort.name} if sort else {})),
        "filters_query": urlencode(shown), "paged": "cursor" in filters,
        "statuses": RunStatus.choices, "states": list(STATE_LABELS.items()),
        "endpoint_names": selectors.endpoint_names(), "tool_names": selectors.tool_names(),
        "handlers": handler_names(visible, every_call=request.user.is_staff),
    }, status=status)
    if getattr(request, "htmx", False):
        query = urlencode(filters)
        response["HX-Push-Url"] = f"{request.path}?{query}" if query else request.path
    return response


def _known_count(request: AuthenticatedHttpRequest, filters: dict[str, str],
                 sort: Sort | None) -> int | None:
    """How many calls a sorted page of staff's selects, when the per-tool counts say it
    at once (no filter but a tool): what lets SQLite choose how to sort them."""
    if sort is None or not request.user.is_staff:
        return None
    if not set(filters) <= {"tool", "sort", "cursor", "limit"}:
        return None
    return slot_count(calls_for_user(request.user).db, filters.get("tool"))


@require_GET
@login_required
def call_list_totals(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The totals of the calls list's selection (its filters, as the list has them):
    the line the list asks for once it is shown (`audit.call_totals`)."""
    filters = {k: v for k, v in request.GET.dict().items() if v.strip()}
    try:
        totals = call_totals(calls_listed_for_user(request.user), filters,
                             every_call=request.user.is_staff)
    except FilterError as exc:
        return HttpResponseBadRequest(f"{exc.field}: {exc}", content_type="text/plain")
    return render(request, "tools_app/_call_totals.html", {"totals": totals_text(totals)})


def totals_text(totals: CallTotals | None) -> dict[str, str] | None:
    """The selection's totals as the page says them: exact counts, "more than" the
    cap, or that counting took too long."""
    if totals is None:
        return None
    calls, errors = totals.calls, totals.errors
    if calls.value is None:
        return {"calls": "Not counted: too many calls to count quickly (narrow the "
                         "filters to see totals)", "errors": ""}
    said = {"calls": _counted(calls.value, calls.more, "call")}
    said["errors"] = ("errors not counted" if errors.value is None
                      else _counted(errors.value, errors.more, "error"))
    if totals.error_rate is not None:
        said["errors"] += f" ({percent(totals.error_rate)})"
    return said


def _counted(value: int, more: bool, noun: str) -> str:
    if more:
        return f"more than {value:,} {noun}s"
    return f"{value:,} {noun}{'' if value == 1 else 's'}"


def _sort_links(shown: dict[str, str], sort: Sort | None) -> dict[str, dict[str, str]]:
    """Each sortable column's link (the filters kept, the page's cursor dropped), and
    its aria-sort when the list is sorted by it."""
    links = {}
    for column, (first, second) in SORT_COLUMNS.items():
        current = sort.name if sort else None
        target = second if current == first else first
        state = ("" if current not in (first, second) else
                 "descending" if sort and sort.descending else "ascending")
        links[column] = {"href": "?" + urlencode(shown | {"sort": target}), "aria": state,
                         "title": f"Sort: {SORTS[target].label.lower()}",
                         "arrow": {"ascending": "↑", "descending": "↓"}.get(state, "")}
    return links


@require_GET
@login_required
def calls_export(request: AuthenticatedHttpRequest, fmt: str) -> HttpResponseBase:
    try:
        return calls_export_response(calls_listed_for_user(request.user), request.GET.dict(),
                                     fmt)
    except FilterError as exc:
        return HttpResponseBadRequest(f"{exc.field}: {exc}", content_type="text/plain")


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
