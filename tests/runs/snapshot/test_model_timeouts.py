"""A hung provider ends a run at the endpoint's per-attempt timeout (its retries counted
in) or at the policy's run deadline, over real loopback HTTP to the fake provider, which
accepts each request and never answers. What the run froze carries both values, and a
snapshot frozen before they existed loads with the defaults."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.runs.support import execute, fake_llm_server, rounds, start
from tools_app.fake_llm import BackgroundServer
from tools_app.models import ErrorPolicy, ModelEndpoint, RunStatus, ToolRegistration
from tools_app.runs.snapshot.engine import chat_model_for
from tools_app.runs.snapshot.model import EndpointSnapshot, PolicySnapshot, snapshot_of

pytestmark = pytest.mark.both

HANGS = {"scripts": {"hung-model": {"steps": [{"faults": [{"kind": "hang", "times": None}]}]}}}


@pytest.fixture
def hung_server() -> Iterator[BackgroundServer]:
    with fake_llm_server(HANGS) as server:
        yield server


def hung_endpoint(server: BackgroundServer, timeout_seconds: float) -> ModelEndpoint:
    return ModelEndpoint.objects.create(
        name="hung", kind="openai_compatible", base_url=server.base_urls()["openai"],
        model="hung-model", timeout_seconds=timeout_seconds)


def test_a_hung_provider_fails_the_run_as_a_timeout_after_its_retries(
    hung_server: BackgroundServer, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    policy.provider_max_retries = 1
    policy.save()
    run = start(hung_endpoint(hung_server, 0.5), [tools["get_weather"]], policy)

    assert execute(run) == RunStatus.FAILED
    assert run.error_type == "ModelTimeout"
    assert "provider unavailable after 2 attempts" in run.error_message
    assert "timed out after 0.5 s waiting for data" in run.error_message
    [round_] = rounds(run)
    assert round_.status == "failed"
    assert [(a["attempt"], a["timed_out"], a["retryable"]) for a in round_.attempts] == [
        (1, True, True), (2, True, True)]
    assert round_.attempts[1]["wait_s"] is None  # the last one: no retry after it
    assert run.lease_owner == ""  # the worker let it go

    staff = get_user_model().objects.create_user("operator", is_staff=True)
    browser = Client()
    browser.force_login(staff)
    page = browser.get(f"/runs/{run.pk}/").content.decode()
    assert "attempt 1: timeout" in page
    assert "attempt 2: timeout" in page


def test_the_run_deadline_ends_a_run_whose_provider_keeps_hanging(
    hung_server: BackgroundServer, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    policy.run_timeout_seconds = 1
    policy.save()
    # The endpoint would wait far longer than the deadline for each attempt.
    run = start(hung_endpoint(hung_server, 600), [tools["get_weather"]], policy)
    assert snapshot_of(run).policy.run_timeout_seconds == 1

    assert execute(run) == RunStatus.FAILED
    assert run.error_type == "RunTimeout"
    assert "deadline of 1 s" in run.error_message
    [round_] = rounds(run)
    assert round_.status == "failed"  # closed by the run's end, as a cancel's would be
    assert round_.attempts == []  # the one attempt was still waiting
    assert run.lease_owner == ""


def test_the_run_freezes_the_endpoint_timeout_and_the_models_client_uses_it(
    tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    endpoint = ModelEndpoint.objects.create(
        name="slow", kind="openai_compatible", base_url="http://127.0.0.1:9/v1", model="m",
        timeout_seconds=2.5)
    run = start(endpoint, [tools["get_weather"]], policy)

    frozen = snapshot_of(run)
    assert (frozen.endpoint.timeout_seconds, frozen.policy.run_timeout_seconds) == (2.5, None)
    model: Any
    model, _ = chat_model_for(frozen.endpoint, max_retries=0)
    assert (model.http.timeouts.connect, model.http.timeouts.read) == (2.5, 2.5)


def test_a_snapshot_frozen_before_the_timeouts_existed_loads_with_the_defaults() -> None:
    old_endpoint = {"name": "old", "kind": "openai_compatible",
                    "base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": "",
                    "stream": False, "extra_headers": {}, "default_parameters": {}}
    endpoint = EndpointSnapshot.model_validate(old_endpoint)
    policy = PolicySnapshot.model_validate({"name": "old", "provider_max_retries": 2})

    assert endpoint.timeout_seconds == 120.0
    assert policy.run_timeout_seconds is None
    assert "timeout_seconds" not in endpoint.stored()  # stored back as it was
    model: Any
    model, _ = chat_model_for(endpoint, max_retries=0)
    assert (model.http.timeouts.connect, model.http.timeouts.read) == (5.0, 120.0)
