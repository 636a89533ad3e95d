"""The process-wide event writer (runs.writer): group commit keeps the recorder's contract.

With the writer started, as daphne's embedded worker and `db_worker` start it, a run's
events are committed in batches shared with other runs, and the engine waits only for
the durable kinds. These tests drive runs and batches with it: the same rows and events
as when each run writes alone, a call's start stored before its tool runs, the crash
and resume rules of test_crash_resume, a lost lease or a bad item failing only its run.
(Transactional: the writer writes from a thread and connection of its own.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tools_app.engine.events import ChatStarted, RoundStarted
from tools_app.models import ErrorPolicy, Round, RunEvent, RunStatus, ToolCall, ToolRegistration
from tools_app.runs.eventlog import LeaseLost
from tools_app.runs.recorder import RunRecorder
from tools_app.runs.writer import (
    EventWriter,
    Item,
    current_writer,
    start_event_writer,
    stop_event_writer,
    write_batch,
)

from .support import ModelSpy, assert_seqs_gapless, calls, execute, kinds, start, statuses
from .test_crash_resume import crash_in_round_1, reap
from .tools_for_tests import STATE

pytestmark = [pytest.mark.both, pytest.mark.django_db(transaction=True)]

PARALLEL = [
    {"tool_calls": [{"name": "lookup", "arguments": {"key": "a"}},
                    {"name": "transfer", "arguments": {"to": "bob"}}]},
    {"text": "model saw: {last_results}"},
]


@pytest.fixture
def event_writer() -> Iterator[EventWriter]:
    writer = start_event_writer()
    try:
        yield writer
    finally:
        stop_event_writer(timeout=10)


def _event_shape(run_pk: Any) -> list[tuple[str, str | None]]:
    """Each event's kind and tool, in seq order: what must not depend on the writer."""
    return [(e.kind, e.payload.get("tool_name") or e.payload.get("request", {}).get("name"))
            for e in RunEvent.objects.filter(run_id=run_pk).order_by("seq")]


def test_a_run_records_the_same_events_and_rows_through_the_writer(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    endpoint = make_endpoint(PARALLEL)
    policy.parallel = False  # a deterministic order of the calls' events
    policy.save()
    inline = start(endpoint, [tools["lookup"], tools["transfer"]], policy)
    assert execute(inline) == "succeeded"

    writer = start_event_writer()
    try:
        grouped = start(endpoint, [tools["lookup"], tools["transfer"]], policy)
        assert execute(grouped) == "succeeded"
        assert writer.drain(timeout=10)
    finally:
        stop_event_writer(timeout=10)

    assert current_writer() is None
    assert _event_shape(grouped.pk) == _event_shape(inline.pk)
    assert_seqs_gapless(grouped)
    assert [(c.tool_name, c.state, c.result_text) for c in calls(grouped)] == \
        [(c.tool_name, c.state, c.result_text) for c in calls(inline)]
    assert grouped.final_text == inline.final_text
    assert (grouped.tool_calls_count, grouped.rounds_count) == (2, 2)


def test_a_calls_start_is_stored_before_its_tool_runs(
    event_writer: EventWriter, make_endpoint: Any, tools: dict[str, ToolRegistration],
    policy: ErrorPolicy,
) -> None:
    seen: list[tuple[str, str]] = []

    async def read_own_call() -> None:
        # Read on a connection of its own, as a new worker would after a crash here.
        def state() -> tuple[str, str]:
            from django.db import connection

            try:
                call = ToolCall.objects.get(tool_name="transfer")
                return call.state, Round.objects.get(pk=call.round_id).status
            finally:
                connection.close()

        seen.append(await asyncio.to_thread(state))

    STATE.on_enter["transfer"].append(read_own_call)
    run = start(make_endpoint(PARALLEL), [tools["lookup"], tools["transfer"]], policy)

    assert execute(run) == "succeeded"

    assert seen == [("started", "responded")]


def test_an_in_flight_non_idempotent_call_becomes_unknown_outcome(
    event_writer: EventWriter, make_endpoint: Any, tools: dict[str, ToolRegistration],
    policy: ErrorPolicy, model_spy: ModelSpy,
) -> None:
    run = crash_in_round_1(make_endpoint, tools, policy, model_spy)
    assert event_writer.drain(timeout=10)
    reap(run)

    assert execute(run) == "succeeded"

    assert STATE.count("transfer") == 1  # never executed again
    assert STATE.count("lookup", "r1") == 1  # a completed call is replayed, not re-run
    assert [c.state for c in calls(run)] == ["succeeded", "succeeded", "unknown_outcome"]
    assert event_writer.drain(timeout=10)
    assert_seqs_gapless(run)
    assert statuses(run) == ["queued", "interrupted", "succeeded"]
    assert kinds(run).count("chat_started") == 2


def _recorder_of(run: Any, token: int) -> RunRecorder:
    return RunRecorder(str(run.pk), token)


def _item(recorder: RunRecorder, event: Any, loop: asyncio.AbstractEventLoop) -> Item:
    return Item(recorder, event, event.model_dump(mode="json"), loop)


def _running(endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> Any:
    run = start(endpoint, [tools["lookup"]], policy)
    type(run).objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, lease_token=7)
    return run


def test_a_lost_lease_fails_only_its_own_runs_items(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    endpoint = make_endpoint(PARALLEL)
    kept, fenced = (_running(endpoint, tools, policy) for _ in range(2))
    ours, stale = _recorder_of(kept, 7), _recorder_of(fenced, 6)  # 6: an older token
    loop = asyncio.new_event_loop()
    try:
        batch = [_item(ours, ChatStarted(tool_names=[], message_count=1), loop),
                 _item(stale, ChatStarted(tool_names=[], message_count=1), loop),
                 _item(ours, RoundStarted(round_index=0), loop),
                 _item(stale, RoundStarted(round_index=0), loop)]
        write_batch(batch)
    finally:
        loop.close()

    assert [i.future.result() for i in batch[::2]] == [2, 3]  # after the "queued" event
    for item in batch[1::2]:
        with pytest.raises(LeaseLost):
            item.future.result()
    assert isinstance(stale.failure, LeaseLost)
    assert kinds(kept) == ["run_status", "chat_started", "round_started"]
    assert kinds(fenced) == ["run_status"]  # nothing of the fenced worker's
    assert not Round.objects.filter(run=fenced).exists()


class _Broken(RunRecorder):
    def write(self, event: Any, payload: dict[str, Any]) -> int:
        if event.kind == "round_started":
            raise ValueError("a value the database refuses")
        return super().write(event, payload)


def test_a_failing_item_fails_its_run_and_not_the_batch(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    endpoint = make_endpoint(PARALLEL)
    good_run, bad_run = (_running(endpoint, tools, policy) for _ in range(2))
    good, bad = _recorder_of(good_run, 7), _Broken(str(bad_run.pk), 7)
    loop = asyncio.new_event_loop()
    try:
        batch = [_item(bad, ChatStarted(tool_names=[], message_count=1), loop),
                 _item(good, RoundStarted(round_index=0), loop),
                 _item(bad, RoundStarted(round_index=0), loop),
                 _item(bad, RoundStarted(round_index=1), loop)]
        write_batch(batch)
    finally:
        loop.close()

    assert batch[0].future.result() == 2  # written before the failure, in its own commit
    assert batch[1].future.result() == 2
    for item in batch[2:]:  # the failure, then the run's later event, never written
        with pytest.raises(ValueError, match="refuses"):
            item.future.result()
    assert kinds(good_run) == ["run_status", "round_started"]
    assert kinds(bad_run) == ["run_status", "chat_started"]
