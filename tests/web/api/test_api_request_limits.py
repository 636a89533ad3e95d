"""POST /api/runs refuses what would amplify or rewrite a model request: a policy template
with 90,000 {arguments} placeholders, `parameters.custom` keys outside the provider's
allow-list, out-of-range max_output_tokens, and a non-staff user changing the model. Each
is a 400 naming the field, and no run is created."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tools_app.models import ErrorPolicy, ModelEndpoint, Run, ToolRegistration
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db


def post_run(user: AbstractUser, body: dict[str, Any]) -> Any:
    token = create_token(user, "ci")[1]
    return Client(enforce_csrf_checks=True).post(
        "/api/runs", json.dumps(body), content_type="application/json",
        headers={"Authorization": f"Bearer {token}"})


def refused(response: Any) -> dict[str, Any]:
    assert response.status_code == 400, response.content
    assert not Run.objects.exists()
    return response.json()["error"]  # type: ignore[no-any-return]


@pytest.fixture
def openai_endpoint(db: None) -> ModelEndpoint:
    return ModelEndpoint.objects.create(name="gpt", kind="openai", model="gpt-4o-mini")


@pytest.fixture
def body(weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration],
         policy: ErrorPolicy) -> dict[str, Any]:
    return {"endpoint": "weather", "tools": ["get_weather"],
            "messages": [{"role": "user", "content": "Weather in Paris?"}]}


def test_the_90000_placeholder_template_is_a_400(bob: AbstractUser,
                                                 body: dict[str, Any]) -> None:
    attack = {"execution_error_template": "{arguments}" * 90_000}

    error = refused(post_run(bob, body | {"policy_overrides": attack}))

    assert (error["code"], error["field"]) == ("invalid_field", "policy_overrides")
    assert "policy_overrides.execution_error_template: At most 2,000 characters" in (
        error["message"])


@pytest.mark.parametrize(("template", "status"), [
    ("{error}" * 10, 201), ("x" * 2_000, 201), ("{error}" * 11, 400), ("x" * 2_001, 400),
])
def test_template_limits_at_the_api(bob: AbstractUser, body: dict[str, Any], template: str,
                                    status: int) -> None:
    response = post_run(bob, body | {"policy_overrides": {"arguments_error_template":
                                                          template}})

    assert response.status_code == status, response.content
    if status == 400:
        assert "policy_overrides.arguments_error_template: At most" in (
            response.json()["error"]["message"])


@pytest.mark.parametrize("key", ["model", "messages", "input", "tools", "tool_choice", "n",
                                 "stream", "max_tokens", "max_completion_tokens", "system"])
def test_a_forbidden_custom_key_is_a_400_naming_it(
    bob: AbstractUser, body: dict[str, Any], openai_endpoint: ModelEndpoint, key: str,
) -> None:
    parameters = {"custom": {key: "expensive-model-xl", "seed": 7}}

    error = refused(post_run(bob, body | {"endpoint": "gpt", "parameters": parameters}))

    assert (error["code"], error["field"]) == ("invalid_field", "parameters")
    assert error["problems"] == {f"custom.{key}": error["problems"][f"custom.{key}"]}
    assert f"parameters.custom.{key}: not allowed for openai endpoints" in error["message"]


@pytest.mark.parametrize("tokens", [-5, 0, 1_000_001])
def test_max_output_tokens_out_of_bounds_is_a_400(bob: AbstractUser, body: dict[str, Any],
                                                   tokens: int) -> None:
    error = refused(post_run(bob, body | {"parameters": {"max_output_tokens": tokens}}))

    assert error["field"] == "parameters"
    assert "parameters.max_output_tokens: must be from 1 to 1,000,000" in error["message"]


def test_a_non_staff_user_cannot_change_the_model(
    bob: AbstractUser, alice: AbstractUser, body: dict[str, Any],
    openai_endpoint: ModelEndpoint,
) -> None:
    change = body | {"endpoint": "gpt", "parameters": {"model_name": "expensive-model-xl"}}

    error = refused(post_run(bob, change))
    assert "parameters.model_name: only staff may run another model" in error["message"]

    assert post_run(alice, change).status_code == 201
    assert Run.objects.get().snapshot["parameters"]["model_name"] == "expensive-model-xl"


def test_allowed_parameters_start_the_run(bob: AbstractUser, body: dict[str, Any],
                                          openai_endpoint: ModelEndpoint) -> None:
    parameters = {"max_output_tokens": 1_000_000, "temperature": 2.0, "model_name": "gpt-4o-mini",
                  "custom": {"seed": 7, "reasoning_effort": "low", "metadata": {"team": "a"}}}

    response = post_run(bob, body | {"endpoint": "gpt", "parameters": parameters})

    assert response.status_code == 201, response.content
    assert Run.objects.get().snapshot["parameters"]["custom"]["seed"] == 7
