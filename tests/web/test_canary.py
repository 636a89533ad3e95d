"""A canary key, sent to a model that echoes it back in every answer (streamed and not),
is found nowhere a person or a client can read: not in the database, the run page, the
round wire views, the run API, the events API, nor the logs."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.runs.support import EchoingModel, http_server, stored_strings
from tests.web.support import start_run
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, ToolRegistration
from tools_app.runs import tasks
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db

CANARY_KEY = "sk-canary-web-5d1e9b7a3c2f4068"
CANARY_TOKEN = "tok-canary-web-8a2c4e6f0b1d"


@pytest.fixture
def echoing_model() -> Iterator[str]:
    with http_server(EchoingModel) as url:
        yield url


@pytest.mark.parametrize("stream", [False, True])
def test_an_echoed_canary_is_nowhere_to_be_read(
    echoing_model: str, bob: AbstractUser, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    stream: bool,
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("CANARY_WEB_API_KEY", CANARY_KEY)
    monkeypatch.setenv("CANARY_WEB_TOKEN", CANARY_TOKEN)
    endpoint = ModelEndpoint.objects.create(
        name="echoing", kind="openai_compatible", base_url=echoing_model, model="m",
        api_key_env="CANARY_WEB_API_KEY", stream=stream,
        extra_headers={"X-Api-Key": "env:CANARY_WEB_TOKEN"})
    run = start_run(bob, endpoint, [demo_tools["calculator"]], policy)
    assert async_to_sync(tasks.execute_run.acall)(str(run.pk)) == "succeeded"
    run.refresh_from_db()

    page = Client()
    page.force_login(bob)
    api = {"Authorization": f"Bearer {create_token(bob, 'canary')[1]}"}
    responses = [
        page.get(f"/runs/{run.pk}/"),
        page.get("/runs/"),
        page.get(f"/runs/{run.pk}/rounds/0/request.json"),
        page.get(f"/runs/{run.pk}/rounds/0/response.json"),
        page.get(f"/runs/{run.pk}/rounds/0/wire/"),
        Client().get(f"/api/runs/{run.pk}", headers=api),
        Client().get(f"/api/runs/{run.pk}/events?after=0", headers=api),
        Client().get("/api/runs", headers=api),
    ]
    assert [r.status_code for r in responses] == [200] * len(responses)
    readable = [*stored_strings(run), *(r.content.decode() for r in responses), caplog.text]

    assert "[redacted]" in (run.final_text or "")  # the model did echo them
    leaks = [text[:200] for text in readable if CANARY_KEY in text or CANARY_TOKEN in text]
    assert leaks == []
    # ...nor in a form an escape would hide it in.
    encoded = [json.dumps(CANARY_KEY)[1:-1], CANARY_KEY.replace("-", "\\u002d")]
    assert not [t for t in readable for e in encoded if e in t]
    assert Run.objects.filter(pk=run.pk, status="succeeded").exists()
