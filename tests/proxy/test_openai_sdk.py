"""The openai SDK pointed at the proxy: its tool loop's requests reach the fake provider
with the endpoint's key, and become the rounds of one run whose calls the next request's
tool results complete."""

from __future__ import annotations

import json

import openai
import pytest

from tests.proxy.conftest import Proxy
from tests.proxy.support import get_weather, openai_loop
from tools_app.models import Round, Run, RunStatus, ToolCall

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.both]


def _client(proxy: Proxy, endpoint: str = "fake-openai") -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.openai_base(endpoint), api_key=proxy.token,
                         max_retries=0)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streaming"])
def test_a_tool_loop_becomes_one_run_with_completed_calls(proxy: Proxy, stream: bool) -> None:
    sent = openai_loop(_client(proxy), "Weather in Paris?", stream=stream)
    proxy.ended()  # the conversation gone idle

    assert sent == [get_weather(json.loads(_first_arguments())["city"])]
    run = Run.objects.get(created_by=proxy.user)
    assert run.status == RunStatus.SUCCEEDED
    rounds = list(Round.objects.filter(run=run).order_by("index"))
    assert len(rounds) == 2
    assert rounds[0].finish_reason == "tool_execution"
    assert rounds[1].finish_reason == "stop"
    assert rounds[1].ai_text
    call = ToolCall.objects.get(run=run)
    assert call.round_id == rounds[0].pk
    assert call.tool_name == "get_weather"
    assert call.result_text == sent[0]
    assert call.state == "succeeded"
    assert not call.is_error
    # The call took from the answer that proposed it to the request that carried it back.
    assert call.started_at == rounds[0].finished_at
    assert call.finished_at == rounds[1].started_at
    assert call.duration_ms is not None
    assert call.duration_ms >= 0
    assert run.final_text == rounds[1].ai_text
    assert run.snapshot["imported"]["via"] == "proxy"
    assert run.snapshot["imported"]["otlp"]["service"] == "fake-openai"
    assert run.snapshot["endpoint"]["name"] == "Recording proxy: fake-openai"


def _first_arguments() -> str:
    return ToolCall.objects.get().arguments_raw
