"""The runs list (/runs/): filtered as `GET /api/runs` filters, sorted, a keyset page
at a time, counted within bounds; its rows' live updates and its exports."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, HttpResponseBadRequest
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.views.decorators.http import require_GET

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
from tools_app.models import TERMINAL_STATUSES, RunStatus
from tools_app.runs.store import selectors
from tools_app.web.export import export_response
from tools_app.web.pages.access import AuthenticatedHttpRequest, run_for_user

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
        status, error, page = 400, exc.sentence, Page([], None)
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
    run = run_for_user(request, run_id)
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
        return HttpResponseBadRequest(exc.sentence, content_type="text/plain")
