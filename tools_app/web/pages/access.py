"""Who may open what, for the pages: the signed-in request's type and a run looked up
among the runs its user may see (a 404 for any other)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.http import Http404, HttpRequest

from tools_app.models import Run
from tools_app.runs.store import selectors


class AuthenticatedHttpRequest(HttpRequest):
    """The request a `@login_required` view is handed: the user is signed in.

    For the type checker only (django-stubs' recipe): no request is of this class.
    """

    user: User


def run_for_user(request: HttpRequest, run_id: Any) -> Run:
    run = selectors.run_get_for_user(run_id, request.user)
    if run is None:
        raise Http404("No such run")
    return run
