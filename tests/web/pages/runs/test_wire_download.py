"""Large wire bodies: the timeline shows a head; the full JSON is a download."""

from __future__ import annotations

import json
from typing import Any

import pytest
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


def test_a_large_request_shows_a_head_and_a_download_link(
    alice_client: Client, run_with_big_request: RunModel
) -> None:
    page = alice_client.get(f"/runs/{run_with_big_request.pk}/").content.decode()
    assert "TAIL" not in page
    assert f"/runs/{run_with_big_request.pk}/rounds/0/request.json" in page
    assert "/rounds/0/response.json" not in page  # small: shown in full, no link


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
    assert alice_client.get(f"{base}/0/headers.json").status_code == 404
    assert alice_client.get(f"{base}/7/request.json").status_code == 404
