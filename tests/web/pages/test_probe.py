"""The endpoints page: each endpoint's capability report, and the button that probes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.test import Client

from tools_app.models import ModelEndpoint
from tools_app.runs.worker.probing import probe_and_store
from tools_app.web.pages import views

pytestmark = pytest.mark.django_db(transaction=True)

# A scripted model that calls a tool whatever it is asked: it "supports" tool calls and
# both tool_choice modes, but never makes two calls at once.
ONE_CALL_THEN_TEXT = [
    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
    {"text": "done"},
]


@pytest.fixture
def endpoint(make_endpoint: Any) -> ModelEndpoint:
    return make_endpoint(ONE_CALL_THEN_TEXT, name="probe me")  # type: ignore[no-any-return]


def test_the_probe_button_enqueues_a_probe_of_that_endpoint(
    alice_client: Client, endpoint: ModelEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    probed: list[str] = []
    monkeypatch.setattr(views, "enqueue_probe", probed.append)
    response = alice_client.post(f"/endpoints/{endpoint.pk}/probe/")
    assert response.status_code == 302
    assert probed == [str(endpoint.pk)]


def test_the_probe_needs_a_login_and_a_post(client: Client, alice_client: Client,
                                            endpoint: ModelEndpoint) -> None:
    assert client.post(f"/endpoints/{endpoint.pk}/probe/").status_code == 302  # to login
    assert alice_client.get(f"/endpoints/{endpoint.pk}/probe/").status_code == 405


def test_a_probe_stores_its_report_and_the_page_shows_it(
    alice_client: Client, endpoint: ModelEndpoint
) -> None:
    assert alice_client.get("/endpoints/").content.decode().count("Not probed yet") == 1
    asyncio.run(probe_and_store(str(endpoint.pk)))
    endpoint.refresh_from_db()
    report = endpoint.capability_report
    assert endpoint.capability_checked_at is not None
    checks = {c["name"]: c["status"] for c in report["checks"]}
    assert checks["tool_calls"] == "passed"
    assert checks["parallel_tool_calls"] == "failed"
    page = alice_client.get("/endpoints/").content.decode()
    assert "Not probed yet" not in page
    assert "parallel_tool_calls" in page
    assert "probe-failed" in page


def test_the_playground_lists_each_endpoints_capabilities_with_a_probe_button(
    alice_client: Client, endpoint: ModelEndpoint
) -> None:
    page = alice_client.get("/playground/").content.decode()
    assert "not probed yet" in page
    assert f"/endpoints/{endpoint.pk}/probe/" in page
    asyncio.run(probe_and_store(str(endpoint.pk)))
    page = alice_client.get("/playground/").content.decode()
    assert "not probed yet" not in page
    assert 'class="badge probe-passed"' in page
    assert 'class="badge probe-failed"' in page


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from django.core.cache import cache

    cache.clear()  # the rate-limit counters
    probed: list[str] = []
    monkeypatch.setattr(views, "enqueue_probe", probed.append)
    return probed


def test_only_staff_may_probe_unless_the_operator_allows_it(
    bob_client: Client, endpoint: ModelEndpoint, probes: list[str], settings: Any,
) -> None:
    """A probe calls the endpoint with the server's credentials."""
    assert bob_client.post(f"/endpoints/{endpoint.pk}/probe/").status_code == 403
    page = bob_client.get("/endpoints/").content.decode()
    assert f"/endpoints/{endpoint.pk}/probe/" not in page  # no button either
    assert f"/endpoints/{endpoint.pk}/probe/" not in bob_client.get("/playground/").content.decode()

    settings.AGENTFORGE_PROBE_NON_STAFF = True
    assert bob_client.post(f"/endpoints/{endpoint.pk}/probe/").status_code == 302
    assert f"/endpoints/{endpoint.pk}/probe/" in bob_client.get("/endpoints/").content.decode()
    assert probes == [str(endpoint.pk)]


def test_probes_are_rate_limited_per_user(
    alice_client: Client, endpoint: ModelEndpoint, probes: list[str], settings: Any,
) -> None:
    from django.contrib.auth import get_user_model

    settings.AGENTFORGE_PROBE_RATE = "2/h"
    staff_client = Client()
    staff_client.force_login(get_user_model().objects.create_user("dana", is_staff=True))
    answers = [alice_client.post(f"/endpoints/{endpoint.pk}/probe/").status_code
               for _ in range(3)]

    assert answers == [302, 302, 429]
    assert probes == [str(endpoint.pk)] * 2
    refused = alice_client.post(f"/endpoints/{endpoint.pk}/probe/")
    assert "Too many probes" in refused.content.decode()
    assert staff_client.post(f"/endpoints/{endpoint.pk}/probe/").status_code == 302  # per user
