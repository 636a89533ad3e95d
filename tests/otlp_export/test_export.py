"""OTLP out, end to end: a run the product makes (a scripted model, tools that really
run, one of them failing) is exported by the embedded worker's hook, through the SDK's
OTLP/HTTP exporter, to the product's own receiver (`POST /v1/traces` on a live server,
bob's API token: the received run is bob's, the original nobody's), and the received run
compares equal to the original. A full queue drops spans and counts them; an endpoint
that refuses everything fails no run and is counted; a changed run is read from where its
export got to, however long it is."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.core.management import call_command
from django.db import connection
from django.db.models.signals import post_init
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.runs.support import EchoingModel, execute, http_server, start
from tests.test_settings import refused
from tools_app.models import (
    ErrorPolicy,
    IngestedSpan,
    ModelEndpoint,
    Round,
    Run,
    RunStatus,
    ToolCall,
    ToolRegistration,
    TraceExportStatus,
)
from tools_app.otlp_export import exporter as otlp
from tools_app.runs.debugger.approvals import decide_round
from tools_app.runs.debugger.compare import compare_runs
from tools_app.runs.services import conversation, run_create
from tools_app.web.api.tokens import create_token

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.both]

SCRIPT = [
    {"text": "Let me look.",
     "tool_calls": [{"name": "get_weather", "arguments": {"city": "Hangzhou"}},
                    {"name": "calculator", "arguments": {"expression": "2 +* 3"}}]},
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "(2+3)*4"}}]},
    {"text": "Here you go: {last_results}"},
]


@pytest.fixture
def token(bob: AbstractUser) -> str:
    return create_token(bob, "otlp out")[1]


@pytest.fixture
def exporting(live_server: Any, token: str) -> Iterator[None]:
    """The product exporting to its own receiver, as an operator configures it."""
    with override_settings(AGENTFORGE_OTLP_ENDPOINT=live_server.url,
                           AGENTFORGE_OTLP_HEADERS=f"authorization=Bearer%20{token}"):
        yield
    otlp.shutdown()  # unset first: what it still sends makes no new exporter


SYSTEM_PROMPT = "You answer with the tools' results."


def made_run(make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
             policy: ErrorPolicy) -> Run:
    endpoint = make_endpoint(SCRIPT, name="scripted weather")
    run = run_create(user=None, endpoint=endpoint,
                     tools=[demo_tools["get_weather"], demo_tools["calculator"]],
                     policy=policy, messages=conversation(
                         system_prompt=SYSTEM_PROMPT,
                         user_message="Weather in Hangzhou, and some sums"))
    assert execute(run) == RunStatus.SUCCEEDED
    return run


def received_run(owner: AbstractUser) -> Run:
    return Run.objects.get(created_by=owner)


def test_it_exports_a_run_that_the_receiver_reads_back_equal(
        exporting: None, bob: AbstractUser, make_endpoint: Any,
        demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> None:
    original = made_run(make_endpoint, demo_tools, policy)
    exporter = otlp.configured()
    assert exporter is not None
    exporter.drain()

    copy = received_run(bob)
    assert copy.status == RunStatus.SUCCEEDED
    assert copy.title == original.title
    assert original.title
    compared = compare_runs(original, copy)
    assert compared["same_calls"], compared["first_divergent_round"]
    assert not any(r["diverges"] for r in compared["rounds"])
    assert compared["final_text"]["same"]
    assert copy.final_text == original.final_text
    for pair in compared["rounds"]:
        for side in ("status", "finish_reason", "tokens"):
            assert pair["a"][side] == pair["b"][side], (pair["number"], side)
        assert [c["a"]["state"] for c in pair["calls"]] == \
            [c["b"]["state"] for c in pair["calls"]]

    failed = ToolCall.objects.get(run=copy, is_error=True)
    assert failed.tool_name == "calculator"
    assert failed.error_type
    assert failed.error_type == ToolCall.objects.get(run=original, is_error=True).error_type
    for row in Round.objects.filter(run=original):  # the rows' own times
        received = Round.objects.get(run=copy, index=row.index)
        assert (received.started_at, received.finished_at) == (row.started_at,
                                                                row.finished_at)
    assert copy.snapshot["messages"] == original.snapshot["messages"]
    assert original.snapshot["messages"][0]["text"] == SYSTEM_PROMPT
    spans = IngestedSpan.objects.filter(trace_id=original.pk.hex)
    assert spans.count() == 1 + 3 + 3  # the run, its rounds, its calls
    chats = [data["attributes"] for data in spans.values_list("data", flat=True)
             if data["attributes"]["gen_ai.operation.name"] == "chat"]
    assert len(chats) == 3
    for chat in chats:  # the system prompt apart from the chat history
        assert json.loads(chat["gen_ai.system_instructions"]) == [
            {"type": "text", "content": SYSTEM_PROMPT}]
        assert "system" not in {m["role"] for m in json.loads(chat["gen_ai.input.messages"])}
    status = TraceExportStatus.objects.get(process=otlp.process_key())
    assert (status.sent, status.dropped, status.failed) == (7, 0, 0)


def test_a_full_queue_drops_spans_and_counts_them(
        live_server: Any, token: str, bob: AbstractUser, make_endpoint: Any,
        demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> None:
    original = made_run(make_endpoint, demo_tools, policy)  # no endpoint set: not exported
    assert not IngestedSpan.objects.exists()
    small = otlp.build(live_server.url, f"authorization=Bearer%20{token}", queue_size=2)

    small.collect(original.pk.hex)  # nothing sends meanwhile: the queue fills
    assert small.queue.qsize() == 2
    assert small.counts.dropped == 5
    small.flush()

    assert IngestedSpan.objects.filter(trace_id=original.pk.hex).count() == 2
    status = TraceExportStatus.objects.get(process=otlp.process_key())
    assert (status.sent, status.dropped, status.failed) == (2, 5, 0)
    small.collect(original.pk.hex)  # dropped is gone: not queued again
    assert small.queue.empty()


def test_a_failing_endpoint_fails_no_run_and_is_counted(
        live_server: Any, make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
        policy: ErrorPolicy, alice_client: Client) -> None:
    with override_settings(AGENTFORGE_OTLP_ENDPOINT=f"{live_server.url}/v1/traces",
                           AGENTFORGE_OTLP_HEADERS="authorization=Bearer%20not-a-token"):
        original = made_run(make_endpoint, demo_tools, policy)
        exporter = otlp.configured()
        assert exporter is not None
        exporter.drain()
    otlp.shutdown()

    original.refresh_from_db()
    assert original.status == RunStatus.SUCCEEDED
    assert original.final_text
    assert not IngestedSpan.objects.exists()
    status = TraceExportStatus.objects.get(process=otlp.process_key())
    assert (status.sent, status.failed) == (0, 7)
    assert status.last_error

    page = alice_client.get(reverse("admin:tools_app_traceexportstatus_changelist"))
    assert page.status_code == 200
    row = page.content.decode()
    assert otlp.process_key() in row
    assert f"{live_server.url}/v1/traces" in row
    assert status.last_error[:30] in row
    assert '<td class="field-failed">7</td>' in row
    assert '<td class="field-sent">0</td>' in row
    out = StringIO()
    call_command("worker_status", "--json", stdout=out)
    exports = json.loads(out.getvalue())["otlp_export"]
    assert [(e["process"], e["sent"], e["failed"]) for e in exports] == [
        (otlp.process_key(), 0, 7)]


def test_it_exports_a_run_live_as_it_goes(
        exporting: None, bob: AbstractUser, make_endpoint: Any,
        demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> None:
    """A run waiting for an approval has its first round out already (the received run
    is still going); once approved and finished, the rest follows and the runs agree."""
    demo_tools["calculator"].requires_approval = True
    demo_tools["calculator"].save(update_fields=["requires_approval"])
    endpoint = make_endpoint(SCRIPT, name="scripted weather")
    original = start(endpoint, [demo_tools["get_weather"], demo_tools["calculator"]], policy,
                     "Weather in Hangzhou, and some sums")
    assert execute(original) == RunStatus.WAITING
    exporter = otlp.configured()
    assert exporter is not None
    exporter.drain()

    going = received_run(bob)
    assert going.status == RunStatus.RUNNING
    first = Round.objects.get(run=going, index=0)
    assert first.ai_text == "Let me look."

    decide_round(run=original, user=None, round_index=0)
    assert execute(original) == RunStatus.WAITING  # round 2's calculator call
    decide_round(run=original, user=None, round_index=1)
    assert execute(original) == RunStatus.SUCCEEDED
    exporter.drain()

    done = received_run(bob)
    assert done.status == RunStatus.SUCCEEDED
    compared = compare_runs(original, done)
    assert compared["same_calls"], compared["first_divergent_round"]
    assert done.final_text == original.final_text


CANARY_KEY = "sk-canary-5d1e8b3f9a2c4071"
CANARY_HEADER = "hdr-canary-8c4a1e7b3d90"


def test_secrets_a_model_echoes_are_never_exported(
        exporting: None, monkeypatch: pytest.MonkeyPatch,
        demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> None:
    """A hostile model puts the endpoint's key and header in its tool call's arguments
    and its answer: the spans sent carry neither (the run's own redaction)."""
    monkeypatch.setenv("AGENTFORGE_TEST_CANARY_API_KEY", CANARY_KEY)
    monkeypatch.setenv("AGENTFORGE_TEST_CANARY_TOKEN", CANARY_HEADER)
    with http_server(EchoingModel) as url:
        endpoint = ModelEndpoint.objects.create(
            name="echoing model", kind="openai_compatible", base_url=url,
            model="fake-model", api_key_env="AGENTFORGE_TEST_CANARY_API_KEY",
            extra_headers={"X-Api-Key": "env:AGENTFORGE_TEST_CANARY_TOKEN"})
        original = start(endpoint, [demo_tools["calculator"]], policy)
        assert execute(original) == RunStatus.SUCCEEDED
    exporter = otlp.configured()
    assert exporter is not None
    exporter.drain()

    sent = [json.dumps(data) for data in IngestedSpan.objects.filter(
        trace_id=original.pk.hex).values_list("data", flat=True)]
    assert len(sent) == 1 + 2 + 1  # the run, two rounds, the call
    assert any("done, your keys" in text for text in sent)  # the answer went out...
    assert not [text for text in sent if CANARY_KEY in text or CANARY_HEADER in text]


def test_a_failed_run_is_exported_failed_with_its_error(
        exporting: None, bob: AbstractUser, make_endpoint: Any,
        demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> None:
    """The scripted model has no step for round 2: that round and the run fail."""
    endpoint = make_endpoint(SCRIPT[:1], name="one step")
    original = start(endpoint, [demo_tools["get_weather"], demo_tools["calculator"]], policy)
    assert execute(original) == RunStatus.FAILED
    exporter = otlp.configured()
    assert exporter is not None
    exporter.drain()

    copy = received_run(bob)
    assert copy.status == RunStatus.FAILED
    assert copy.error_type == original.error_type
    assert "scripted model has 1 steps" in copy.error_message
    compared = compare_runs(original, copy)
    assert compared["same_calls"], compared["first_divergent_round"]
    assert [(r["a"]["status"], r["b"]["status"]) for r in compared["rounds"]] == [
        ("responded", "responded"), ("failed", "failed")]


def test_an_endpoint_that_is_not_an_http_url_is_refused_at_start(tmp_path: Path) -> None:
    message = refused(tmp_path, AGENTFORGE_OTLP_ENDPOINT="collector:4318")
    assert "AGENTFORGE_OTLP_ENDPOINT must be an http:// or https:// URL" in message


def waiting_run(make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
                policy: ErrorPolicy, rounds: int) -> Run:
    """A run of `rounds` rounds, each a weather call, the last a calculator call waiting
    for its approval (then one more round answers)."""
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": f"City {n}"}}]}
        for n in range(rounds - 1)]
    script += [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+3"}}]},
               {"text": "Done: {last_results}"}]
    run = start(make_endpoint(script, name=f"{rounds} rounds"),
                [demo_tools["get_weather"], demo_tools["calculator"]], policy,
                f"A run of {rounds} rounds")
    assert execute(run) == RunStatus.WAITING
    assert run.rounds.count() == rounds
    return run


def reads_of(exporter: otlp.RunExporter, run: Run) -> tuple[int, int]:
    """The statements and the rows (model instances loaded) a collection of the run
    takes."""
    loaded: list[object] = []

    def count(sender: Any, instance: object, **kwargs: Any) -> None:
        loaded.append(instance)

    post_init.connect(count, weak=False)
    try:
        with CaptureQueriesContext(connection) as queries:
            exporter.collect(run.pk.hex)
    finally:
        post_init.disconnect(count)
    return len(queries), len(loaded)


def test_a_changed_run_is_read_from_where_its_export_got_to(
        live_server: Any, token: str, bob: AbstractUser, make_endpoint: Any,
        demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> None:
    """Runs of 3 and of 30 rounds, exported while waiting for an approval, then changed
    alike (the call approved and run, one more round, the end): collecting the change
    reads as many rows of either, and what went out still makes the same run."""
    demo_tools["calculator"].requires_approval = True
    demo_tools["calculator"].save(update_fields=["requires_approval"])
    exporter = otlp.build(live_server.url, f"authorization=Bearer%20{token}")
    reads = {}
    for rounds in (3, 30):
        original = waiting_run(make_endpoint, demo_tools, policy, rounds)
        exporter.collect(original.pk.hex)  # the first time: the whole run
        decide_round(run=original, user=None, round_index=rounds - 1)
        assert execute(original) == RunStatus.SUCCEEDED
        reads[rounds] = reads_of(exporter, original)
        assert reads_of(exporter, original) == (0, 0)  # ended: nothing more to read
        exporter.flush()

        copy = Run.objects.filter(ingested_spans__trace_id=original.pk.hex).distinct().get()
        assert (copy.created_by, copy.status) == (bob, RunStatus.SUCCEEDED)
        compared = compare_runs(original, copy)
        assert compared["same_calls"], compared["first_divergent_round"]
        assert len(compared["rounds"]) == rounds + 1
        assert not any(r["diverges"] for r in compared["rounds"])
        assert copy.final_text == original.final_text == "Done: 5"
    assert reads[3] == reads[30]
    assert reads[30][1] < 1 + 30, reads  # not the run and all its rounds


LONG_PROMPT = "Answer with the tools' results. " * 100  # 3,200 characters
ONE_RUN = 4_500  # characters: one run's conversation fits, never two


def taken(exporter: otlp.RunExporter) -> list[str]:
    """The spans the exporter queued since last taken, as JSON."""
    out = []
    while not exporter.queue.empty():
        out.append(exporter.queue.get_nowait().to_json())
    return out


def test_conversations_let_go_past_the_memory_budget_are_read_again_the_same(
        make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
        policy: ErrorPolicy) -> None:
    """Two runs, each waiting twice for an approval, changed in turn and collected by
    three exporters: one keeping every conversation, one with room for a single run's,
    one with none. A run let go is read whole at its next change (once: unchanged, it is
    read from where it got to again), and every collection queues the same spans as the
    exporter that kept everything; what is kept never exceeds the budget."""
    demo_tools["calculator"].requires_approval = True
    demo_tools["calculator"].save(update_fields=["requires_approval"])
    exporters = {budget: otlp.RunExporter(InMemorySpanExporter(), queue_size=100,
                                          endpoint="in memory", memory_budget=budget)
                 for budget in (10**9, ONE_RUN, 0)}
    everything, one, none = exporters.values()
    runs = []
    for name in ("first", "second"):
        run = run_create(user=None, endpoint=make_endpoint(SCRIPT, name=name),
                         tools=[demo_tools["get_weather"], demo_tools["calculator"]],
                         policy=policy, messages=conversation(
                             system_prompt=LONG_PROMPT, user_message="Weather and sums"))
        assert execute(run) == RunStatus.WAITING
        runs.append(run)
    first, second = runs

    def collected(run: Run, changed: bool = True) -> dict[otlp.RunExporter, tuple[int, int]]:
        reads = {exporter: reads_of(exporter, run) for exporter in exporters.values()}
        spans = {exporter: taken(exporter) for exporter in exporters.values()}
        assert bool(spans[everything]) == changed
        assert spans[one] == spans[none] == spans[everything]
        assert one.kept_size <= ONE_RUN
        assert none.kept_size == 0
        return reads

    def approved(run: Run, round_index: int) -> None:
        decide_round(run=run, user=None, round_index=round_index)
        execute(run)

    collected(first)
    collected(second)  # the first one's conversation let go
    assert everything.kept_size > ONE_RUN
    assert one.kept_size > 0
    approved(first, 0)
    collected(first)  # its snapshot read again (its rounds were all still open)
    reads = collected(first, changed=False)  # kept: read from where it got to
    assert reads[one] == reads[everything] < reads[none]
    approved(second, 0)
    collected(second)  # the first one let go, its first round over for good
    approved(first, 1)
    assert first.status == RunStatus.SUCCEEDED
    reads = collected(first)  # its conversation made again from its first round
    assert reads[one] == reads[none] > reads[everything]
    approved(second, 1)
    assert second.status == RunStatus.SUCCEEDED
    collected(second)
