"""A proxied run on its page and live: what the client sent is escaped (it is
untrusted), and each exchange sends live viewers the round it added."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.proxy.conftest import Proxy
from tools_app.live.fragments import render_updates
from tools_app.models import Run
from tools_app.runs.debugger.lineage import badges
from tools_app.runs.store.selectors import event_marks_after

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = "<script>alert('x')</script>"
RUN = {"X-AgentForge-Run": "page"}


def _chat(proxy: Proxy, content: str) -> None:
    client = openai.OpenAI(base_url=proxy.openai_base(), api_key=proxy.token, max_retries=0)
    messages: Any = [{"role": "user", "content": content}]
    client.chat.completions.create(model="fake-model", messages=messages, extra_headers=RUN)
    proxy.recorded()


def test_each_exchange_sends_live_viewers_its_round(proxy: Proxy) -> None:
    _chat(proxy, "first question")
    run = Run.objects.get(created_by=proxy.user)
    seen = run.last_seq

    _chat(proxy, "second question")

    fragment = render_updates(run.pk, event_marks_after(run.pk, seen))
    assert 'id="round-1"' in fragment
    assert "second question" in fragment
    assert 'id="round-0"' not in fragment  # unchanged: not sent again


def test_the_page_escapes_what_the_client_sent(proxy: Proxy, bob_client: Client) -> None:
    _chat(proxy, HOSTILE)
    run = Run.objects.get(created_by=proxy.user)

    page = bob_client.get(f"/runs/{run.pk}/").content.decode()

    assert "Recorded by the proxy in front of endpoint fake-openai" in page
    assert "Received over OpenTelemetry" not in page
    assert [b.title for b in badges(run.snapshot)] == ["Recorded by the proxy"]
    assert HOSTILE not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page


def test_another_user_cannot_see_the_run(proxy: Proxy, charlie: AbstractUser) -> None:
    _chat(proxy, "private")
    run = Run.objects.get(created_by=proxy.user)
    client = Client()
    client.force_login(charlie)

    assert client.get(f"/runs/{run.pk}/").status_code == 404
