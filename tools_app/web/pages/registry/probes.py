"""An endpoint's capability probe as the pages show it (the endpoints page, the
playground's summary): its stored report, an error that several checks share shown
once, and, while a probe someone asked for has not reported yet, that it is under way.
Such a report polls itself (htmx, every 2 s) until the probe's report is stored; the
fragment that comes back without the poll stops it.

"Asked" lives in the cache (shared by every process when there is Redis, else the one
process's own), with the report's time at the asking: the probe is done when the stored
report is another one, whatever the clocks of the worker and the web process say."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_GET

from tools_app.models import ModelEndpoint

# A probe makes five checks of at most a minute each; one never heard of after this
# (no worker ran it) stops being shown as under way.
ASKED_FOR_SECONDS = 600


def _key(endpoint_id: Any) -> str:
    return f"agentforge:probe-asked:{endpoint_id}"


def _stamp(moment: datetime | None) -> str:
    return moment.isoformat() if moment is not None else ""


def mark_asked(endpoint: ModelEndpoint, user: Any) -> None:
    """Note that `user` asked for a probe of `endpoint` now (the task is enqueued)."""
    cache.set(_key(endpoint.pk), {"before": _stamp(endpoint.capability_checked_at),
                                  "at": timezone.now().isoformat(),
                                  "by": user.get_username()}, ASKED_FOR_SECONDS)


def probe_views(endpoints: Iterable[ModelEndpoint]) -> list[dict[str, Any]]:
    """Each endpoint's probe as the pages show it (`probe_view`), with one cache read."""
    endpoints = list(endpoints)
    asked = cache.get_many([_key(e.pk) for e in endpoints])
    return [probe_view(e, asked.get(_key(e.pk))) for e in endpoints]


def probe_view(endpoint: ModelEndpoint, asked: dict[str, str] | None) -> dict[str, Any]:
    """`{"endpoint", "checks", "probing"}`: the stored report's checks (an error detail
    already shown for an earlier check is `same_as` that check instead), and who asked
    for the probe under way and when (None when none is)."""
    probing = None
    if asked is not None and asked.get("before") == _stamp(endpoint.capability_checked_at):
        probing = {"by": asked.get("by", ""), "at": parse_datetime(asked.get("at", ""))}
    return {"endpoint": endpoint, "probing": probing,
            "checks": _checks(endpoint.capability_report)}


def _checks(report: Any) -> list[dict[str, Any]]:
    checks = report.get("checks") if isinstance(report, dict) else None
    first_with: dict[str, str] = {}  # an error's detail -> the first check that had it
    rows = []
    for check in checks if isinstance(checks, list) else []:
        if not isinstance(check, dict):
            continue
        row = dict(check)
        if check.get("status") == "error":
            detail = str(check.get("detail") or "")
            if detail in first_with:
                row["same_as"] = first_with[detail]
            else:
                first_with[detail] = str(check.get("name") or "")
        rows.append(row)
    return rows


@require_GET
@login_required
def endpoint_probe_report(request: HttpRequest, endpoint_id: Any) -> HttpResponse:
    """One endpoint's probe report as a fragment, for its poll: the endpoints page's
    section, or the playground's summary cell (`?in=playground`)."""
    endpoint = get_object_or_404(ModelEndpoint, pk=endpoint_id)
    probe = probe_view(endpoint, cache.get(_key(endpoint.pk)))
    template = ("tools_app/playground.html#probe_cell" if request.GET.get("in") == "playground"
                else "tools_app/endpoint_list.html#probe")
    return render(request, template, {"probe": probe})
