""""Waiting for you": the runs waiting for a decision the user may take, as the
navigation shows them (a count, kept live by static/js/waiting.js polling `waiting`)."""

from __future__ import annotations

from typing import Any

from django import template
from django.http import HttpRequest, JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from tools_app.runs.store import selectors

register = template.Library()  # `{% load waiting %}` (settings' TEMPLATES libraries)


def waiting_state(user: Any) -> dict[str, Any]:
    """The count and the newest waiting run (id, title, owner, what it waits for, its
    run page and since when in ms), as the page renders it and the poll returns it."""
    found = selectors.waiting_for(user)
    newest = None
    if found.newest is not None:
        since = found.newest["since"]
        newest = found.newest | {
            "url": reverse("run_detail", kwargs={"run_id": found.newest["id"]}),
            "since": int(since.timestamp() * 1000) if since is not None else 0}
    return {"count": found.total, "newest": newest}


@register.inclusion_tag("tools_app/_waiting.html", takes_context=True)
def waiting_for_you(context: template.Context) -> dict[str, Any]:
    """The navigation's link to the runs waiting for the user, with their count."""
    return {"waiting": waiting_state(context["user"])}


@require_GET
def waiting(request: HttpRequest) -> JsonResponse:
    """`{"count", "newest"}` for the navigation's poll: JSON, never a redirect to the
    login page (401 when the session is gone: the poll stops)."""
    if not request.user.is_authenticated:
        return JsonResponse({"error": "not signed in"}, status=401)
    response = JsonResponse(waiting_state(request.user))
    response["Cache-Control"] = "no-store"
    return response
