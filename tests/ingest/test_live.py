"""A received run is live: a viewer's socket on its page gets the rounds each OTLP
request adds as they come (the run's event log and the live path every run uses)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AbstractUser
from django.test import Client
from opentelemetry.trace import Tracer

from agentforge_web.asgi import application
from tests.ingest.support import assistant, call_part, chat_span, post, protobuf, spans_of, text
from tests.ingest.support import tool_span as traced_tool
from tools_app.models import Run
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db(transaction=True)

WAIT = 10.0  # seconds: an upper bound for one message, never a measured duration


def two_rounds(tracer: Tracer) -> None:
    with tracer.start_as_current_span("invoke_agent") as agent:
        agent.set_attribute("gen_ai.operation.name", "invoke_agent")
        chat_span(tracer, output=assistant(text("first"), call_part("c1", "lookup", {})))
        traced_tool(tracer, "lookup", "c1", {}, "found")
        chat_span(tracer, output=assistant(text("the second answer"), finish="stop"))


@sync_to_async
def send(token: str, spans: list[Any]) -> int:
    return int(post(Client(), token, protobuf(spans)).status_code)


@sync_to_async
def session_cookie(user: AbstractUser) -> str:
    client = Client()
    client.force_login(user)
    return str(client.cookies["sessionid"].value)


async def test_a_viewer_sees_the_rounds_each_request_adds(bob: AbstractUser) -> None:
    token = (await sync_to_async(create_token)(bob, "t"))[1]
    chat1, tool, chat2, agent = spans_of(two_rounds)
    assert await send(token, [chat1, tool]) == 200
    run = await Run.objects.aget(created_by=bob)
    assert run.status == "running"
    comm = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/", headers=[
        (b"host", b"127.0.0.1:8000"), (b"origin", b"http://127.0.0.1:8000"),
        (b"cookie", f"sessionid={await session_cookie(bob)}".encode())])
    try:
        connected, code = await comm.connect(timeout=WAIT)
        assert connected, f"refused with {code}"
        await comm.send_json_to({"type": "resume", "after": run.last_seq})

        assert await send(token, [chat2]) == 200
        html = await comm.receive_from(timeout=WAIT)
        assert 'id="round-1"' in html
        assert "the second answer" in html

        assert await send(token, [agent]) == 200  # the root span: the run ends
        html = await comm.receive_from(timeout=WAIT)
        assert 'data-status="succeeded"' in html
    finally:
        with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError):
            await comm.disconnect(timeout=WAIT)
