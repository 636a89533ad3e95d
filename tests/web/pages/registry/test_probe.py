"""The endpoints page: each endpoint's capability report, and the button that probes."""

from __future__ import annotations

import asyncio
import html
from typing import Any

import pytest
from django.test import Client

from tests.web.support import Tree
from tools_app.models import ModelEndpoint
from tools_app.runs.loops.provider_clients import close_if_the_loop_ends
from tools_app.runs.worker.probing import probe_and_store
from tools_app.web.pages.registry import endpoints

pytestmark = pytest.mark.django_db(transaction=True)

# A scripted model that calls a tool whatever it is asked: it "supports" tool calls and
# both tool_choice modes, but never makes two calls at once.
ONE_CALL_THEN_TEXT = [
    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
    {"text": "done"},
]


def probe(endpoint_id: str) -> None:
    """The probe as its task runs it, on a loop of its own whose model clients are
    closed when it ends (left open, each is reported unclosed at the process's exit)."""
    async def probed() -> None:
        try:
            await probe_and_store(endpoint_id)
        finally:
            await close_if_the_loop_ends()

    asyncio.run(probed())


@pytest.fixture
def endpoint(make_endpoint: Any) -> ModelEndpoint:
    return make_endpoint(ONE_CALL_THEN_TEXT, name="probe me")  # type: ignore[no-any-return]


def test_the_probe_button_enqueues_a_probe_of_that_endpoint(
    alice_client: Client, endpoint: ModelEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    probed: list[str] = []
    monkeypatch.setattr(endpoints, "enqueue_probe", probed.append)
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
    probe(str(endpoint.pk))
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
    probe(str(endpoint.pk))
    page = alice_client.get("/playground/").content.decode()
    assert "not probed yet" not in page
    assert 'class="badge probe-passed"' in page
    assert 'class="badge probe-failed"' in page


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from django.core.cache import cache

    cache.clear()  # the rate-limit counters
    probed: list[str] = []
    monkeypatch.setattr(endpoints, "enqueue_probe", probed.append)
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


# -- live: the report polls itself while a probe is under way -------------------------


def fragment(client: Client, endpoint: ModelEndpoint, where: str = "") -> Tree:
    response = client.get(f"/endpoints/{endpoint.pk}/probe/report/{where}")
    assert response.status_code == 200
    return Tree(response.content.decode())


def test_a_probe_asked_for_shows_under_way_until_its_report_is_stored(
    alice_client: Client, endpoint: ModelEndpoint, probes: list[str],
) -> None:
    asked = alice_client.post(f"/endpoints/{endpoint.pk}/probe/", follow=True).content.decode()
    assert "reload" not in asked
    assert "Probing probe me: its report shows here as soon as the probe ends." in asked
    tree = Tree(asked)
    section = tree.by_id(f"probe-{endpoint.pk}")
    assert section.attrs["hx-get"] == f"/endpoints/{endpoint.pk}/probe/report/"
    assert section.attrs["hx-trigger"] == "every 2s"
    assert "Probing asked by alice at" in "".join(
        t for t, e in tree.texts if e is not None and section in e.ancestors_or_self())
    # The fragment it polls: still under way, on the endpoints page and the playground.
    assert "hx-get" in fragment(alice_client, endpoint).by_id(f"probe-{endpoint.pk}").attrs
    cell = fragment(alice_client, endpoint, "?in=playground").by_id(f"probe-cell-{endpoint.pk}")
    assert cell.attrs["hx-get"] == f"/endpoints/{endpoint.pk}/probe/report/?in=playground"
    playground = Tree(alice_client.get("/playground/").content.decode())
    assert "hx-get" in playground.by_id(f"probe-cell-{endpoint.pk}").attrs

    probe(str(endpoint.pk))

    done = fragment(alice_client, endpoint)  # no poll any more: the swap ends it
    assert "hx-get" not in done.by_id(f"probe-{endpoint.pk}").attrs
    assert "tool_calls" in [t for t, _ in done.texts]
    assert "Probing" not in "".join(t for t, _ in done.texts)
    cell = fragment(alice_client, endpoint, "?in=playground").by_id(f"probe-cell-{endpoint.pk}")
    assert "hx-get" not in cell.attrs
    page = Tree(alice_client.get("/endpoints/").content.decode())
    assert "hx-get" not in page.by_id(f"probe-{endpoint.pk}").attrs


def test_the_report_fragment_needs_a_login_and_a_known_endpoint(
    alice_client: Client, endpoint: ModelEndpoint,
) -> None:
    assert Client().get(f"/endpoints/{endpoint.pk}/probe/report/").status_code == 302
    assert alice_client.get(
        "/endpoints/00000000-0000-0000-0000-000000000000/probe/report/").status_code == 404
    never = fragment(alice_client, endpoint)  # nobody asked: nothing under way
    assert "hx-get" not in never.by_id(f"probe-{endpoint.pk}").attrs
    assert "Not probed yet." in [t.strip() for t, _ in never.texts]


def test_an_error_every_check_met_is_shown_once(
    alice_client: Client, settings: Any,
) -> None:
    settings.AGENTFORGE_OUTBOUND_ALLOW_LOOPBACK = True
    closed = ModelEndpoint.objects.create(name="nobody home", kind="openai_compatible",
                                          base_url="http://127.0.0.1:9/v1", model="m")
    probe(str(closed.pk))
    closed.refresh_from_db()
    details = {c["detail"] for c in closed.capability_report["checks"]}
    assert len(details) == 1  # the same error, five times over
    [detail] = details

    page = alice_client.get("/endpoints/").content.decode()
    assert page.count(html.escape(detail, quote=True)) == 1
    assert page.count("The same error as tool_calls.") == 4


def test_a_probe_that_cannot_start_reports_why_once(
    alice_client: Client, settings: Any,
) -> None:
    keyless = ModelEndpoint.objects.create(name="no key", kind="openai_compatible",
                                           base_url="https://api.example.com/v1", model="m",
                                           api_key_env="NOT_AN_ALLOWED_VARIABLE")
    probe(str(keyless.pk))
    keyless.refresh_from_db()

    checks = keyless.capability_report["checks"]
    assert [c["status"] for c in checks] == ["error"] * 5
    assert checks[0]["detail"].startswith("the probe could not start: ")
    page = alice_client.get("/endpoints/").content.decode()
    assert page.count("the probe could not start: ") == 1
