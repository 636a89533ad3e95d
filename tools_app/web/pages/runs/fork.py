"""The fork editor (`/runs/<id>/fork/?round=N`): the conversation before round N as
editable messages (and as raw JSON over the same data), the endpoint, tools, policy and
parameters to continue with (the run's by default); submitting it forks the run
(runs/debugger/fork.py). A refused fork comes back to the editor with everything as typed and
the error next to the message or field at fault. Same visibility as the run page."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from tools_app.engine import ChatRequestParameters, json_nesting
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, ToolRegistration
from tools_app.runs.debugger import fork
from tools_app.runs.snapshot.model import RunSnapshot, snapshot_of
from tools_app.runs.store import selectors
from tools_app.web.pages.access import AuthenticatedHttpRequest, run_for_user

TEMPLATE = "tools_app/run_fork.html"


@require_http_methods(["GET", "POST"])
@login_required
def run_fork(request: AuthenticatedHttpRequest, run_id: Any) -> HttpResponse:
    run = run_for_user(request, run_id)
    if request.method == "GET":
        return _editor_for_round(request, run)
    form = request.POST
    try:
        new = fork.run_fork(run=run, user=request.user, round_number=_round(form.get("round")),
                            messages=_messages(form.get("messages", "")),
                            config=_config(run, form))
    except fork.ForkError as exc:
        return _editor(request, run, _typed(form), error=str(exc), field=exc.field,
                       status=400)
    return redirect("run_detail", run_id=new.pk)


def _editor_for_round(request: AuthenticatedHttpRequest, run: Run) -> HttpResponse:
    """The editor prefilled from the run: its conversation before the round, its
    configuration. A bad round number is said on the editor, which asks for another."""
    snapshot = snapshot_of(run)
    values: dict[str, Any] = {
        "round": request.GET.get("round", str(max(run.rounds_count, 1))),
        # "": the run's endpoint and policy as frozen (still right if since changed or
        # deleted); another choice is a change.
        "messages": "", "endpoint": "", "tools": snapshot.tool_names(),
        "policy": "",
        "temperature": _text(snapshot.parameters.get("temperature")),
        "max_round_trips": _text(snapshot.policy.max_round_trips),
        "parallel": snapshot.policy.parallel,
    }
    try:
        prefix = fork.inherited_prefix(run, _round(values["round"]))
    except fork.ForkError as exc:  # only the round to choose again: nothing to edit
        return _editor(request, run, values, error=str(exc), field=exc.field, status=400,
                       round_refused=True)
    values["messages"] = json.dumps(fork.editable_messages(prefix), indent=2)
    return _editor(request, run, values)


def _editor(request: AuthenticatedHttpRequest, run: Run, values: dict[str, Any], *,
            error: str | None = None, field: str | None = None,
            status: int = 200, round_refused: bool = False) -> HttpResponse:
    return render(request, TEMPLATE, {
        "run": run, "values": values, "error": error, "error_field": field or "",
        "round_refused": round_refused,
        "endpoints": selectors.endpoints_for_playground(),
        "tools": selectors.tools_for_playground(),
        "policies": ErrorPolicy.objects.order_by("name"),
    }, status=status)


def _typed(form: QueryDict) -> dict[str, Any]:
    """What was submitted, as typed: a refused fork loses nothing."""
    return {"round": form.get("round", ""), "messages": form.get("messages", ""),
            "endpoint": form.get("endpoint", ""), "tools": form.getlist("tools"),
            "policy": form.get("policy", ""), "temperature": form.get("temperature", ""),
            "max_round_trips": form.get("max_round_trips", ""),
            "parallel": form.get("parallel") == "on"}


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _round(text: Any) -> int:
    text = str(text or "").strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 6:
        raise fork.ForkError("round must be a round number", field="round")
    return int(text)


def _messages(text: str) -> Any:
    try:
        return json_nesting.loads(text)
    except ValueError as exc:
        raise fork.ForkError(f"messages are not valid JSON: {exc}", field="messages") from exc


def _config(run: Run, form: QueryDict) -> fork.ForkConfig:
    """The chosen endpoint, tools, policy and parameters; each is the fork's own only
    where it differs from the run's (so an unchanged form forks as it was)."""
    snapshot = snapshot_of(run)
    endpoint = _pick(ModelEndpoint, form.get("endpoint", ""), "endpoint")
    policy = _pick(ErrorPolicy, form.get("policy", ""), "policy")
    names = form.getlist("tools")
    tools = list(ToolRegistration.objects.filter(name__in=names).order_by("name"))
    if len(tools) != len(set(names)):
        raise fork.ForkError("a chosen tool no longer exists", field="tools")
    overrides = {"max_round_trips": _number(form.get("max_round_trips", ""), int,
                                            "max_round_trips"),
                 "parallel": form.get("parallel") == "on"}
    return fork.ForkConfig(
        endpoint=endpoint, policy=policy,
        tools=tools if sorted(names) != sorted(snapshot.tool_names()) else None,
        parameters=_parameters(snapshot, form.get("temperature", "")),
        policy_overrides=overrides)


def _pick(model: Any, key: str, field: str) -> Any:
    """The chosen row; None for "" (the run's, as frozen)."""
    key = key.strip()
    if not key:
        return None
    found: Any = None
    if model is ErrorPolicy and key.isascii() and key.isdigit() and len(key) <= 18:
        found = ErrorPolicy.objects.filter(pk=int(key)).first()
    elif model is ModelEndpoint:
        try:
            found = ModelEndpoint.objects.filter(pk=uuid.UUID(key)).first()
        except ValueError:
            found = None
    if found is None:
        raise fork.ForkError(f"the chosen {field} does not exist", field=field)
    return found


def _number(text: str, kind: type[int] | type[float], field: str) -> Any:
    if not text.strip():
        return None
    try:
        return kind(text)
    except ValueError as exc:
        raise fork.ForkError(f"{field} must be a number", field=field) from exc


def _parameters(snapshot: RunSnapshot, temperature: str) -> ChatRequestParameters | None:
    """The run's parameters with the temperature typed; None when nothing changed."""
    value = _number(temperature, float, "temperature")
    if value == snapshot.parameters.get("temperature"):
        return None
    try:
        return ChatRequestParameters.model_validate(snapshot.parameters
                                                    | {"temperature": value})
    except ValueError as exc:
        raise fork.ForkError(f"temperature is invalid: {exc}", field="temperature") from exc
