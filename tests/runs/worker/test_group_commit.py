"""Events written in groups: one transaction per batch, the same rows as one by one, the
engine waiting only where crash safety needs it, failures never lost."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext

from tests.runs.support import assert_seqs_gapless, execute, kinds, start
from tests.runs.worker.support import PARALLEL_TWICE, recording_run, rows, stored_events
from tools_app.engine import ChatRequest, ChatResponse, ScriptedChatModel
from tools_app.engine.events import (
    ModelRequestSent,
    ProviderAttempt,
    ProviderWireRequest,
    RoundStarted,
    ToolCallFinished,
    ToolCallProposed,
    ToolCallStarted,
)
from tools_app.engine.messages import ToolExecutionRequest
from tools_app.models import (
    ErrorPolicy,
    ModelEndpoint,
    Round,
    Run,
    RunEvent,
    RunStatus,
    ToolCall,
    ToolRegistration,
)
from tools_app.runs.store.lifecycle import Ending
from tools_app.runs.worker import recorder as recorder_module
from tools_app.runs.worker.recorder import RunRecorder

pytestmark = pytest.mark.both


@pytest.fixture
def endpoint(make_endpoint: Any) -> ModelEndpoint:
    return make_endpoint(PARALLEL_TWICE)  # type: ignore[no-any-return]


def test_a_batch_stores_the_same_rows_as_its_events_one_by_one(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    source = start(endpoint, [tools["lookup"], tools["nul_echo"]], policy)
    assert execute(source) == "succeeded"
    recorded = stored_events(source)
    assert {type(e).__name__ for e, _ in recorded} >= {
        "RoundStarted", "ProviderWireRequest", "ModelResponseReceived", "ToolCallProposed",
        "ToolCallStarted", "ToolCallFinished"}

    one_by_one, token = recording_run(endpoint, tools, policy)
    writer = RunRecorder(str(one_by_one.pk), token)
    for event, payload in recorded:
        writer.record(event, payload)

    together, token = recording_run(endpoint, tools, policy)
    RunRecorder(str(together.pk), token).record_batch(recorded)

    assert rows(together) == rows(one_by_one)
    assert rows(together)[0]
    assert len(rows(together)[1]) == 4
    assert rows(together)[2][:3] == (3, 4, 0)


def test_a_rounds_batch_takes_a_handful_of_statements_not_some_per_event(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    source = start(endpoint, [tools["lookup"], tools["nul_echo"]], policy)
    assert execute(source) == "succeeded"
    first_round = [(e, p) for e, p in stored_events(source) if e.round_index == 0]
    assert len(first_round) >= 10

    run, token = recording_run(endpoint, tools, policy)
    with CaptureQueriesContext(connection) as queries:
        RunRecorder(str(run.pk), token).record_batch(first_round)

    statements = [q["sql"] for q in queries.captured_queries
                  if not q["sql"].upper().startswith(("SAVEPOINT", "RELEASE", "BEGIN"))]
    # seq with the run's counters, events, round upsert, and the calls inserted with
    # their start and end (no update per call)
    assert len(statements) == 4, statements
    assert [c.state for c in ToolCall.objects.filter(run=run)] == ["succeeded", "succeeded"]


def test_a_round_asked_again_keeps_what_it_stored_but_its_start(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    """A run resumed before a round's response starts the round again: its row is
    reset as update_or_create did (status, start, attempts), the rest kept."""
    run, token = recording_run(endpoint, tools, policy)
    writer = RunRecorder(str(run.pk), token)
    writer.record(RoundStarted(round_index=0, at=1_000.0), {})
    Round.objects.filter(run=run).update(status="responded", ai_text="kept", attempts=[{"n": 1}])

    again = RunRecorder(str(run.pk), token)  # a new process knows no round pk
    again.record_batch([(RoundStarted(round_index=0, at=2_000.0), {}),
                        (ProviderAttempt(round_index=0, provider="openai", attempt=1,
                                         error="busy", retryable=True),
                         {"attempt": 1})])

    round_ = Round.objects.get(run=run)
    assert (round_.status, round_.ai_text, round_.attempts) == ("requested", "kept",
                                                                 [{"attempt": 1}])
    assert round_.started_at is not None
    assert round_.started_at.timestamp() == 2_000.0
    run.refresh_from_db()
    assert run.rounds_count == 1


def proposed_event(call_index: int, call_id: str) -> ToolCallProposed:
    return ToolCallProposed(round_index=0, call_index=call_index, known_tool=True,
                            request=ToolExecutionRequest(id=call_id, name="lookup",
                                                         arguments='{"key": "a"}'))


def started_event(call_id: str) -> ToolCallStarted:
    return ToolCallStarted(round_index=0, call_id=call_id, tool_name="lookup")


def finished_event(call_id: str) -> ToolCallFinished:
    return ToolCallFinished(round_index=0, call_id=call_id, tool_name="lookup",
                            outcome="succeeded", text="ok")


def test_a_call_stored_before_gets_the_changes_its_proposal_carried(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    """A run resumed mid-round proposes a stored call again: the INSERT leaves its row
    as it is, and the start and end the batch carried for it are written by UPDATE."""
    run, token = recording_run(endpoint, tools, policy)
    proposed = proposed_event(0, "c1")
    RunRecorder(str(run.pk), token).record_batch([
        (RoundStarted(round_index=0), {}), (proposed, {}), (started_event("c1"), {})])

    resumed = RunRecorder(str(run.pk), token)  # a new process: the call row exists
    resumed.record_batch([(proposed, {}), (started_event("c1"), {}), (finished_event("c1"), {
        "result_json": None, "error_details": None})])

    call = ToolCall.objects.get(run=run)
    assert (call.state, call.result_text, call.attempts) == ("succeeded", "ok", 2)
    assert ToolCall.objects.filter(run=run).count() == 1


# -- the writer task ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_engine_waits_for_a_calls_start_to_commit_and_not_for_the_rest(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run, token = recording_run(endpoint, tools, policy)
    notified: list[tuple[int, int]] = []  # (seq, events committed when notified)

    async def viewers(run_id: str, message: dict[str, Any]) -> None:
        committed = await sync_to_async(RunEvent.objects.filter(run=run).count)()
        notified.append((message["seq"], committed))

    monkeypatch.setattr(recorder_module, "notify", viewers)
    stored_when: dict[str, int] = {}

    async def scenario() -> None:
        writer = RunRecorder(str(run.pk), token)
        await writer(RoundStarted(round_index=0))
        # Queued, not yet written: the engine goes on at once.
        stored_when["round_started"] = await sync_to_async(RunEvent.objects.filter(
            run=run).count)()
        await writer(started_event("c1"))  # durable: committed when this returns
        stored_when["tool_call_started"] = await sync_to_async(RunEvent.objects.filter(
            run=run).count)()
        await writer(ToolCallFinished(round_index=0, call_id="c1", tool_name="lookup",
                                      outcome="succeeded", text="ok"))
        await writer.drain()

    async_to_sync(scenario)()

    assert stored_when == {"round_started": 0, "tool_call_started": 2}
    assert list(RunEvent.objects.filter(run=run).values_list("kind", flat=True)) == [
        "round_started", "tool_call_started", "tool_call_finished"]
    # Once per batch, with its last seq, after its commit.
    assert [seq for seq, _ in notified] == sorted({seq for seq, _ in notified})
    assert notified[-1][0] == 3
    assert all(committed >= seq for seq, committed in notified)
    assert_seqs_gapless(run)


def test_an_idempotent_tools_call_runs_without_waiting_for_its_start_to_commit(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The runner tells the recorder which tools are idempotent (the snapshot's flag):
    a call on one runs while its start is still being written (a crash may lose that
    start; the resumed run calls it again), a call on any other tool only once its start
    is committed."""
    import threading

    run, token = recording_run(endpoint, tools, policy)
    writer = RunRecorder(str(run.pk), token, idempotent_tools=frozenset({"lookup"}))
    entered = {"lookup": threading.Event(), "nul_echo": threading.Event()}
    ran_while_written: dict[str, bool] = {}
    real_batch = RunRecorder.record_batch

    def held(self: RunRecorder, batch: list[tuple[Any, dict[str, Any]]], **kwargs: Any) -> int:
        for event, _ in batch:
            if isinstance(event, ToolCallStarted):
                # Bounded: a tool that waits for this batch never enters.
                patience = 10 if event.tool_name == "lookup" else 0.3
                ran_while_written[event.tool_name] = entered[event.tool_name].wait(patience)
        return real_batch(self, batch, **kwargs)

    monkeypatch.setattr(RunRecorder, "record_batch", held)

    async def call(tool_name: str, call_id: str) -> None:
        await writer(ToolCallStarted(round_index=0, call_id=call_id, tool_name=tool_name))
        entered[tool_name].set()  # what the engine does next: run the tool
        await writer(ToolCallFinished(round_index=0, call_id=call_id, tool_name=tool_name,
                                      outcome="succeeded", text="ok"))

    async def scenario() -> None:
        await writer(RoundStarted(round_index=0))
        await call("lookup", "c1")
        await writer.drain()  # its start, written while the tool ran
        await call("nul_echo", "c2")
        await writer.drain()

    async_to_sync(scenario)()

    assert ran_while_written == {"lookup": True, "nul_echo": False}
    assert stored_kinds(run) == ["round_started", "tool_call_started", "tool_call_finished",
                                 "tool_call_started", "tool_call_finished"]
    assert_seqs_gapless(run)


@pytest.mark.django_db(transaction=True)
def test_a_runs_idempotent_calls_share_one_batch_a_round_with_what_the_model_is_told(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A whole run as a worker executes it: a round whose calls are all idempotent
    writes its response, its calls and their results with the next round's start and
    request, in one batch; a call on another tool still has its start committed
    before it runs, in a batch of its own."""
    run = start(make_endpoint([
        {"tool_calls": [{"name": "lookup", "arguments": {"key": "a"}},
                        {"name": "lookup", "arguments": {"key": "b"}}]},
        {"tool_calls": [{"name": "transfer", "arguments": {"to": "bob"}}]},
        {"text": "done"},
    ]), [tools["lookup"], tools["transfer"]], policy)
    batches: list[list[str]] = []
    real_batch = RunRecorder.record_batch

    def spied(self: RunRecorder, batch: list[tuple[Any, dict[str, Any]]], **kwargs: Any) -> int:
        batches.append([event.kind for event, _ in batch])
        return real_batch(self, batch, **kwargs)

    monkeypatch.setattr(RunRecorder, "record_batch", spied)
    # Batches start only where the engine waits or at a request, however slow the
    # machine (a linger could otherwise split a round).
    monkeypatch.setattr(recorder_module, "LINGER_SECONDS", 60.0)
    recorders: list[RunRecorder] = []
    real_init = RunRecorder.__init__

    def kept(self: RunRecorder, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        recorders.append(self)

    monkeypatch.setattr(RunRecorder, "__init__", kept)
    answer = ScriptedChatModel.chat

    async def answered_later(self: ScriptedChatModel, request: ChatRequest) -> ChatResponse:
        # A model over HTTP answers after its request's batch is stored (it takes longer
        # than a commit); the scripted one would answer at once.
        await recorders[-1].drain()
        return await answer(self, request)

    monkeypatch.setattr(ScriptedChatModel, "chat", answered_later)

    assert execute(run) == "succeeded"
    lookups = ["model_response_received", "tool_call_proposed", "tool_call_proposed",
               "tool_call_started", "tool_call_finished", "tool_call_started",
               "tool_call_finished", "round_started", "model_request_sent"]
    assert batches[:4] == [
        ["chat_started", "round_started", "model_request_sent"],
        lookups,  # nothing waited for the lookups' starts
        ["model_response_received", "tool_call_proposed", "tool_call_started"],  # transfer
        ["tool_call_finished", "round_started", "model_request_sent"],
    ]
    assert [c.state for c in calls_of(run)] == ["succeeded", "succeeded", "succeeded"]
    assert_seqs_gapless(run)


@pytest.mark.django_db(transaction=True)
def test_a_succeeded_runs_last_events_are_written_with_its_end(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The chat's last events (the final answer) are not committed on their own before
    the run's end: they are the batch that carries the end (one commit fewer a run),
    which closes what the run left in flight after them."""
    run = start(make_endpoint([
        {"tool_calls": [{"name": "lookup", "arguments": {"key": "a"}}]},
        {"text": "done"},
    ]), [tools["lookup"]], policy)
    batches: list[tuple[list[str], Ending | None]] = []  # kinds, the end they carry
    real_batch = RunRecorder.record_batch

    def spied(self: RunRecorder, batch: list[tuple[Any, dict[str, Any]]],
              **kwargs: Any) -> int:
        batches.append(([event.kind for event, _ in batch], kwargs.get("end")))
        return real_batch(self, batch, **kwargs)

    monkeypatch.setattr(RunRecorder, "record_batch", spied)

    assert execute(run) == "succeeded"
    *before, (last_kinds, end) = batches
    assert last_kinds[-2:] == ["model_response_received", "chat_finished"]
    assert end is not None
    assert end.status == RunStatus.SUCCEEDED
    assert all(end is None for _, end in before)  # every other batch on its own
    assert kinds(run)[-3:] == ["model_response_received", "chat_finished", "run_status"]
    assert Round.objects.get(run=run, index=1).status == "responded"
    assert RunEvent.objects.get(run=run, seq=run.last_seq).payload["round_index"] == 1
    assert_seqs_gapless(run)


def calls_of(run: Run) -> list[ToolCall]:
    return list(ToolCall.objects.filter(run=run).order_by("round__index", "call_index"))


@pytest.mark.django_db(transaction=True)
def test_a_failed_batch_nobody_waited_for_stops_the_engine_and_nothing_after_it_is_stored(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run, token = recording_run(endpoint, tools, policy)
    real_batch = RunRecorder.record_batch
    failing = {"left": 1}

    def flaky(self: RunRecorder, batch: list[tuple[Any, dict[str, Any]]], **kwargs: Any) -> int:
        if failing["left"]:
            failing["left"] -= 1
            raise OperationalError("server closed the connection unexpectedly")
        return real_batch(self, batch, **kwargs)

    monkeypatch.setattr(RunRecorder, "record_batch", flaky)
    seen: list[str] = []

    async def scenario() -> None:
        writer = RunRecorder(str(run.pk), token)
        await writer(RoundStarted(round_index=0))
        await writer._written()  # its batch is written (and fails) meanwhile
        with pytest.raises(OperationalError):
            await writer(started_event("c1"))
        seen.append("raised at the next event")
        # The database is back, but a later batch would leave a hole in the log.
        with pytest.raises(OperationalError):
            await writer(started_event("c1"))
        seen.append("raised again")
        with pytest.raises(OperationalError):
            await writer.drain()

    async_to_sync(scenario)()

    assert seen == ["raised at the next event", "raised again"]
    assert failing["left"] == 0
    assert not RunEvent.objects.filter(run=run).exists()


@pytest.mark.django_db(transaction=True)
def test_a_durable_event_whose_batch_fails_raises_where_the_engine_waits(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run, token = recording_run(endpoint, tools, policy)

    def down(self: RunRecorder, batch: list[tuple[Any, dict[str, Any]]], **kwargs: Any) -> int:
        raise OperationalError("the database is down")

    monkeypatch.setattr(RunRecorder, "record_batch", down)

    async def scenario() -> None:
        writer = RunRecorder(str(run.pk), token)
        with pytest.raises(OperationalError, match="down"):
            await writer(started_event("c1"))
        with pytest.raises(OperationalError, match="down"):
            await writer.drain()  # the run's end reads its rows: it must know

    async_to_sync(scenario)()
    assert not RunEvent.objects.filter(run=run).exists()


def viewer_messages(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What the recorder tells live viewers, in order."""
    messages: list[dict[str, Any]] = []

    async def viewers(run_id: str, message: dict[str, Any]) -> None:
        messages.append(message)

    monkeypatch.setattr(recorder_module, "notify", viewers)
    return messages


@pytest.mark.django_db(transaction=True)
def test_no_streamed_piece_of_a_round_whose_request_batch_failed_reaches_viewers(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tools_app.engine.events import PartialText

    run, token = recording_run(endpoint, tools, policy)
    messages = viewer_messages(monkeypatch)

    def down(self: RunRecorder, batch: list[tuple[Any, dict[str, Any]]], **kwargs: Any) -> int:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(RunRecorder, "record_batch", down)

    async def scenario() -> None:
        writer = RunRecorder(str(run.pk), token)
        await writer(RoundStarted(round_index=0))
        await writer(ModelRequestSent(round_index=0, message_count=1, tool_names=[]))
        with pytest.raises(OperationalError):
            await writer(PartialText(round_index=0, delta="Hel"))

    async_to_sync(scenario)()
    assert messages == []


@pytest.mark.django_db(transaction=True)
def test_a_cancelled_writer_stops_the_run_and_writes_nothing_more(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whether the batch in flight committed is unknown once its writer is cancelled
    (its loop closing): the run stops at its next event, and nothing more is queued."""
    import threading

    run, token = recording_run(endpoint, tools, policy)
    entered, release = threading.Event(), threading.Event()
    real_batch = RunRecorder.record_batch

    def held(self: RunRecorder, batch: list[tuple[Any, dict[str, Any]]], **kwargs: Any) -> int:
        entered.set()
        assert release.wait(10), "the test never released the batch"
        return real_batch(self, batch, **kwargs)

    monkeypatch.setattr(RunRecorder, "record_batch", held)
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        writer = RunRecorder(str(run.pk), token)
        await writer(RoundStarted(round_index=0))
        await writer(ModelRequestSent(round_index=0, message_count=1, tool_names=[]))
        for _ in range(500):  # bounded: 5 s
            if entered.is_set():
                break
            await asyncio.sleep(0.01)
        assert writer._writer is not None
        writer._writer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await writer._writer
        release.set()
        with pytest.raises(RuntimeError, match="writer was cancelled"):
            await writer(started_event("c1"))
        with pytest.raises(RuntimeError, match="writer was cancelled"):
            await writer.drain()
        seen["queued"] = list(writer._queue)

    try:
        async_to_sync(scenario)()
    finally:
        release.set()

    assert seen["queued"] == []
    assert "tool_call_started" not in stored_kinds(run)


@pytest.mark.django_db(transaction=True)
def test_a_streamed_piece_reaches_viewers_after_the_stored_events_before_it(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tools_app.engine.events import PartialText

    run, token = recording_run(endpoint, tools, policy)
    messages = viewer_messages(monkeypatch)

    async def scenario() -> None:
        writer = RunRecorder(str(run.pk), token)
        await writer(RoundStarted(round_index=0))
        await writer(PartialText(round_index=0, delta="Hel"))
        await writer.drain()

    async_to_sync(scenario)()
    assert [next(iter(m)) for m in messages] == ["seq", "fragment"]


@pytest.mark.django_db(transaction=True)
def test_a_batch_reads_the_runs_cancellation_so_the_heartbeat_need_not_ask(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tools_app.runs.worker import runner
    from tools_app.runs.worker.runner import _cancelled

    asked: list[str] = []
    real_ask = runner.cancel_requested

    def ask(run_id: str) -> bool:
        asked.append(run_id)
        return real_ask(run_id)

    monkeypatch.setattr(runner, "cancel_requested", ask)

    run, token = recording_run(endpoint, tools, policy)
    writer = RunRecorder(str(run.pk), token)
    writer.record(RoundStarted(round_index=0), {})
    assert writer.cancel_seen is not None
    assert writer.cancel_seen[1] is False

    Run.objects.filter(pk=run.pk).update(cancel_requested=True)
    # Fresh: the last batch's answer (it predates the request), not asked.
    assert async_to_sync(_cancelled)(str(run.pk), writer, 60.0) is False
    assert asked == []
    writer.record(started_event("c1"), {})
    assert writer.cancel_seen[1] is True  # read by the batch's own UPDATE
    assert async_to_sync(_cancelled)(str(run.pk), writer, 60.0) is True
    assert asked == []
    # A run that has not written lately: asked of the database.
    assert async_to_sync(_cancelled)(str(run.pk), writer, 0.0) is True
    assert asked == [str(run.pk)]


def stored_kinds(run: Run) -> list[str]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("kind",
                                                                          flat=True))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("announced", [True, False], ids=["http-model", "scripted-model"])
def test_a_rounds_results_start_and_request_share_one_batch_written_while_the_model_answers(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    monkeypatch: pytest.MonkeyPatch, announced: bool,
) -> None:
    """Two batches a round: the calls' starts (with the response), then the results
    with the next round's start and request. That batch starts at the request (the
    announced HTTP request, or ModelRequestSent for a model that announces none), and
    the model is asked without waiting for its commit."""
    import threading

    run, token = recording_run(endpoint, tools, policy)
    batches: list[list[str]] = []
    entered, release = threading.Event(), threading.Event()
    real_batch = RunRecorder.record_batch

    def held(self: RunRecorder, batch: list[tuple[Any, dict[str, Any]]], **kwargs: Any) -> int:
        batches.append([event.kind for event, _ in batch])
        if any(event.kind == "tool_call_finished" for event, _ in batch):
            entered.set()
            assert release.wait(10), "the test never released the batch"
        return real_batch(self, batch, **kwargs)

    monkeypatch.setattr(RunRecorder, "record_batch", held)
    monkeypatch.setattr(recorder_module, "LINGER_SECONDS", 60.0)  # never, in this test
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        writer = RunRecorder(str(run.pk), token, requests_announced=announced)
        await writer(started_event("c1"))
        await writer(finished_event("c1"))
        await writer(RoundStarted(round_index=1))
        await writer(ModelRequestSent(round_index=1, message_count=3, tool_names=["lookup"]))
        if announced:
            seen["written at ModelRequestSent"] = entered.is_set()
            await writer(ProviderWireRequest(round_index=1, provider="openai",
                                             url="http://127.0.0.1/v1", body={}))
        # The request returned: its batch is in flight (started, held), not committed.
        seen["asked while its batch is written"] = (writer._writer is not None
                                                    and not writer._writer.done())
        for _ in range(500):  # bounded: 5 s
            if entered.is_set():
                break
            await asyncio.sleep(0.01)
        seen["batch started"] = entered.is_set()
        release.set()
        await writer.drain()

    try:
        async_to_sync(scenario)()
    finally:
        release.set()

    committed = ["tool_call_finished", "round_started", "model_request_sent"]
    if announced:
        assert seen["written at ModelRequestSent"] is False
        committed.append("provider_wire_request")
    assert seen["asked while its batch is written"] is True
    assert seen["batch started"] is True
    assert batches == [["tool_call_started"], committed]
    assert stored_kinds(run) == ["tool_call_started", *committed]


@pytest.mark.django_db(transaction=True)
def test_an_event_nobody_waits_for_is_committed_after_a_short_linger(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    """A call that finished while its sibling still runs is stored (and shown) without
    waiting for the round's end."""
    run, token = recording_run(endpoint, tools, policy)
    seen: list[list[str]] = []

    async def scenario() -> None:
        writer = RunRecorder(str(run.pk), token)
        await writer(started_event("c1"))
        await writer(finished_event("c1"))
        seen.append(await sync_to_async(stored_kinds)(run))
        for _ in range(500):  # bounded: 5 s for a 100 ms linger
            await asyncio.sleep(0.01)
            if len(await sync_to_async(stored_kinds)(run)) == 2:
                break
        seen.append(await sync_to_async(stored_kinds)(run))

    async_to_sync(scenario)()

    assert seen == [["tool_call_started"], ["tool_call_started", "tool_call_finished"]]


@pytest.mark.django_db(transaction=True)
def test_a_request_queued_behind_a_busy_writer_is_written_next_without_a_linger(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The next request arrives while the previous request's batch is still being
    written: once that batch commits, the new one is written at once (it would
    otherwise linger, here a minute, for what follows)."""
    import threading

    run, token = recording_run(endpoint, tools, policy)
    entered, release = threading.Event(), threading.Event()
    real_batch = RunRecorder.record_batch
    batches: list[list[str]] = []

    def held(self: RunRecorder, batch: list[tuple[Any, dict[str, Any]]], **kwargs: Any) -> int:
        batches.append([event.kind for event, _ in batch])
        if len(batches) == 1:
            entered.set()
            assert release.wait(10), "the test never released the batch"
        return real_batch(self, batch, **kwargs)

    monkeypatch.setattr(RunRecorder, "record_batch", held)
    monkeypatch.setattr(recorder_module, "LINGER_SECONDS", 60.0)
    seen: dict[str, Any] = {}

    def request(index: int) -> ModelRequestSent:
        return ModelRequestSent(round_index=index, message_count=1, tool_names=["lookup"])

    async def scenario() -> None:
        writer = RunRecorder(str(run.pk), token)
        await writer(RoundStarted(round_index=0))
        await writer(request(0))  # its batch starts, and is held
        for _ in range(500):  # bounded: 5 s
            if entered.is_set():
                break
            await asyncio.sleep(0.01)
        await writer(RoundStarted(round_index=1))
        await writer(request(1))  # queued behind the busy writer
        release.set()
        for _ in range(500):  # bounded: 5 s, a twelfth of the linger
            if len(await sync_to_async(stored_kinds)(run)) == 4:
                break
            await asyncio.sleep(0.01)
        seen["stored"] = await sync_to_async(stored_kinds)(run)

    try:
        async_to_sync(scenario)()
    finally:
        release.set()

    assert seen["stored"] == ["round_started", "model_request_sent"] * 2
    assert batches == [["round_started", "model_request_sent"]] * 2


@pytest.mark.django_db(transaction=True)
def test_when_the_results_batch_fails_the_calls_queued_behind_it_never_run(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The model answered while its request's batch was written, and that batch fails:
    the next round's call, queued behind it, gets the failure where it waits for its
    start (so its tool never runs), and neither is stored."""
    import threading

    run, token = recording_run(endpoint, tools, policy)
    entered, release = threading.Event(), threading.Event()
    real_batch = RunRecorder.record_batch

    def failing(self: RunRecorder, batch: list[tuple[Any, dict[str, Any]]], **kwargs: Any) -> int:
        if any(event.kind == "tool_call_finished" for event, _ in batch):
            entered.set()
            assert release.wait(10), "the test never released the batch"
            raise OperationalError("server closed the connection unexpectedly")
        return real_batch(self, batch, **kwargs)

    monkeypatch.setattr(RunRecorder, "record_batch", failing)
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        writer = RunRecorder(str(run.pk), token)
        await writer(started_event("c1"))
        await writer(finished_event("c1"))
        await writer(RoundStarted(round_index=1))
        await writer(ModelRequestSent(round_index=1, message_count=3, tool_names=["lookup"]))
        for _ in range(500):  # bounded: 5 s
            if entered.is_set():
                break
            await asyncio.sleep(0.01)
        next_call = asyncio.ensure_future(writer(started_event("c2")))
        await asyncio.sleep(0.05)
        seen["next call waiting"] = not next_call.done()
        release.set()
        with pytest.raises(OperationalError):
            await next_call

    try:
        async_to_sync(scenario)()
    finally:
        release.set()

    assert seen["next call waiting"] is True
    assert stored_kinds(run) == ["tool_call_started"]


def test_two_calls_with_one_id_in_a_batch_are_both_stored(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    """A provider that repeats a call id (nothing dedupes Anthropic's): both rows get
    the changes the batch carried for that id, as one UPDATE matching both did."""
    run, token = recording_run(endpoint, tools, policy)
    proposals = [proposed_event(index, "same") for index in (0, 1)]
    RunRecorder(str(run.pk), token).record_batch([
        (RoundStarted(round_index=0), {}), *((p, {}) for p in proposals),
        (started_event("same"), {}), (started_event("same"), {}),
        (finished_event("same"), {"result_json": None, "error_details": None})])

    stored = ToolCall.objects.filter(run=run).order_by("call_index")
    assert [(c.call_index, c.state, c.attempts) for c in stored] == [
        (0, "succeeded", 2), (1, "succeeded", 2)]


def test_a_batch_after_the_runs_end_is_refused_not_stored(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    """The worker's own end does not change the token: the status fences a batch
    still in flight then, so nothing is stored after the run's last event."""
    from tools_app.runs.store.eventlog import LeaseLost
    from tools_app.runs.worker import runner

    run, token = recording_run(endpoint, tools, policy)
    writer = RunRecorder(str(run.pk), token)
    writer.record(RoundStarted(round_index=0), {})
    runner._finish(str(run.pk), token, RunStatus.CANCELLED, {"error_type": "Cancelled"})
    last = stored_kinds(run)

    with pytest.raises(LeaseLost):
        writer.record(started_event("c1"), {})

    assert stored_kinds(run) == last
    assert last[-1] == "run_status"


@pytest.mark.django_db(transaction=True)
def test_settling_commits_what_lingers_and_logs_a_failure_instead_of_raising(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    run, token = recording_run(endpoint, tools, policy)
    monkeypatch.setattr(recorder_module, "LINGER_SECONDS", 60.0)
    seen: list[list[str]] = []

    async def scenario() -> None:
        writer = RunRecorder(str(run.pk), token)
        await writer(started_event("c1"))
        await writer(finished_event("c1"))  # lingers (a minute, here)
        seen.append(await sync_to_async(stored_kinds)(run))
        await writer.settle()
        seen.append(await sync_to_async(stored_kinds)(run))
        await sync_to_async(Run.objects.filter(pk=run.pk).update)(status=RunStatus.CANCELLED)
        await writer(finished_event("c2"))
        await writer.settle()  # refused (the run ended): logged, not raised

    async_to_sync(scenario)()

    assert seen == [["tool_call_started"],
                    ["tool_call_started", "tool_call_finished"]]
    assert "could not be stored" in caplog.text
    assert stored_kinds(run) == seen[-1]


def test_a_batch_too_big_for_one_statement_is_written_in_several(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both databases cap a statement's parameters (a round of thousands of calls would
    pass them): an INSERT is split, here at 60 parameters (two calls, twelve events)."""
    from tools_app.runs.store.sql import rowsql

    monkeypatch.setattr(rowsql, "MAX_PARAMETERS", 60)
    run, token = recording_run(endpoint, tools, policy)
    proposals = [proposed_event(index, f"c{index}") for index in range(5)]
    batch = [(RoundStarted(round_index=0), {}), *((p, {}) for p in proposals),
             *((started_event(f"c{index}"), {}) for index in range(5))]
    with CaptureQueriesContext(connection) as queries:
        RunRecorder(str(run.pk), token).record_batch(batch)

    inserts = [q["sql"] for q in queries.captured_queries
               if q["sql"].startswith('INSERT INTO "tools_app_toolcall"')]
    assert len(inserts) == 3
    stored = ToolCall.objects.filter(run=run).order_by("call_index")
    assert [(c.call_id, c.state, c.attempts) for c in stored] == [
        (f"c{index}", "started", 1) for index in range(5)]
    assert stored_kinds(run) == [event.kind for event, _ in batch]
    assert_seqs_gapless(run)
