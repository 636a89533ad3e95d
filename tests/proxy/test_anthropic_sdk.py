"""The anthropic SDK pointed at the proxy (its base URL `/proxy/<endpoint>`, the token as
its x-api-key): the Messages tool loop becomes one run, and a tool result the client
marks `is_error` is recorded as a failed call."""

from __future__ import annotations

import anthropic
import pytest

from tests.proxy.conftest import Proxy
from tests.proxy.support import anthropic_loop
from tools_app.models import Round, Run, RunStatus, ToolCall

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.both]


def _client(proxy: Proxy) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.anthropic_base(), api_key=proxy.token,
                               max_retries=0)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streaming"])
def test_a_messages_tool_loop_becomes_one_run(proxy: Proxy, stream: bool) -> None:
    sent = anthropic_loop(_client(proxy), "Weather in Oslo?", stream=stream)
    proxy.ended()  # the conversation gone idle

    run = Run.objects.get(created_by=proxy.user)
    assert run.status == RunStatus.SUCCEEDED
    rounds = list(Round.objects.filter(run=run).order_by("index"))
    assert [r.finish_reason for r in rounds] == ["tool_execution", "stop"]
    call = ToolCall.objects.get(run=run)
    assert call.round_id == rounds[0].pk
    assert call.tool_name == "get_weather"
    assert call.arguments == {"city": call.arguments["city"]}
    assert call.result_text == sent[0]
    assert call.state == "succeeded"
    assert run.snapshot["imported"]["via"] == "proxy"
    assert run.snapshot["imported"]["otlp"]["service"] == "fake-anthropic"


def test_a_result_marked_is_error_is_a_failed_call(proxy: Proxy) -> None:
    sent = anthropic_loop(_client(proxy), "Weather in Rome?", stream=False, fail_tools=True)
    proxy.recorded()

    call = ToolCall.objects.get(run__created_by=proxy.user)
    assert call.is_error
    assert call.state == "execution_error"
    assert call.result_text == sent[0]
    assert Run.objects.get(created_by=proxy.user).errors_count == 1
