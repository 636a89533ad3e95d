"""The endpoint's key goes to the provider and nowhere else; the client's token goes
nowhere: neither is in any stored row or event, even when a message carries them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from django.core import serializers

from tests.proxy.conftest import ENDPOINT_KEY, Proxy
from tests.proxy.support import openai_loop
from tools_app.fake_llm import BackgroundServer, FakeLLMApp
from tools_app.models import IngestedRunKey, IngestedSpan, Round, Run, RunEvent, ToolCall
from tools_app.proxy.exchanges import Handed

pytestmark = pytest.mark.django_db(transaction=True)


class HeaderKeepingApp(FakeLLMApp):
    """The fake provider, keeping each request's headers as they arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[dict[str, str]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await super().__call__(scope, receive, send)


@pytest.fixture
def fake_server() -> Iterator[BackgroundServer]:
    with BackgroundServer(HeaderKeepingApp()) as server:
        yield server


def _everything_stored() -> str:
    return "".join(serializers.serialize("json", model.objects.all()) for model in
                   (Run, Round, ToolCall, RunEvent, IngestedSpan, IngestedRunKey))


def test_keys_reach_only_the_provider_and_are_never_stored(proxy: Proxy) -> None:
    client = openai.OpenAI(base_url=proxy.openai_base(), api_key=proxy.token, max_retries=0)
    prompt = f"my token is {proxy.token} and the key {ENDPOINT_KEY}; weather in Kyiv?"
    openai_loop(client, prompt, stream=True)
    proxy.recorded()

    app = proxy.fake.app
    assert isinstance(app, HeaderKeepingApp)
    provider_calls = [h for h in app.seen if "authorization" in h]
    assert len(provider_calls) == 2
    assert {h["authorization"] for h in provider_calls} == {f"Bearer {ENDPOINT_KEY}"}
    stored = _everything_stored()
    assert Run.objects.get().rounds_count == 2
    assert "[redacted]" in stored
    assert proxy.token not in stored
    assert ENDPOINT_KEY not in stored


def test_an_exchange_handed_to_the_recorder_process_shows_no_secret_in_its_repr() -> None:
    handed = Handed(user_id=1, endpoint_id="e", endpoint_name="endpoint", kind="openai",
                    dialect="openai-chat", request_body=b"{}", run_header="",
                    started_ns=0, finished_ns=1, status=200,
                    content_type="application/json", response_body=b"{}",
                    response_cut=False, failure="", client_left=False,
                    secrets=("sk-the-endpoints-key",))

    assert "sk-the-endpoints-key" not in repr(handed)
    assert handed.secrets == ("sk-the-endpoints-key",)  # still handed over
