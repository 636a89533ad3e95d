"""Several runs' batches written as one group (runs.worker.batch_writer): the same rows as each
run alone, in the statements of one batch, and every run its own outcome when something
fails: a lost lease, a failing statement, a failing COMMIT."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import DEFAULT_DB_ALIAS, IntegrityError, OperationalError, connection, connections
from django.test.utils import CaptureQueriesContext

from tests.runs.support import assert_seqs_gapless, execute, start
from tests.runs.worker.support import PARALLEL_TWICE, recording_run, rows, stored_events
from tools_app.engine.events import RoundStarted
from tools_app.models import (
    ErrorPolicy,
    ModelEndpoint,
    Run,
    RunEvent,
    RunStatus,
    ToolCall,
    ToolRegistration,
)
from tools_app.runs.store import db
from tools_app.runs.store.eventlog import LeaseLost
from tools_app.runs.store.lifecycle import Ending
from tools_app.runs.worker import batch_writer
from tools_app.runs.worker.batch_writer import Batch, write_group
from tools_app.runs.worker.recorder import RunRecorder

pytestmark = pytest.mark.both


@pytest.fixture
def endpoint(make_endpoint: Any) -> ModelEndpoint:
    return make_endpoint(PARALLEL_TWICE)  # type: ignore[no-any-return]


@pytest.fixture
def recorded(endpoint: ModelEndpoint, tools: dict[str, ToolRegistration],
             policy: ErrorPolicy) -> list[tuple[Any, dict[str, Any]]]:
    """A whole run's events (two rounds of two calls, then an answer), as stored."""
    source = start(endpoint, [tools["lookup"], tools["nul_echo"]], policy)
    assert execute(source) == "succeeded"
    return stored_events(source)


def recorders(endpoint: ModelEndpoint, tools: dict[str, ToolRegistration],
              policy: ErrorPolicy, count: int) -> list[tuple[Run, RunRecorder]]:
    made = []
    for _ in range(count):
        run, token = recording_run(endpoint, tools, policy)
        made.append((run, RunRecorder(str(run.pk), token)))
    return made


def halves(recorded: list[tuple[Any, dict[str, Any]]]) -> tuple[list[Any], list[Any]]:
    """The events up to round 1's start, and the rest: a run's second batch changes
    rows its first stored (a round's response, its calls' ends)."""
    cut = next(i for i, (event, _) in enumerate(recorded)
               if isinstance(event, RoundStarted) and event.round_index == 1)
    return recorded[:cut], recorded[cut:]


def test_a_group_stores_for_each_run_the_rows_it_would_store_alone(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    recorded: list[tuple[Any, dict[str, Any]]],
) -> None:
    first, rest = halves(recorded)
    (alone_run, alone), *grouped = recorders(endpoint, tools, policy, 4)
    alone.record_batch(first)
    alone.record_batch(rest)

    # Batches of the runs at different points: one group holds first and second batches.
    assert write_group([Batch(grouped[0][1], first), Batch(grouped[1][1], first)]) == [
        len(first), len(first)]
    assert write_group([Batch(grouped[0][1], rest), Batch(grouped[1][1], rest),
                        Batch(grouped[2][1], recorded)]) == [len(recorded)] * 3

    expected = rows(alone_run)
    assert len(expected[1]) == 4  # the calls, all finished
    for run, _ in grouped:
        assert rows(run) == expected
        assert_seqs_gapless(run)


def test_a_group_of_runs_takes_the_statements_of_one_run(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    recorded: list[tuple[Any, dict[str, Any]]],
) -> None:
    first, rest = halves(recorded)
    made = recorders(endpoint, tools, policy, 6)
    write_group([Batch(recorder, first) for _, recorder in made])

    def statements(group: list[tuple[Run, RunRecorder]]) -> list[str]:
        with CaptureQueriesContext(connection) as queries:
            outcomes = write_group([Batch(recorder, rest) for _, recorder in group])
        assert all(isinstance(seq, int) for seq in outcomes), outcomes
        return [q["sql"] for q in queries.captured_queries
                if not q["sql"].upper().startswith(("SAVEPOINT", "RELEASE", "BEGIN"))]

    one = statements(made[:1])
    # The seqs with the counters, the events, the new rounds' upsert, the calls
    # inserted with their ends: the same few statements for five runs as for one.
    assert len(statements(made[1:])) == len(one) == 4, one


def test_a_run_that_lost_its_lease_fails_alone_and_the_rest_of_its_group_is_stored(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    recorded: list[tuple[Any, dict[str, Any]]],
) -> None:
    (kept_run, kept), (lost_run, lost), (other_run, other) = recorders(
        endpoint, tools, policy, 3)
    Run.objects.filter(pk=lost_run.pk).update(lease_token=lost.token + 1)  # reclaimed

    outcomes = write_group([Batch(kept, recorded), Batch(lost, recorded),
                            Batch(other, recorded)])

    assert outcomes[0] == outcomes[2] == len(recorded)
    assert isinstance(outcomes[1], LeaseLost)
    assert not RunEvent.objects.filter(run=lost_run).exists()
    assert not lost_run.rounds.exists()
    assert rows(kept_run) == rows(other_run)
    assert len(rows(kept_run)[3]) == len(recorded)


def test_a_statement_failing_for_one_run_fails_that_run_alone(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    recorded: list[tuple[Any, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    (kept_run, kept), (broken_run, broken) = recorders(endpoint, tools, policy, 2)
    # An event row where the run's next seq goes: its INSERT clashes (a log written
    # behind the recorder's back), and with it the group's.
    RunEvent.objects.create(run=broken_run, seq=1, kind="stray", payload={})
    alone: list[str] = []
    real = RunRecorder.record_batch

    def spied(self: RunRecorder, batch: Any, **kwargs: Any) -> int:
        alone.append(self.run_id)
        return real(self, batch, **kwargs)

    monkeypatch.setattr(RunRecorder, "record_batch", spied)

    outcomes = write_group([Batch(kept, recorded), Batch(broken, recorded)])

    assert outcomes[0] == len(recorded)
    assert isinstance(outcomes[1], IntegrityError)
    assert alone == [str(kept_run.pk), str(broken_run.pk)]  # written again one by one
    assert list(RunEvent.objects.filter(run=broken_run).values_list("kind", flat=True)) == [
        "stray"]
    assert not broken_run.rounds.exists()
    broken_run.refresh_from_db()
    assert broken_run.last_seq == 0
    assert len(rows(kept_run)[3]) == len(recorded)


def ending(status: RunStatus = RunStatus.SUCCEEDED, **fields: Any) -> Ending:
    return Ending(status, {"final_text": "done", "wall_ms": 12.5, **fields})


def ended(run: Run) -> tuple[Any, ...]:
    """What a run's end changed in its own row."""
    run.refresh_from_db()
    return (run.status, run.lease_owner, run.lease_expires_at, run.final_text, run.wall_ms,
            run.finished_at is not None)


def test_runs_ending_in_a_group_store_what_each_would_store_ending_alone(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    recorded: list[tuple[Any, dict[str, Any]]],
) -> None:
    """A run's end goes with its last batch: its run_status event after the batch's
    events (the run's last round named), the move out of running in the same fenced
    statement as the batch's seqs. In a group, with runs that go on, each run stores
    what it would alone, and the group costs the statements of one ending run."""
    first, rest = halves(recorded)
    (alone_run, alone), *grouped = recorders(endpoint, tools, policy, 6)
    going_on_run, going_on = grouped.pop()
    alone.record_batch(first)
    alone.record_batch(rest, end=ending())
    write_group([Batch(recorder, first) for _, recorder in grouped])

    def statements(group: list[tuple[Run, RunRecorder]]) -> list[str]:
        with CaptureQueriesContext(connection) as queries:
            outcomes = write_group([Batch(recorder, rest, ending()) for _, recorder in group]
                                   + [Batch(going_on, first)] * (len(group) > 1))
        assert outcomes[:len(group)] == [len(recorded) + 1] * len(group), outcomes
        return [q["sql"] for q in queries.captured_queries
                if not q["sql"].upper().startswith(("SAVEPOINT", "RELEASE", "BEGIN"))]

    one = statements(grouped[:1])
    many = statements(grouped[1:])
    # The ending runs' UPDATE (their seqs and their end), the still-running run's, the
    # events, the rounds, the calls, the runs' last rounds, what they left in flight.
    assert len(many) == len(one) + 1, many

    expected = rows(alone_run)
    assert expected[3][-1][1:] == ("run_status", {
        "status": "succeeded", "final_text": "done", "wall_ms": 12.5, "round_index": 2})
    for run, _ in grouped:
        assert rows(run) == expected
        assert ended(run) == ended(alone_run) == (
            RunStatus.SUCCEEDED, "", None, "done", 12.5, True)
        assert_seqs_gapless(run)
    assert ended(going_on_run)[0] == RunStatus.RUNNING
    assert rows(going_on_run)[3][-1][1] != "run_status"


def test_a_run_ending_in_a_group_closes_what_it_left_in_flight_and_only_that(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    recorded: list[tuple[Any, dict[str, Any]]],
) -> None:
    """A run that fails with a round waiting for the model and calls that never
    finished ends them (the round failed, keeping the text it streamed; the calls
    cancelled) in the group that writes its end; a run of the same group that goes on
    keeps its own in flight."""
    in_flight = [(event, payload) for event, payload in recorded
                 if event.kind != "tool_call_finished" or event.round_index == 0]
    in_flight = in_flight[:next(i for i, (event, _) in enumerate(in_flight)
                                if event.kind == "model_response_received"
                                and event.round_index == 2)]
    (failing_run, failing), (going_on_run, going_on) = recorders(endpoint, tools, policy, 2)
    write_group([Batch(failing, in_flight), Batch(going_on, in_flight)])
    assert [r.status for r in going_on_run.rounds.order_by("index")] == [
        "responded", "responded", "requested"]

    failure = Ending(RunStatus.FAILED, {"error_type": "Boom", "error_message": "no"},
                     streamed={2: "half an ans"})
    assert write_group([Batch(failing, [], failure), Batch(going_on, [])]) == [
        len(in_flight) + 1, len(in_flight)]

    failing_run.refresh_from_db()
    assert (failing_run.status, failing_run.error_type) == (RunStatus.FAILED, "Boom")
    assert [(r.status, r.ai_text, r.finished_at is not None)
            for r in failing_run.rounds.order_by("index")][2] == ("failed", "half an ans", True)
    assert {c.state for c in ToolCall.objects.filter(run=failing_run, round__index=1)} == {
        "cancelled"}
    assert all(c.finished_at is not None
               for c in ToolCall.objects.filter(run=failing_run, round__index=1))
    assert RunEvent.objects.get(run=failing_run, seq=failing_run.last_seq).payload == {
        "status": "failed", "error_type": "Boom", "error_message": "no", "round_index": 2}
    assert [r.status for r in going_on_run.rounds.order_by("index")][2] == "requested"
    assert {c.state for c in ToolCall.objects.filter(run=going_on_run, round__index=1)} == {
        "started"}
    assert_seqs_gapless(failing_run)


def test_an_ending_run_that_lost_its_lease_is_not_ended_and_the_others_are(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    recorded: list[tuple[Any, dict[str, Any]]],
) -> None:
    (kept_run, kept), (lost_run, lost) = recorders(endpoint, tools, policy, 2)
    Run.objects.filter(pk=lost_run.pk).update(lease_token=lost.token + 1)  # reclaimed

    outcomes = write_group([Batch(kept, recorded, ending()), Batch(lost, recorded, ending())])

    assert outcomes[0] == len(recorded) + 1
    assert isinstance(outcomes[1], LeaseLost)
    assert ended(kept_run)[0] == RunStatus.SUCCEEDED
    assert ended(lost_run)[0] == RunStatus.RUNNING
    assert not RunEvent.objects.filter(run=lost_run).exists()


@pytest.mark.django_db(transaction=True)
def test_a_group_whose_commit_fails_fails_every_batch_and_none_is_written_again(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    recorded: list[tuple[Any, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whether a group whose COMMIT failed is stored is unknown: written again alone,
    a batch could be stored twice. Each run gets the error (and is handed back)."""
    made = recorders(endpoint, tools, policy, 2)
    alone: list[str] = []
    monkeypatch.setattr(RunRecorder, "record_batch",
                        lambda self, batch: alone.append(self.run_id))
    wrapper = connections[DEFAULT_DB_ALIAS]
    real_commit = wrapper.commit
    failures = {"left": 1}

    def commit_fails() -> None:
        if failures["left"]:
            failures["left"] -= 1
            raise OperationalError("disk I/O error")
        real_commit()

    monkeypatch.setattr(wrapper, "commit", commit_fails)

    outcomes = write_group([Batch(recorder, recorded) for _, recorder in made])

    assert [type(outcome) for outcome in outcomes] == [OperationalError, OperationalError]
    assert (alone, failures["left"]) == ([], 0)
    for run, recorder in made:
        assert not RunEvent.objects.filter(run=run).exists()
        assert recorder.cancel_seen is None  # nothing told it the batch committed


def hold_first_group(monkeypatch: pytest.MonkeyPatch,
                     ) -> tuple[list[list[str]], threading.Event, threading.Event]:
    """The groups written (their runs' ids), an event set once the first group is being
    written, and the event that lets it go on (waited for 10 s at most: a test that
    never sets it fails, never hangs)."""
    groups: list[list[str]] = []
    writing = threading.Event()
    release = threading.Event()
    real = batch_writer.write_group

    def held(batches: list[Batch]) -> list[int | Exception]:
        groups.append([batch.recorder.run_id for batch in batches])
        if len(groups) == 1:
            writing.set()
            assert release.wait(10)
        return real(batches)

    monkeypatch.setattr(batch_writer._WRITERS, "handle", held)
    return groups, writing, release


# -- the writer task of an event loop ----------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_batches_arriving_while_a_group_is_written_make_the_next_group(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    recorded: list[tuple[Any, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    settings.AGENTFORGE_WORKER_DB_THREADS = 1  # one writer for the loop
    made = recorders(endpoint, tools, policy, 4)
    groups, writing, release = hold_first_group(monkeypatch)

    async def scenario() -> list[int]:
        loop = asyncio.get_running_loop()
        first = loop.create_task(batch_writer.write(made[0][1], recorded))
        assert await asyncio.to_thread(writing.wait, 10)
        later = [loop.create_task(batch_writer.write(recorder, recorded))
                 for _, recorder in made[1:]]
        await asyncio.sleep(0)  # queued behind the group being written
        release.set()
        return [await first, *[await task for task in later]]

    assert async_to_sync(scenario)() == [len(recorded)] * 4
    assert groups == [[made[0][1].run_id], [recorder.run_id for _, recorder in made[1:]]]
    for run, _ in made:
        assert_seqs_gapless(run)
        assert RunEvent.objects.filter(run=run).count() == len(recorded)


@pytest.mark.django_db(transaction=True)
def test_a_cancelled_writer_fails_the_batches_it_held_and_those_waiting(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    recorded: list[tuple[Any, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    """Its loop closing cancels the writer: whether its group is stored is unknown,
    and nobody is left to write the batches queued behind it; all of them fail rather
    than wait forever."""
    settings.AGENTFORGE_WORKER_DB_THREADS = 1  # the second batch waits behind the first
    made = recorders(endpoint, tools, policy, 2)
    _, writing, release = hold_first_group(monkeypatch)

    async def scenario() -> list[BaseException | int]:
        loop = asyncio.get_running_loop()
        first = loop.create_task(batch_writer.write(made[0][1], recorded))
        assert await asyncio.to_thread(writing.wait, 10)
        second = loop.create_task(batch_writer.write(made[1][1], recorded))
        await asyncio.sleep(0)
        (writer,) = batch_writer._WRITERS.queues[loop].tasks
        writer.cancel()
        outcomes = await asyncio.gather(first, second, return_exceptions=True)
        release.set()  # the held thread finishes its group; nobody waits for it
        return outcomes

    outcomes = async_to_sync(scenario)()
    assert [str(outcome) for outcome in outcomes] == ["the event writer was cancelled"] * 2


@pytest.mark.django_db(transaction=True)
def test_an_idle_writer_keeps_no_task_so_its_loop_can_go(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    recorded: list[tuple[Any, dict[str, Any]]],
) -> None:
    """The loops are weak keys: a writer that kept its finished task (which refers to
    its loop) would keep every loop that ever wrote alive (each async_to_sync makes
    one)."""
    (run, recorder), = recorders(endpoint, tools, policy, 1)

    async def scenario() -> tuple[int, Any]:
        seq = await batch_writer.write(recorder, recorded)
        await asyncio.sleep(0)  # the writer's last step, after it settled the batch
        return seq, batch_writer._WRITERS.queues[asyncio.get_running_loop()].tasks

    assert async_to_sync(scenario)() == (len(recorded), set())
    assert_seqs_gapless(run)


@pytest.mark.django_db(transaction=True)
def test_a_loop_has_as_many_writers_as_lanes_and_more_batches_wait_for_a_group(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    recorded: list[tuple[Any, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    """With two lanes, a second batch gets a writer of its own while the first group is
    held (in production each on its run's lane thread; here both on the test's
    thread); a third, arriving while both are busy, waits for the next group."""
    settings.AGENTFORGE_WORKER_DB_THREADS = 2
    made = recorders(endpoint, tools, policy, 3)
    groups, writing, release = hold_first_group(monkeypatch)

    async def scenario() -> tuple[int, list[str], list[int]]:
        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(batch_writer.write(made[0][1], recorded))]
        assert await asyncio.to_thread(writing.wait, 10)
        tasks.append(loop.create_task(batch_writer.write(made[1][1], recorded)))
        await asyncio.sleep(0)  # its writer takes it
        tasks.append(loop.create_task(batch_writer.write(made[2][1], recorded)))
        await asyncio.sleep(0)  # no third writer: it waits
        writers = batch_writer._WRITERS.queues[loop]
        seen = (len(writers.tasks), [w.item.recorder.run_id for w in writers.waiting])
        release.set()
        return seen[0], seen[1], [await task for task in tasks]

    writers, waiting, seqs = async_to_sync(scenario)()
    assert (writers, waiting) == (2, [made[2][1].run_id])
    assert seqs == [len(recorded)] * 3
    assert sorted(groups) == sorted([[recorder.run_id] for _, recorder in made])
    for run, _ in made:
        assert_seqs_gapless(run)


def test_on_sqlite_a_processs_writers_take_turns_on_a_lock(
    endpoint: ModelEndpoint, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    recorded: list[tuple[Any, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SQLite lets one writer in at a time: a process's groups (and its runs' claims and
    ends) queue on a lock of their own rather than in SQLite's busy handler (which
    sleeps by steps of up to 100 ms); PostgreSQL's write at once (they lock rows)."""
    made = recorders(endpoint, tools, policy, 2)
    held_while_writing: list[bool] = []
    real = batch_writer._write_group

    def observed(batches: list[Batch]) -> list[int | Exception]:
        held_while_writing.append(db._SQLITE_WRITERS.locked())
        return real(batches)

    monkeypatch.setattr(batch_writer, "_write_group", observed)
    outcomes = write_group([Batch(recorder, recorded) for _, recorder in made])

    assert outcomes == [len(recorded)] * 2
    assert held_while_writing == [connection.vendor == "sqlite"]
    assert not db._SQLITE_WRITERS.locked()  # given back after the group


def test_a_write_turn_taken_again_on_its_thread_is_already_held() -> None:
    """A writer inside its turn that writes a group too (a test's own thread) does not
    wait for itself; another thread waits for the turn to end."""
    sqlite = connection.vendor == "sqlite"
    other_got_it: list[bool] = []

    def other() -> None:
        other_got_it.append(db._SQLITE_WRITERS.acquire(blocking=False))
        if other_got_it[-1]:
            db._SQLITE_WRITERS.release()

    with db.write_turn():
        with db.write_turn():
            assert db._SQLITE_WRITERS.locked() == sqlite
        assert db._SQLITE_WRITERS.locked() == sqlite  # the inner turn gave nothing back
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert other_got_it == [not sqlite]
    assert not db._SQLITE_WRITERS.locked()
