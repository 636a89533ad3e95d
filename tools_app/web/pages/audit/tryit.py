"""The tool page's "Try it": the form's context, the submit (checks the arguments, then
starts a try-it run: runs/debugger/tryit.py) and the result panel the page polls until the run
ends (then the page's figures are read again). Any signed-in user may try an enabled tool;
the run is theirs."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from tools_app.models import Run, ToolRegistration
from tools_app.runs.debugger.tryit import (
    TryItError,
    checked_arguments,
    is_tryit_of,
    parse_arguments_text,
    tryit_create,
    tryit_outcome,
)
from tools_app.runs.store import selectors
from tools_app.web.pages.access import AuthenticatedHttpRequest
from tools_app.web.pages.audit.tools import tool_page_context
from tools_app.web.pages.audit.tryit_form import recent_choices, tryit_context


def _registration(name: str) -> ToolRegistration:
    registration = ToolRegistration.objects.filter(name=name).first()
    if registration is None:
        raise Http404("No such tool")
    return registration


@require_POST
@login_required
def tool_try(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    """Start a try-it run with the submitted arguments (the `arguments` field, JSON).
    With htmx the answer is the result panel (200) or the problems (400); a plain POST
    goes to the run's page, or back to the tool page with the problems."""
    registration = _registration(name)
    text = request.POST.get("arguments", "")
    htmx = bool(getattr(request, "htmx", False))
    try:
        run = tryit_create(user=request.user, tool=registration,
                           arguments=parse_arguments_text(text))
    except TryItError as exc:
        context = {"name": name, "error": str(exc), "problems": exc.problems}
        if htmx:
            return render(request, "tools_app/_tryit_result.html", context, status=exc.status)
        return render(request, "tools_app/tool_detail.html",
                      tool_page_context(request, name) | tryit_context(
                          request.user, registration, text=text) | {"tryit_error": context},
                      status=exc.status)
    if not htmx:
        return redirect("run_detail", run_id=run.pk)
    return _ended(run, render(request, "tools_app/_tryit_result.html", {
        "name": name, "outcome": tryit_outcome(run), "started": True,
        "recent": recent_choices(request.user, name)}))


@require_GET
@login_required
def tool_try_result(request: AuthenticatedHttpRequest, name: str, run_id: Any) -> HttpResponse:
    """The result panel of one of the user's try-it runs of this tool (polled until the
    run ends: the panel stops asking once it is finished)."""
    run = selectors.run_get_for_user(run_id, request.user)
    if run is None or not is_tryit_of(run, name):
        raise Http404("No such try-it run")
    return _ended(run, render(request, "tools_app/_tryit_result.html", {
        "name": name, "outcome": tryit_outcome(run)}))


def _ended(run: Run, response: HttpResponse) -> HttpResponse:
    """The result panel, which tells the page when the run has ended (the event
    "tryit-finished": the tool's figures come again, _tool_figures.html)."""
    if run.is_terminal:
        response["HX-Trigger"] = "tryit-finished"
    return response


@require_POST
@login_required
def tool_check_arguments(request: AuthenticatedHttpRequest, name: str) -> JsonResponse:
    """The arguments checked as the user types (the body is the JSON text): each problem
    with its JSON pointer, as a try would report them. Nothing is stored or run."""
    registration = _registration(name)
    try:
        text = request.body.decode("utf-8")
        checked_arguments(registration, parse_arguments_text(text))
        problems: list[dict[str, str]] = []
    except UnicodeDecodeError:
        problems = [{"pointer": "", "message": "the arguments are not UTF-8 text"}]
    except TryItError as exc:
        problems = exc.problems
    return JsonResponse({"ok": not problems, "problems": problems})
