"""A received run on its page and live: its source named, the spans' text escaped (it
is untrusted), and each request's new rounds sent to live viewers as fragments."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client
from opentelemetry.trace import Tracer

from tests.ingest.support import assistant, call_part, chat_span, post, protobuf, spans_of, text
from tests.ingest.support import tool_span as traced_tool
from tools_app.live.fragments import render_updates
from tools_app.models import Run
from tools_app.runs.debugger.compare import lineage
from tools_app.runs.debugger.lineage import badges
from tools_app.runs.store.selectors import event_marks_after
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db

HOSTILE = "<script>alert('x')</script>"


def hostile_agent(tracer: Tracer) -> None:
    with tracer.start_as_current_span("invoke_agent") as agent:
        agent.set_attributes({"gen_ai.operation.name": "invoke_agent",
                              "gen_ai.agent.name": "<img src=x onerror=alert(1)>"})
        chat_span(tracer, output=assistant(text(HOSTILE), call_part("c1", "lookup", {"q": 1})))
        traced_tool(tracer, "lookup", "c1", {"q": 1}, HOSTILE)


def test_the_page_names_the_source_and_escapes_the_spans_text(
        client: Client, bob: AbstractUser, bob_client: Client) -> None:
    post(client, create_token(bob, "t")[1], protobuf(spans_of(hostile_agent, "shop-agent")))
    [run] = Run.objects.filter(created_by=bob)

    page = bob_client.get(f"/runs/{run.pk}/").content.decode()

    assert "Received over OpenTelemetry (OTLP) from shop-agent" in page
    assert "Max rounds" not in page  # no policy the trace does not say
    assert [b.title for b in badges(run.snapshot)] == ["Received over OpenTelemetry (OTLP)"]
    assert lineage(run.snapshot)["text"] == "received over OpenTelemetry (OTLP)"
    assert HOSTILE not in page
    assert "<img src=x" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


def two_rounds(tracer: Tracer) -> None:
    with tracer.start_as_current_span("invoke_agent") as agent:
        agent.set_attribute("gen_ai.operation.name", "invoke_agent")
        chat_span(tracer, output=assistant(text("first"), call_part("c1", "lookup", {})))
        traced_tool(tracer, "lookup", "c1", {}, "found")
        chat_span(tracer, output=assistant(text("second answer"), finish="stop"))


def test_each_request_sends_live_viewers_the_rounds_it_changed(
        client: Client, bob: AbstractUser) -> None:
    token = create_token(bob, "t")[1]
    chat1, tool, chat2, agent = spans_of(two_rounds)
    post(client, token, protobuf([chat1, tool]))
    [run] = Run.objects.filter(created_by=bob)
    assert run.status == "running"  # received, its root span not yet
    seen = run.last_seq

    post(client, token, protobuf([chat2, agent]))

    fragment = render_updates(run.pk, event_marks_after(run.pk, seen))
    assert 'id="round-1"' in fragment
    assert "second answer" in fragment
    assert 'id="round-0"' not in fragment  # unchanged: not sent again
    assert Run.objects.get(pk=run.pk).status == "succeeded"
