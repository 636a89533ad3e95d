"""The run pages' shared fixture: a run of bob's, finished, to rerun, replay, export or
follow the lineage of."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractUser

from tests.runs.support import execute
from tests.web.support import start_run
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, ToolRegistration


@pytest.fixture
def finished(bob: AbstractUser, weather_endpoint: ModelEndpoint,
             demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> Run:
    """Bob's weather run (get_weather on the weather endpoint), executed to success."""
    run = start_run(bob, weather_endpoint, [demo_tools["get_weather"]], policy)
    assert execute(run) == "succeeded"
    return run
