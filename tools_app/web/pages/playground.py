"""The playground: the form that starts a run (and the home page that leads to it);
the form's last values are remembered per user."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods
from django_htmx.http import HttpResponseClientRedirect

from tools_app.engine import ChatMessage, ChatRequestParameters, NamedToolChoice
from tools_app.models import PlaygroundState, Run
from tools_app.runs import services
from tools_app.runs.store import selectors
from tools_app.runs.worker.probing import may_probe
from tools_app.web.pages.access import AuthenticatedHttpRequest
from tools_app.web.pages.forms import PlaygroundForm
from tools_app.web.pages.registry.probes import probe_views


@require_GET
@login_required
def home(request: AuthenticatedHttpRequest) -> HttpResponse:
    return redirect("playground")


@require_http_methods(["GET", "POST"])
@login_required
def playground(request: AuthenticatedHttpRequest) -> HttpResponse:
    if request.method == "POST":
        form = PlaygroundForm(request.POST)
        if form.is_valid():
            run = _start_from_form(request, form)
            if run is not None:
                if getattr(request, "htmx", False):
                    return HttpResponseClientRedirect(run_url(run))
                return redirect("run_detail", run_id=run.pk)
    else:
        form = PlaygroundForm(initial=_remembered(request))
    script_tools = selectors.script_tools()
    return render(request, "tools_app/playground.html",
                  {"form": form, "probes": probe_views(selectors.endpoints_for_playground()),
                   "scripted_ids": selectors.scripted_endpoint_ids(),
                   "script_tools": json.dumps(script_tools),
                   "script_calls": script_tools.get(str(form["endpoint"].value()), []),
                   "may_probe": may_probe(request.user)})


def _start_from_form(request: AuthenticatedHttpRequest, form: PlaygroundForm) -> Run | None:
    data = form.cleaned_data
    choice: Any = data["tool_choice"]
    if choice == "named":
        choice = NamedToolChoice(name=data["tool_choice_name"].strip())
    try:
        run = services.run_create(
            user=request.user, endpoint=data["endpoint"], tools=list(data["tools"]),
            policy=data["policy"],
            messages=_messages_of(data),
            parameters=ChatRequestParameters(tool_choice=choice if data["tools"] else None),
            policy_overrides={"parallel": data["parallel"],
                              "max_round_trips": data["max_round_trips"],
                              "cost_cap_usd": (None if data["cost_cap_usd"] is None
                                               else str(data["cost_cap_usd"]))},
            breakpoints=form.breakpoints(),
        )
    except services.RunRequestError as exc:
        form.add_error(None, str(exc))
        return None
    PlaygroundState.objects.update_or_create(user=request.user,
                                             defaults={"data": form.remembered()})
    return run


def _messages_of(data: dict[str, Any]) -> list[ChatMessage]:
    """The starting conversation: pasted whole, or a system prompt and a user message."""
    if data["input_mode"] == "conversation":
        return list(data["messages"])
    return services.conversation(system_prompt=data["system_prompt"],
                                 user_message=data["user_message"])


def _remembered(request: AuthenticatedHttpRequest) -> dict[str, Any]:
    state = PlaygroundState.objects.filter(user_id=request.user.pk).first()
    if state is not None:
        return dict(state.data)
    policy = selectors.default_policy()
    endpoint = selectors.playground_default_endpoint()
    return {"policy": policy.pk if policy else None, "parallel": True, "tool_choice": "auto",
            "input_mode": "simple",
            "endpoint": str(endpoint.pk) if endpoint else None,
            "tools": selectors.tools_a_script_calls(endpoint) if endpoint else [],
            "user_message": selectors.PLAYGROUND_DEFAULT_MESSAGE}


def run_url(run: Run) -> str:
    from django.urls import reverse

    return reverse("run_detail", kwargs={"run_id": run.pk})
