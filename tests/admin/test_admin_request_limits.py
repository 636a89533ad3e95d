"""The admin refuses what per-run requests may not hold either, with an error on the
field: error-policy templates over 2,000 characters or 10 placeholders, and endpoint
default parameters past the provider's limits (custom keys, ranges)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from tools_app.admin import POLICY_FIELDS
from tools_app.models import ErrorPolicy

pytestmark = pytest.mark.django_db

ADD = "admin:tools_app_errorpolicy_add"


def post_policy(client: Client, **values: Any) -> Any:
    """The add form's POST: the model's defaults, `values` over them (booleans are
    checkboxes, absent when off)."""
    fields = {name: getattr(ErrorPolicy(name="Limits"), name) for name in POLICY_FIELDS}
    data = {name: "on" if value is True else "" if value is None else str(value)
            for name, value in (fields | values).items() if value is not False}
    return client.post(reverse(ADD), data)


def field_errors(response: Any, field: str) -> list[str]:
    assert response.status_code == 200
    return list(response.context["adminform"].form.errors.get(field, []))


@pytest.mark.parametrize("field", ["execution_error_template", "arguments_error_template"])
def test_the_90000_placeholder_template_is_a_form_error(alice_client: Client,
                                                        field: str) -> None:
    response = post_policy(alice_client, **{field: "{arguments}" * 90_000})

    assert field_errors(response, field) == ["At most 2,000 characters (this one has 990,000)."]
    assert not ErrorPolicy.objects.exists()


@pytest.mark.parametrize(("template", "error"), [
    ("x" * 2_001, "At most 2,000 characters (this one has 2,001)."),
    ("{error}|" * 11, "At most 10 placeholders (this one has 11)."),
])
def test_a_template_past_a_limit_is_a_form_error(alice_client: Client, template: str,
                                                 error: str) -> None:
    response = post_policy(alice_client, execution_error_template=template)

    assert field_errors(response, "execution_error_template") == [error]
    assert not ErrorPolicy.objects.exists()


@pytest.mark.parametrize("template", ["x" * 2_000, "{error}|" * 10])
def test_a_template_at_the_limits_is_saved(alice_client: Client, template: str) -> None:
    response = post_policy(alice_client, execution_error_template=template)

    assert response.status_code == 302
    assert ErrorPolicy.objects.get().execution_error_template == template


# -- endpoint default parameters: the limits of a run's parameters -----------------------

ENDPOINT_ADD = "admin:tools_app_modelendpoint_add"


def post_endpoint(client: Client, defaults: str) -> Any:
    return client.post(reverse(ENDPOINT_ADD), {
        "name": "gpt", "kind": "openai", "model": "gpt-4o-mini", "base_url": "",
        "api_key_env": "OPENAI_API_KEY", "extra_headers": "{}", "proxy_url": "",
        "script": "[]", "default_parameters": defaults})


@pytest.mark.parametrize(("defaults", "error"), [
    ('{"max_output_tokens": -1}', "max_output_tokens: must be from 1 to 1,000,000"),
    ('{"custom": {"model": "expensive-model-xl"}}', "custom.model: not allowed for openai"),
    ('{"custom": {"n": 64}}', "custom.n: not allowed for openai"),
    ('{"temperature": 3}', "temperature: must be a number from 0 to 2"),
    ('{"colour": "red"}', "colour: Extra inputs are not permitted"),
])
def test_endpoint_defaults_past_the_limits_are_form_errors(alice_client: Client,
                                                           defaults: str, error: str) -> None:
    response = post_endpoint(alice_client, defaults)

    errors = field_errors(response, "default_parameters")
    assert any(e.startswith(error) for e in errors), errors


def test_endpoint_defaults_within_the_limits_are_saved(alice_client: Client) -> None:
    response = post_endpoint(alice_client, '{"max_output_tokens": 1024, "custom": {"seed": 1}}')

    assert response.status_code == 302
