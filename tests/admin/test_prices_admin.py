"""Model prices in the admin: each save that changes a price records a revision with
the whole price and what changed (who, when), an unchanged save none; the policy's cost
cap is edited and recorded like its other fields; an endpoint shows its runs' cost."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.admin.support import form_errors, url
from tests.prices_support import set_price
from tests.runs.support import execute, start
from tools_app.admin import POLICY_FIELDS
from tools_app.models import (
    ErrorPolicy,
    ModelEndpoint,
    ModelPrice,
    PolicyRevision,
    PriceRevision,
    ToolRegistration,
)

pytestmark = pytest.mark.django_db


def price_data(endpoint: ModelEndpoint, **overrides: str) -> dict[str, str]:
    return {"endpoint": str(endpoint.pk), "model": "", "input_per_million": "2.50",
            "cached_input_per_million": "1.25", "output_per_million": "10"} | overrides


@pytest.fixture
def endpoint(make_endpoint: Any) -> ModelEndpoint:
    return make_endpoint([{"text": "done"}], name="paid")  # type: ignore[no-any-return]


def test_each_price_edit_records_a_revision(alice_client: Client, alice: AbstractUser,
                                            endpoint: ModelEndpoint) -> None:
    response = alice_client.post(url(ModelPrice, "add"), price_data(endpoint))
    assert response.status_code == 302, form_errors(response)
    price = ModelPrice.objects.get()
    [first] = PriceRevision.objects.all()
    assert (first.price, first.changed_by) == (price, alice)
    assert (first.input_per_million, first.cached_input_per_million,
            first.output_per_million) == (Decimal("2.5"), Decimal("1.25"), Decimal(10))

    # The same values again (as typed differently): no revision.
    response = alice_client.post(url(ModelPrice, "change", price.pk),
                                 price_data(endpoint, input_per_million="2.500000"))
    assert response.status_code == 302, form_errors(response)
    assert PriceRevision.objects.count() == 1

    response = alice_client.post(url(ModelPrice, "change", price.pk),
                                 price_data(endpoint, output_per_million="12"))
    assert response.status_code == 302, form_errors(response)
    second = PriceRevision.objects.exclude(pk=first.pk).get()
    assert second.changes == {"output_per_million": ["10", "12"]}
    assert second.output_per_million == Decimal(12)
    first.refresh_from_db()
    assert first.output_per_million == Decimal(10)  # a revision is never edited

    page = alice_client.get(url(ModelPrice, "change", price.pk)).content.decode()
    assert f"#{second.pk}" in page
    assert "output_per_million: &quot;10&quot; → &quot;12&quot;" in page


def test_a_negative_price_is_refused(alice_client: Client, endpoint: ModelEndpoint) -> None:
    response = alice_client.post(url(ModelPrice, "add"),
                                 price_data(endpoint, input_per_million="-1"))
    assert response.status_code == 200
    assert "input_per_million" in form_errors(response)
    assert not PriceRevision.objects.exists()


def policy_data(policy: ErrorPolicy, **overrides: str) -> dict[str, str]:
    """The policy's change form as posted (booleans are checkboxes: absent when off)."""
    values = {name: getattr(policy, name) for name in POLICY_FIELDS} | overrides
    return {name: "on" if value is True else "" if value is None else str(value)
            for name, value in values.items() if value is not False}


def test_the_policys_cost_cap_is_edited_and_recorded(alice_client: Client) -> None:
    policy = ErrorPolicy.objects.create(name="Default", is_default=True)
    response = alice_client.post(url(ErrorPolicy, "change", policy.pk),
                                 policy_data(policy, cost_cap_usd="0.5"))
    assert response.status_code == 302, form_errors(response)
    policy.refresh_from_db()
    assert policy.cost_cap_usd == Decimal("0.5")
    [revision] = PolicyRevision.objects.filter(policy=policy)
    assert revision.changes == {"cost_cap_usd": [None, "0.5"]}
    response = alice_client.post(url(ErrorPolicy, "change", policy.pk), policy_data(policy))
    assert response.status_code == 302, form_errors(response)
    assert PolicyRevision.objects.filter(policy=policy).count() == 1  # unchanged
    response = alice_client.post(url(ErrorPolicy, "change", policy.pk),
                                 policy_data(policy, cost_cap_usd="0"))
    assert "cost_cap_usd" in form_errors(response)


def test_an_endpoint_shows_what_its_runs_cost(
    alice_client: Client, endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy,
) -> None:
    set_price(endpoint, input_per_million="1000", output_per_million="1000")
    run = start(endpoint, [demo_tools["get_weather"]], policy)
    execute(run)
    assert run.cost_usd
    listing = alice_client.get(url(ModelEndpoint, "changelist")).content.decode()
    assert f"${run.cost_usd.normalize():f} (1 priced run)" in listing
    page = alice_client.get("/endpoints/").content.decode()
    assert "Cost of its runs: <span data-cost=" in page
    assert (f">${run.cost_usd.normalize():f}</span>"
            ' <small class="muted">(1 priced run)</small>') in page
    assert "Price: $1000.00 input / $1000.00 output per million tokens" in page
