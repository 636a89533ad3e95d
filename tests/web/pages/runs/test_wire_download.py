"""Wire bodies: the run page carries none (a round's request repeats the whole
conversation), only a panel per round that loads them when opened; the panel shows a
head of a large body, and the full JSON is a download."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.db.models import JSONNull
from django.test import Client

from tests.web.support import start_run
from tools_app.models import Round
from tools_app.models import Run as RunModel

pytestmark = pytest.mark.django_db


@pytest.fixture
def run_with_big_request(alice: Any, weather_endpoint: Any, demo_tools: Any,
                         policy: Any, settings: Any) -> RunModel:
    settings.AGENTFORGE_DISPLAY_LIMIT = 500
    run = start_run(alice, weather_endpoint, [demo_tools["get_weather"]], policy)
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 5000 + "TAIL"}]}
    Round.objects.create(run=run, index=0, status="responded", request_json=body,
                         response_json={"ok": True})
    return run


def test_the_page_carries_no_body_only_the_panel_that_loads_it(
    alice_client: Client, run_with_big_request: RunModel
) -> None:
    run = run_with_big_request
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert "xxxxxxxxxx" not in page
    assert "&quot;ok&quot;" not in page
    panel = re.search(r'<details class="wire" ([^>]*)>', page)
    assert panel is not None
    assert f'hx-get="/runs/{run.pk}/rounds/0/wire/"' in panel.group(1)
    assert 'hx-trigger="toggle once"' in panel.group(1)
    # It replaces only its placeholder: the summary stays.
    assert 'hx-target="find .wire-grid" hx-swap="outerHTML"' in panel.group(1)
    # Without the panel (no script), both bodies can still be downloaded.
    assert f"/runs/{run.pk}/rounds/0/request.json" in page
    assert f"/runs/{run.pk}/rounds/0/response.json" in page


def test_a_round_without_a_response_links_only_its_request(
    alice_client: Client, run_with_big_request: RunModel
) -> None:
    run = run_with_big_request
    Round.objects.filter(run=run, index=0).update(response_json=None)
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert "/rounds/0/request.json" in page
    assert "/rounds/0/response.json" not in page
    Round.objects.filter(run=run, index=0).update(request_json=None)
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert '<details class="wire"' not in page  # nothing to show


def test_a_json_null_response_is_no_body(
    alice_client: Client, run_with_big_request: RunModel
) -> None:
    """A provider's answer is stored as it came: `null` is stored as JSON null, which
    the page does not count as a response to show or download."""
    run = run_with_big_request
    Round.objects.filter(run=run, index=0).update(response_json=JSONNull())
    assert Round.objects.filter(run=run, index=0, response_json__isnull=False).exists()
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert "/rounds/0/request.json" in page
    assert "/rounds/0/response.json" not in page


def test_a_large_request_shows_a_head_and_a_download_link(
    alice_client: Client, run_with_big_request: RunModel
) -> None:
    panel = alice_client.get(f"/runs/{run_with_big_request.pk}/rounds/0/wire/")
    assert panel.status_code == 200
    html = panel.content.decode()
    assert html.startswith('<div class="wire-grid" hx-disable>')
    assert "x" * 400 in html
    assert "TAIL" not in html
    assert f"/runs/{run_with_big_request.pk}/rounds/0/request.json" in html
    assert "/rounds/0/response.json" not in html  # small: shown in full, no link
    assert "&quot;ok&quot;: true" in html


def test_the_panel_shows_a_streamed_response_as_it_arrived(
    alice_client: Client, run_with_big_request: RunModel
) -> None:
    run = run_with_big_request
    Round.objects.filter(run=run, index=0).update(raw_stream='data: {"delta": "<b>"}')
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert "the stream as it arrived" in page
    assert "data: {" not in page
    html = alice_client.get(f"/runs/{run.pk}/rounds/0/wire/").content.decode()
    assert 'id="round-0-sse"' in html
    assert "data: {&quot;delta&quot;: &quot;&lt;b&gt;&quot;}" in html


def test_the_download_is_the_full_json_as_an_attachment(
    alice_client: Client, run_with_big_request: RunModel
) -> None:
    response = alice_client.get(f"/runs/{run_with_big_request.pk}/rounds/0/request.json")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/json")
    assert response["Content-Disposition"].startswith("attachment;")
    assert json.loads(response.content)["messages"][0]["content"].endswith("TAIL")


def test_another_users_run_and_unknown_bodies_are_not_found(
    bob_client: Client, alice_client: Client, run_with_big_request: RunModel
) -> None:
    base = f"/runs/{run_with_big_request.pk}/rounds"
    assert bob_client.get(f"{base}/0/request.json").status_code == 404
    assert bob_client.get(f"{base}/0/wire/").status_code == 404
    assert alice_client.get(f"{base}/7/wire/").status_code == 404
    assert alice_client.post(f"{base}/0/wire/").status_code == 405
    assert Client().get(f"{base}/0/wire/").status_code == 302  # to the login page
    # The panel's own request, from a page whose login ended: told, not redirected (the
    # login page would be shown inside the panel).
    ended = Client().get(f"{base}/0/wire/", headers={"HX-Request": "true"})
    assert ended.status_code == 401
    assert ended["Content-Type"].startswith("text/plain")
    assert alice_client.get(f"{base}/0/headers.json").status_code == 404
    assert alice_client.get(f"{base}/7/request.json").status_code == 404
