"""Which run a request joins: the X-AgentForge-Run header names it; without it, a request
continues the run whose earlier exchange is its prefix, once; a run is its token's user's."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from django.contrib.auth.models import AbstractUser
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.proxy.conftest import Proxy
from tests.proxy.support import openai_loop
from tools_app.models import (
    IngestedLayout,
    IngestedRunKey,
    IngestedSpan,
    Round,
    Run,
    RunStatus,
    ToolCall,
)
from tools_app.proxy import recording
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db(transaction=True)


def _client(proxy: Proxy, token: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.openai_base(), api_key=token or proxy.token,
                         max_retries=0)


def _chat(client: openai.OpenAI, messages: list[Any], **headers: str) -> str:
    """One plain request (no tools); the answer's text."""
    completion = client.chat.completions.create(model="fake-model", messages=messages,
                                                extra_headers=headers or None)
    return completion.choices[0].message.content or ""


def test_requests_naming_the_same_run_are_its_rounds(proxy: Proxy) -> None:
    client = _client(proxy)
    _chat(client, [{"role": "user", "content": "first"}], **{"X-AgentForge-Run": "nightly"})
    _chat(client, [{"role": "user", "content": "unrelated"}],
          **{"X-AgentForge-Run": "nightly"})
    _chat(client, [{"role": "user", "content": "first"}], **{"X-AgentForge-Run": "other"})
    proxy.recorded()

    runs = list(Run.objects.filter(created_by=proxy.user).order_by("created_at"))
    assert [r.rounds_count for r in runs] == [2, 1]


def test_a_tool_loop_with_the_header_is_one_run(proxy: Proxy) -> None:
    openai_loop(_client(proxy), "Weather in Lima?", stream=True,
                headers={"X-AgentForge-Run": "lima"})
    proxy.recorded()

    run = Run.objects.get(created_by=proxy.user)
    assert run.rounds_count == 2
    assert run.tool_calls_count == 1


def test_a_request_carrying_every_earlier_result_reads_only_the_rounds_it_needs(
        proxy: Proxy) -> None:
    """Each request of a tool loop sends back every result so far: the results whose
    tool spans are recorded are not looked for again, and the round that proposed a new
    one is looked for from the latest stored span back, not in every span's JSON."""
    sent = openai_loop(_client(proxy), "Weather in Oslo?", stream=False, max_rounds=7,
                       headers={"X-AgentForge-Run": "oslo"}, model="fake-k5-p1")
    proxy.recorded()

    run = Run.objects.get(created_by=proxy.user)
    calls = list(ToolCall.objects.filter(run=run).order_by("round__index").values_list(
        "call_id", "state", "result_text"))
    assert [(state, result) for _, state, result in calls] == \
        [("succeeded", result) for result in sent]
    assert len(calls) == 5
    trace = IngestedRunKey.objects.get(run=run, key__startswith="trace:").key[len("trace:"):]
    call_ids = {call_id for call_id, _, _ in calls}
    with CaptureQueriesContext(connection) as all_recorded:
        assert recording._proposals(trace, call_ids) == {}
    assert len(all_recorded.captured_queries) == 1  # which tool spans are stored

    last = calls[-1][0]
    IngestedSpan.objects.filter(
        trace_id=trace, span_id=recording._span_id(trace, f"tool:{last}")).delete()
    with CaptureQueriesContext(connection) as one_missing:
        found = recording._proposals(trace, call_ids)

    layout = IngestedLayout.objects.get(run=run).rows
    assert {call_id: span for call_id, (span, _) in found.items()} == {last: layout[4][0]}
    assert len([q for q in one_missing.captured_queries if '"data"' in q["sql"]]) == 1
    first = calls[0][0]  # proposed about ten spans back: past the newest few
    IngestedSpan.objects.filter(
        trace_id=trace, span_id=recording._span_id(trace, f"tool:{first}")).delete()
    found = recording._proposals(trace, call_ids)
    assert {call_id: span for call_id, (span, _) in found.items()} == \
        {first: layout[0][0], last: layout[4][0]}


def test_a_request_continues_the_run_its_prefix_came_from(proxy: Proxy) -> None:
    client = _client(proxy)
    first = [{"role": "user", "content": "hello"}]
    answer = _chat(client, first)
    later = [*first, {"role": "assistant", "content": answer},
             {"role": "user", "content": "and then?"}]
    _chat(client, later)
    _chat(client, [{"role": "user", "content": "a new conversation"}])
    proxy.recorded()

    runs = list(Run.objects.filter(created_by=proxy.user).order_by("created_at"))
    assert [r.rounds_count for r in runs] == [2, 1]
    second = Round.objects.get(run=runs[0], index=1)
    assert second.request_json["messages"][-1]["content"] == "and then?"


def test_two_conversations_that_begin_alike_are_two_runs(proxy: Proxy) -> None:
    client = _client(proxy)
    for _ in range(2):
        first = [{"role": "user", "content": "same start"}]
        answer = _chat(client, first)
        _chat(client, [*first, {"role": "assistant", "content": answer},
                       {"role": "user", "content": "go on"}])
    proxy.recorded()

    runs = Run.objects.filter(created_by=proxy.user)
    assert sorted(r.rounds_count for r in runs) == [2, 2]


def test_another_users_prefix_starts_a_run_of_their_own(
        proxy: Proxy, charlie: AbstractUser) -> None:
    _, charlies_token = create_token(charlie, "charlie's client")
    first = [{"role": "user", "content": "shared words"}]
    answer = _chat(_client(proxy), first)
    _chat(_client(proxy, charlies_token), [*first, {"role": "assistant", "content": answer},
                                           {"role": "user", "content": "mine"}])
    proxy.recorded()

    assert Run.objects.get(created_by=proxy.user).rounds_count == 1
    assert Run.objects.get(created_by=charlie).rounds_count == 1


def test_a_retry_after_a_provider_error_continues_the_same_run(proxy: Proxy) -> None:
    client = _client(proxy)
    first = [{"role": "user", "content": "hello"}]
    later = [*first, {"role": "assistant", "content": _chat(client, first)},
             {"role": "user", "content": "more"}]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="fake-model", messages=later,  # type: ignore[arg-type]
                                       extra_body={"foo": 1})
    _chat(client, later)
    proxy.ended()  # the conversation gone idle

    run = Run.objects.get(created_by=proxy.user)
    statuses = list(Round.objects.filter(run=run).order_by("index")
                    .values_list("status", flat=True))
    assert statuses == ["responded", "failed", "responded"]
    # Its last exchange answered: the run succeeded, the failed round is the retried one.
    assert run.status == RunStatus.SUCCEEDED
    assert run.error_type == ""
