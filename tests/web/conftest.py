"""Fixtures shared by the web-layer tests (pages, API, live timeline)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AbstractUser
from django.utils import timezone

from tests.web.support import Api, start_run
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, ToolRegistration
from tools_app.runs import tasks
from tools_app.runs.worker.runner import execute_run
from tools_app.web.api.tokens import create_token


@pytest.fixture(autouse=True)
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Runs are never handed to the in-process worker thread: the tests execute them."""
    ids: list[str] = []
    monkeypatch.setattr(tasks, "enqueue_run", ids.append)
    return ids


@pytest.fixture
def filter_world(bob: AbstractUser, charlie: AbstractUser, weather_endpoint: ModelEndpoint,
          make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
          policy: ErrorPolicy) -> dict[str, Run]:
    """bob: a weather run that succeeded, a calculator run that failed; charlie: a
    queued run on another endpoint."""
    failing = make_endpoint([{"tool_calls": [{"name": "calculator",
                                              "arguments": {"expression": "1/0"}}]}],
                            name="failing")
    weather = start_run(bob, weather_endpoint, [demo_tools["get_weather"]], policy,
                        "Weather in Paris, please")
    broken = start_run(bob, failing, [demo_tools["calculator"]], policy, "Divide by zero")
    for run in (weather, broken):
        async_to_sync(tasks.execute_run.acall)(str(run.pk))
    queued = start_run(charlie, failing, [demo_tools["calculator"]], policy, "Later")
    runs = {"weather": weather, "broken": broken, "queued": queued}
    for age, run in enumerate(runs.values()):  # distinct, known creation times
        Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(hours=3 - age))
    return {name: Run.objects.get(pk=run.pk) for name, run in runs.items()}


@pytest.fixture
def waiting(bob: AbstractUser, weather_endpoint: ModelEndpoint,
            demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> Run:
    """bob's run, waiting for decisions on its two get_weather calls (the tool requires
    approval): the world of the decision API's and the decision form's tests."""
    ToolRegistration.objects.filter(name="get_weather").update(requires_approval=True)
    run = start_run(bob, weather_endpoint, [ToolRegistration.objects.get(name="get_weather")],
                    policy)
    assert async_to_sync(execute_run)(str(run.pk)) == "waiting"
    return run


@pytest.fixture
def bob_api(bob: AbstractUser) -> Api:
    return Api(create_token(bob, "ci")[1])


@pytest.fixture
def charlie_api(charlie: AbstractUser) -> Api:
    return Api(create_token(charlie, "ci")[1])


@pytest.fixture
def body(weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration],
         policy: ErrorPolicy) -> dict[str, Any]:
    """A run request of the JSON API: the weather endpoint and tool, a system message."""
    return {"endpoint": "weather", "tools": ["get_weather"],
            "messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "Weather in Hangzhou and Paris?"}]}
