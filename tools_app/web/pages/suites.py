"""The suites' pages: the suites (`/suites/`), one suite with its cases and a form to run
it, a case's edit page (its conversation, tools and assertions as JSON, refused with the
field and the problem), "Save as a test case" from a run page, a suite run's matrix
(`/suite-runs/<id>/`, its matrix partial polled by htmx while the run is active), one
cell's runs with their failing assertions, and two suite runs compared."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from tools_app.audit.selectors import calls_for_user
from tools_app.engine import json_nesting
from tools_app.models import ModelEndpoint, Suite, SuiteCase, SuiteCell, SuiteRun, ToolRegistration
from tools_app.runs.debugger.replay import TOOLS_MODES
from tools_app.suites.assertions import load_assertions
from tools_app.suites.history import suite_history
from tools_app.suites.matrix import cell_runs, compare_suite_runs, suite_matrix
from tools_app.suites.runner import SuiteConfigError, default_tool_mode, suite_run_start
from tools_app.suites.services import (
    CaseError,
    case_save_from_run,
    case_update,
    cases_save_from_calls,
    suite_create,
)
from tools_app.suites.tasks import enqueue_suite_run
from tools_app.web.pages.access import AuthenticatedHttpRequest, run_for_user
from tools_app.web.pages.charts import pass_rate_chart

CASE_FIELDS = ("messages", "tools", "tool_modes", "assertions")
HISTORY_RUNS = 50
"""The suite page's history chart: its latest suite runs."""


@require_GET
@login_required
def suite_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    return render(request, "tools_app/suite_list.html", {"suites": Suite.objects.all()})


@require_GET
@login_required
def suite_names(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The suites' names as <option>s: the run page's "Save as a test case" datalist."""
    return render(request, "tools_app/_suite_names.html",
                  {"names": Suite.objects.values_list("name", flat=True)})


@require_GET
@login_required
def suite_detail(request: AuthenticatedHttpRequest, suite_id: int) -> HttpResponse:
    suite = get_object_or_404(Suite, pk=suite_id)
    cases = [(case, _sentences(case)) for case in suite.cases.all()]
    visible = _visible_runs(request, suite)
    return render(request, "tools_app/suite_detail.html", {
        "suite": suite, "cases": cases, "endpoints": ModelEndpoint.objects.order_by("name"),
        "tools_modes": TOOLS_MODES, "suite_runs": visible[:20],
        "history": pass_rate_chart(suite_history(visible.order_by("-created_at")[:HISTORY_RUNS]))})


def _sentences(case: SuiteCase) -> list[str]:
    try:
        return [a.sentence() for a in load_assertions(case.assertions)]
    except ValueError:
        return ["(these assertions are not valid: edit the case)"]


def _visible_runs(request: AuthenticatedHttpRequest, suite: Suite) -> Any:
    runs = suite.runs.all()
    return runs if request.user.is_staff else runs.filter(created_by=request.user)


@require_POST
@login_required
def run_save_case(request: AuthenticatedHttpRequest, run_id: Any) -> HttpResponse:
    """"Save as a test case": the run's conversation and calls become a case of the named
    suite (created if new); the case's page opens to edit its expectations."""
    run = run_for_user(request, run_id)
    name = request.POST.get("suite", "").strip()
    try:
        with transaction.atomic():  # a suite created here goes if its case cannot
            suite = Suite.objects.filter(name=name).first() or suite_create(
                name=name, user=request.user)
            case = case_save_from_run(run=run, suite=suite, name=request.POST.get("case", ""))
    except CaseError as exc:
        messages.error(request, f"Cannot save the run as a test case: {exc}")
        return redirect("run_detail", run_id=run.pk)
    messages.success(request, f"Saved as the case {case.name!r} of the suite {suite.name!r}: "
                              "its calls are now its expectations, edit them here.")
    return redirect("suite_case_edit", suite_id=suite.pk, case_id=case.pk)


@require_POST
@login_required
def calls_save_case(request: AuthenticatedHttpRequest) -> HttpResponse:
    """"Save as a test case" on the calls ticked in /calls/: one case per run they come
    from (`cases_save_from_calls`); one case opens to edit, several their suite."""
    ids = [raw for raw in request.POST.getlist("call") if raw.isdigit()]
    calls = list(calls_for_user(request.user).filter(pk__in=ids).order_by("pk"))
    back = "/calls/" + (f"?{request.POST['filters']}" if request.POST.get("filters") else "")
    name = request.POST.get("suite", "").strip()
    try:
        if len(calls) != len(set(request.POST.getlist("call"))):
            raise CaseError("Some ticked calls are not yours or no longer exist", field="call")
        with transaction.atomic():  # a suite created here goes if its cases cannot
            suite = Suite.objects.filter(name=name).first() or suite_create(
                name=name, user=request.user)
            cases = cases_save_from_calls(calls=calls, suite=suite,
                                          name=request.POST.get("case", ""))
    except CaseError as exc:
        messages.error(request, f"Cannot save the ticked calls as a test case: {exc}")
        return redirect(back)
    if len(cases) == 1:
        messages.success(request, f"Saved as the case {cases[0].name!r} of the suite "
                                  f"{suite.name!r}: the ticked calls are its expectations.")
        return redirect("suite_case_edit", suite_id=suite.pk, case_id=cases[0].pk)
    messages.success(request, f"The ticked calls came from {len(cases)} runs: saved one case "
                              f"per run in the suite {suite.name!r}: "
                              f"{', '.join(repr(c.name) for c in cases)}.")
    return redirect("suite_detail", suite_id=suite.pk)


@require_http_methods(["GET", "POST"])
@login_required
def suite_case_edit(request: AuthenticatedHttpRequest, suite_id: int,
                    case_id: int) -> HttpResponse:
    case = get_object_or_404(SuiteCase.objects.select_related("suite"), pk=case_id,
                             suite_id=suite_id)
    values = {"name": case.name} | {f: _pretty(getattr(case, f)) for f in CASE_FIELDS}
    error: CaseError | None = None
    if request.method == "POST":
        values = {"name": request.POST.get("name", "")} | {
            f: request.POST.get(f, "") for f in CASE_FIELDS}
        try:
            case_update(case=case, data=_parsed(values))
        except CaseError as exc:
            error = exc
        else:
            messages.success(request, f"Saved the case {case.name!r}.")
            return redirect("suite_case_edit", suite_id=suite_id, case_id=case.pk)
    return render(request, "tools_app/suite_case_edit.html", {
        "case": case, "suite": case.suite, "values": values, "error": error,
        "sentences": _sentences(case), "tool_defaults": _tool_defaults(case)},
        status=400 if error else 200)


def _parsed(values: dict[str, str]) -> dict[str, Any]:
    data: dict[str, Any] = {"name": values["name"]}
    for field in CASE_FIELDS:
        try:
            empty = "{}" if field == "tool_modes" else "[]"
            data[field] = json_nesting.loads(values[field] or empty)
        except ValueError as exc:
            raise CaseError(f"{field} is not valid JSON: {exc}", field=field) from exc
    return data


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _tool_defaults(case: SuiteCase) -> list[tuple[str, str]]:
    tools = ToolRegistration.objects.filter(name__in=case.tools)
    return [(t.name, default_tool_mode(t)) for t in tools]


@require_POST
@login_required
def suite_run_create(request: AuthenticatedHttpRequest, suite_id: int) -> HttpResponse:
    suite = get_object_or_404(Suite, pk=suite_id)
    config = {"endpoints": request.POST.getlist("endpoints"),
              "repeat": _number(request.POST.get("repeat"), 1),
              "tools": request.POST.get("tools") or None,
              "concurrency": _number(request.POST.get("concurrency"), 4),
              "min_pass_rate": _number(request.POST.get("min_pass_rate"), 100) / 100}
    try:
        suite_run = suite_run_start(suite=suite, config=config, user=request.user)
    except SuiteConfigError as exc:
        messages.error(request, f"Cannot run the suite: {exc}")
        return redirect("suite_detail", suite_id=suite.pk)
    enqueue_suite_run(suite_run)
    return redirect("suite_run_detail", suite_run_id=suite_run.pk)


def _number(raw: str | None, default: float) -> Any:
    try:
        return float(raw) if raw and "." in raw else int(raw) if raw else default
    except ValueError:
        return raw  # refused by the configuration's check, with the field named


def _suite_run_for_user(request: AuthenticatedHttpRequest, suite_run_id: Any) -> SuiteRun:
    try:
        pk = uuid.UUID(str(suite_run_id))
    except ValueError:
        raise Http404("No such suite run") from None
    suite_run = SuiteRun.objects.select_related("suite").filter(pk=pk).first()
    if suite_run is None or not (request.user.is_staff
                                 or suite_run.created_by_id == request.user.pk):
        raise Http404("No such suite run")
    return suite_run


@require_GET
@login_required
def suite_run_detail(request: AuthenticatedHttpRequest, suite_run_id: Any) -> HttpResponse:
    suite_run = _suite_run_for_user(request, suite_run_id)
    template = "tools_app/suite_run.html"
    if getattr(request, "htmx", False):
        template += "#matrix"
    others = _visible_runs(request, suite_run.suite).exclude(pk=suite_run.pk)[:20]
    return render(request, template, {"matrix": suite_matrix(suite_run),
                                      "suite_run": suite_run, "others": others})


@require_POST
@login_required
def suite_run_resume(request: AuthenticatedHttpRequest, suite_run_id: Any) -> HttpResponse:
    """Drive an active suite run again: its driver is a task, which a server stopped in
    the middle leaves undone. A second driver is harmless (runner.start_due_runs)."""
    suite_run = _suite_run_for_user(request, suite_run_id)
    if suite_run.is_active:
        enqueue_suite_run(suite_run)
        messages.success(request, "The suite run is being driven again.")
    return redirect("suite_run_detail", suite_run_id=suite_run.pk)


@require_GET
@login_required
def suite_cell_detail(request: AuthenticatedHttpRequest, suite_run_id: Any,
                      cell_id: int) -> HttpResponse:
    suite_run = _suite_run_for_user(request, suite_run_id)
    cell = get_object_or_404(SuiteCell, pk=cell_id, suite_run=suite_run)
    return render(request, "tools_app/suite_cell.html", {
        "suite_run": suite_run, "cell": cell, "cell_runs": cell_runs(cell),
        "sentences": [a.sentence() for a in load_assertions(cell.assertions)]})


@require_GET
@login_required
def suite_run_compare(request: AuthenticatedHttpRequest, suite_run_id: Any) -> HttpResponse:
    after = _suite_run_for_user(request, suite_run_id)
    before = _suite_run_for_user(request, request.GET.get("with", ""))
    return render(request, "tools_app/suite_compare.html", {
        "before": before, "after": after, "comparison": compare_suite_runs(before, after)})
