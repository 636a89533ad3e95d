"""A per-run cost cap from where people start runs: the playground's form and
POST /api/runs' policy_overrides. Both freeze it into the run, which stops before the
model call that would pass it, and refuse a bad cap with its reason."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.prices_support import set_price
from tests.runs.support import execute
from tests.web.support import Api, error_of
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, RunStatus, ToolRegistration
from tools_app.runs.snapshot.model import snapshot_of
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db

LONG_SCRIPT = [{"tool_calls": [{"name": "get_weather", "arguments": {"city": f"City {n}"}}]}
               for n in range(8)] + [{"text": "done"}]


@pytest.fixture
def priced(make_endpoint: Any) -> ModelEndpoint:
    endpoint: ModelEndpoint = make_endpoint(LONG_SCRIPT, name="long")
    set_price(endpoint, input_per_million="1000", output_per_million="1000")
    return endpoint


def _form(endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
          **fields: str) -> dict[str, Any]:
    return {"endpoint": str(endpoint.pk), "user_message": "Weather, city by city",
            "tools": [str(tools["get_weather"].pk)], "policy": str(policy.pk),
            "tool_choice": "auto", "parallel": "on", **fields}


def test_the_playgrounds_cost_cap_stops_the_run(
    bob_client: Client, priced: ModelEndpoint, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy,
) -> None:
    response = bob_client.post("/playground/", _form(priced, demo_tools, policy,
                                                     cost_cap_usd="0.05"))
    assert response.status_code == 302
    run = Run.objects.get()
    assert snapshot_of(run).policy.cost_cap_usd == Decimal("0.05")
    assert "cost_cap_usd" in snapshot_of(run).policy_changed
    execute(run)
    assert run.status == RunStatus.FAILED
    assert run.error_type == "CostCapExceededError"
    page = bob_client.get(f"/runs/{run.pk}/").content.decode()
    assert "past its cost cap of $0.05" in page
    assert '<dt>Cost cap</dt><dd>$0.05 <small>(this run)</small></dd>' in page
    # remembered for the next run, like the other settings
    assert 'name="cost_cap_usd" value="0.05"' in bob_client.get("/playground/").content.decode()


def test_the_playground_refuses_a_bad_cost_cap(
    bob_client: Client, priced: ModelEndpoint, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy,
) -> None:
    response = bob_client.post("/playground/", _form(priced, demo_tools, policy,
                                                     cost_cap_usd="-1"))
    assert response.status_code == 200
    assert 'id="cost-cap-error"' in response.content.decode()
    assert not Run.objects.exists()


def test_the_apis_cost_cap_stops_the_run(
    bob: AbstractUser, priced: ModelEndpoint, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy,
) -> None:
    _, token = create_token(bob, "t")
    api = Api(token)
    response = api.post("/api/runs", {
        "endpoint": "long", "tools": ["get_weather"],
        "messages": [{"role": "user", "content": "Weather, city by city"}],
        "policy_overrides": {"cost_cap_usd": "0.05"}})
    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])
    execute(run)
    detail = api.get(f"/api/runs/{run.pk}").json()
    assert detail["status"] == "failed"
    assert detail["error"]["type"] == "CostCapExceededError"
    assert "past its cost cap of $0.05" in detail["error"]["message"]
    assert Decimal(detail["cost_usd"]) == run.cost_usd


def test_the_api_refuses_a_bad_cost_cap_with_its_field(
    bob: AbstractUser, priced: ModelEndpoint, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy,
) -> None:
    _, token = create_token(bob, "t")
    error = error_of(Api(token).post("/api/runs", {
        "endpoint": "long", "tools": ["get_weather"],
        "messages": [{"role": "user", "content": "hi"}],
        "policy_overrides": {"cost_cap_usd": "a lot"}}), 400)
    assert error["field"] == "policy_overrides"
    assert "cost_cap_usd" in error["message"]
    assert not Run.objects.exists()


def test_a_cap_without_a_price_says_it_does_not_apply(
    bob_client: Client, make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy,
) -> None:
    free = make_endpoint(LONG_SCRIPT, name="free")
    response = bob_client.post("/playground/", _form(free, demo_tools, policy,
                                                     cost_cap_usd="0.05"))
    assert response.status_code == 302
    run = Run.objects.get()
    execute(run)
    assert run.status == RunStatus.SUCCEEDED  # nothing was counted against the cap
    page = bob_client.get(f"/runs/{run.pk}/").content.decode()
    assert ("<dt>Cost cap</dt><dd>$0.05 (not applied: no price) <small>(this run)</small>"
            "</dd>") in page
