"""The audit log's calls page: every tool call across runs the viewer may see (filtered,
sorted, paged), its totals and its CSV/JSONL export."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.db.models import QuerySet
from django.db.models.functions import Substr
from django.http import HttpResponse, HttpResponseBadRequest
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.views.decorators.http import require_GET

from tools_app.audit.call_filters import STATE_LABELS, STATE_NAMES, CallPage, filtered_calls
from tools_app.audit.call_sorts import SORTS, Sort, sort_of
from tools_app.audit.call_totals import CallTotals, call_totals, slot_count
from tools_app.audit.run_filters import FilterError
from tools_app.audit.selectors import (
    call_rows,
    calls_for_user,
    calls_listed_for_user,
    handler_names,
)
from tools_app.models import RunStatus, ToolCall
from tools_app.runs.store import selectors
from tools_app.web.export import calls_export_response
from tools_app.web.pages.access import AuthenticatedHttpRequest
from tools_app.web.pages.timeline_tags import percent

CALLS_PAGE_SIZE = 50
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
        status, error, page = 400, exc.sentence, CallPage([], None)
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
        return HttpResponseBadRequest(exc.sentence, content_type="text/plain")
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
        return HttpResponseBadRequest(exc.sentence, content_type="text/plain")
