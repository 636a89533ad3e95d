"""The process-wide group writer: several runs' batches in one transaction, and a
failure that stays its own run's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import DEFAULT_DB_ALIAS, OperationalError, connection, connections

from tools_app.engine.events import RoundStarted
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, RunEvent, ToolRegistration
from tools_app.runs import group_writer
from tools_app.runs.eventlog import LeaseLost
from tools_app.runs.group_writer import GroupWriter
from tools_app.runs.leases import claim
from tools_app.runs.recorder import RunRecorder

from .support import assert_seqs_gapless, start

pytestmark = pytest.mark.both


def claimed_recorder(endpoint: ModelEndpoint, tools: dict[str, ToolRegistration],
                     policy: ErrorPolicy, worker: str) -> RunRecorder:
    run = start(endpoint, [tools["lookup"]], policy)
    token = claim(str(run.pk), worker)
    assert token is not None
    return RunRecorder(str(run.pk), token)


def round_started(index: int) -> list[tuple[Any, dict[str, Any]]]:
    event = RoundStarted(round_index=index)
    return [(event, event.model_dump(mode="json"))]


@pytest.fixture
def recorders(make_endpoint: Any, tools: dict[str, ToolRegistration],
              policy: ErrorPolicy) -> list[RunRecorder]:
    endpoint = make_endpoint([{"text": "unused"}])
    return [claimed_recorder(endpoint, tools, policy, f"worker-{n}") for n in range(3)]


@pytest.fixture
def groups(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every group written."""
    sizes: list[int] = []
    real = group_writer.write_group

    def counted(group: list[Any]) -> None:
        sizes.append(len(group))
        real(group)

    monkeypatch.setattr(group_writer, "write_group", counted)
    return sizes


def stored(recorder: RunRecorder) -> list[tuple[int, str]]:
    return list(RunEvent.objects.filter(run_id=recorder.run_id).order_by("seq")
                .values_list("seq", "kind"))


def test_batches_handed_in_together_are_committed_as_one_group(
    recorders: list[RunRecorder], groups: list[int],
) -> None:
    writer = GroupWriter(max_drivers=1)
    before = [Run.objects.get(pk=r.run_id).last_seq for r in recorders]

    async def scenario() -> list[int]:
        return list(await asyncio.gather(*(writer.write(r, round_started(0))
                                           for r in recorders)))

    seqs = async_to_sync(scenario)()

    assert groups == [3]
    assert seqs == [last + 1 for last in before]
    for recorder, seq in zip(recorders, seqs, strict=True):
        assert stored(recorder)[-1] == (seq, "round_started")
        assert recorder._round_ids.keys() == {0}  # remembered once committed
        assert_seqs_gapless(Run.objects.get(pk=recorder.run_id))


def test_a_batch_that_fails_its_group_fails_alone_and_the_others_are_stored(
    recorders: list[RunRecorder], groups: list[int],
) -> None:
    writer = GroupWriter(max_drivers=1)
    lost = recorders[1]
    lost.token += 1  # another worker holds the run now: its batch is fenced out

    async def scenario() -> list[Any]:
        return list(await asyncio.gather(
            *(writer.write(r, round_started(0)) for r in recorders),
            return_exceptions=True))

    outcomes = async_to_sync(scenario)()

    assert groups == [3]  # tried together, then each alone
    assert isinstance(outcomes[1], LeaseLost)
    assert stored(lost)[-1][1] != "round_started"
    assert lost._round_ids == {}
    for recorder, outcome in zip([recorders[0], recorders[2]], [outcomes[0], outcomes[2]],
                                 strict=True):
        assert stored(recorder)[-1] == (outcome, "round_started")
        assert recorder._round_ids.keys() == {0}


def test_groups_are_at_most_max_group_batches_and_drivers_at_most_max_drivers(
    recorders: list[RunRecorder], groups: list[int],
) -> None:
    writer = GroupWriter(max_drivers=1, max_group=2)

    async def scenario() -> None:
        await asyncio.gather(*(writer.write(r, round_started(0)) for r in recorders))

    async_to_sync(scenario)()

    assert groups == [2, 1]
    assert all(stored(r)[-1][1] == "round_started" for r in recorders)


@pytest.mark.django_db(transaction=True)
def test_a_group_whose_commit_fails_is_never_written_again(
    recorders: list[RunRecorder], groups: list[int], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A failed COMMIT may have stored the group: writing its batches alone then could
    store them twice, so each run gets the error instead."""
    writer = GroupWriter(max_drivers=1)
    wrapper = type(connections[DEFAULT_DB_ALIAS])
    real_commit = wrapper.commit
    failures: list[str] = []

    def commit_fails_once(self: Any) -> None:
        if not failures:
            failures.append("commit")
            raise OperationalError("server closed the connection unexpectedly")
        real_commit(self)

    monkeypatch.setattr(wrapper, "commit", commit_fails_once)

    async def scenario() -> list[Any]:
        return list(await asyncio.gather(
            *(writer.write(r, round_started(0)) for r in recorders),
            return_exceptions=True))

    outcomes = async_to_sync(scenario)()

    assert failures == ["commit"]
    assert groups == [3]
    assert all(isinstance(outcome, OperationalError) for outcome in outcomes)
    for recorder in recorders:  # rolled back here, and not written alone afterwards
        assert "round_started" not in [kind for _, kind in stored(recorder)]
        assert recorder._round_ids == {}


def test_the_process_writer_groups_batches_on_sqlite_only(
    recorders: list[RunRecorder], groups: list[int],
) -> None:
    """On PostgreSQL concurrent groups could take the tool counters' row locks in
    opposite orders (runs.audit_schema): each batch is written alone there."""

    async def scenario() -> None:
        await asyncio.gather(*(group_writer.WRITER.write(r, round_started(0))
                               for r in recorders[:2]))

    async_to_sync(scenario)()

    assert groups == ([2] if connection.vendor == "sqlite" else [1, 1])
    assert all(stored(r)[-1][1] == "round_started" for r in recorders[:2])
