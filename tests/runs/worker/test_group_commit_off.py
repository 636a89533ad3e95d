"""AGENTFORGE_GROUP_COMMIT=off (runs.loops.loop_groups), the plain alternative the
product-path benchmark measures group commit against: each run's batch is committed in
a transaction of its own and each first claim is made alone, with the same outcomes
(every run succeeds, its seqs gapless)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connection, connections

from tests.runs.support import assert_seqs_gapless, start
from tests.runs.worker.support import PARALLEL_TWICE, recording_run
from tests.server_support import ROOT
from tools_app.engine.events import RoundStarted
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, RunEvent, RunStatus, ToolRegistration
from tools_app.runs import tasks
from tools_app.runs.loops import loop_groups
from tools_app.runs.worker import batch_writer, runner
from tools_app.runs.worker.recorder import RunRecorder

pytestmark = [pytest.mark.both, pytest.mark.django_db(transaction=True)]

RUNS = 3


@pytest.fixture
def endpoint(make_endpoint: Any) -> ModelEndpoint:
    return make_endpoint(PARALLEL_TWICE)  # type: ignore[no-any-return]


@pytest.fixture(params=["on", "off"])
def group_commit(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
                 settings: Any) -> str:
    """The switch as a process started with AGENTFORGE_GROUP_COMMIT=<param> reads it; one
    database lane, so a loop's items wait for one group when grouped."""
    monkeypatch.setattr(loop_groups, "GROUPED", request.param == "on")
    settings.AGENTFORGE_WORKER_DB_THREADS = 1
    return str(request.param)


class Transactions:
    """The runs each committed transaction wrote to, in commit order (statements made
    outside a transaction are their own and belong to none)."""

    def __init__(self, run_ids: list[str]) -> None:
        self.keys = {run_id.replace("-", ""): run_id for run_id in run_ids}
        self.committed: list[set[str]] = []
        self.current: set[str] = set()

    def statement(self, execute: Callable[..., Any], sql: str, params: Any, many: bool,
                  context: dict[str, Any]) -> Any:
        if connection.in_atomic_block:
            values = [v for row in params for v in row] if many else list(params or ())
            self.current |= {self.keys[key] for key in map(_hex, values) if key in self.keys}
        return execute(sql, params, many, context)

    def commit(self) -> None:
        self.committed.append(self.current)
        self.current = set()


def _hex(value: Any) -> str:
    return str(value).replace("-", "")


@pytest.fixture
def transactions(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[list[str]],
                                                                          Transactions]]:
    """Watch the commits of this thread's connection (where a test's loop does its
    database work) for the given runs."""
    wrapper = connections[DEFAULT_DB_ALIAS]
    watching: list[Transactions] = []
    real_commit = wrapper.commit

    def commit() -> None:
        real_commit()
        for watcher in watching:
            watcher.commit()

    monkeypatch.setattr(wrapper, "commit", commit)

    def watch(run_ids: list[str]) -> Transactions:
        watcher = Transactions(run_ids)
        watching.append(watcher)
        wrapper.execute_wrappers.append(watcher.statement)
        return watcher

    yield watch
    for watcher in watching:
        wrapper.execute_wrappers.remove(watcher.statement)


def test_batches_handed_in_together_share_one_commit_unless_group_commit_is_off(
    group_commit: str, endpoint: ModelEndpoint, tools: dict[str, ToolRegistration],
    policy: ErrorPolicy, transactions: Callable[[list[str]], Transactions],
) -> None:
    made = [recording_run(endpoint, tools, policy) for _ in range(RUNS)]
    recorders = [RunRecorder(str(run.pk), token) for run, token in made]
    batch = [(RoundStarted(round_index=0, at=1_000.0), {})]
    watched = transactions([recorder.run_id for recorder in recorders])

    async def together() -> list[int]:
        return list(await asyncio.gather(
            *(batch_writer.write(recorder, batch) for recorder in recorders)))

    assert async_to_sync(together)() == [1] * RUNS
    if group_commit == "on":
        assert watched.committed == [{recorder.run_id for recorder in recorders}]
    else:
        assert sorted(watched.committed, key=sorted) == sorted(
            ({recorder.run_id} for recorder in recorders), key=sorted)
    for run, _ in made:
        assert list(RunEvent.objects.filter(run=run).values_list("kind", flat=True)) == [
            "round_started"]


def first_claims(statements: list[str]) -> int:
    """The statements of first claims among those made (only they expect a run never
    started)."""
    return sum(1 for sql in statements if sql.startswith('UPDATE "tools_app_run"')
               and '"tools_app_run"."started_at" IS NULL' in sql)


def test_runs_started_together_succeed_each_in_transactions_of_its_own_when_off(
    group_commit: str, endpoint: ModelEndpoint, tools: dict[str, ToolRegistration],
    policy: ErrorPolicy, monkeypatch: pytest.MonkeyPatch,
    transactions: Callable[[list[str]], Transactions],
) -> None:
    """Whole runs on one loop: claimed together (one statement) or each alone, and with
    the switch off no transaction writes more than one run's rows."""
    monkeypatch.setattr(runner, "claims_grouped", lambda: True)  # SQLite's claims too
    runs = [start(endpoint, [tools["lookup"], tools["nul_echo"]], policy)
            for _ in range(RUNS)]
    watched = transactions([str(run.pk) for run in runs])
    statements: list[str] = []

    def note(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        statements.append(sql)
        return execute(sql, *args)

    async def together() -> list[str | None]:
        return list(await asyncio.gather(
            *(tasks.execute_run.acall(str(run.pk)) for run in runs)))

    with connection.execute_wrapper(note):
        outcomes = async_to_sync(together)()

    assert outcomes == ["succeeded"] * RUNS
    assert first_claims(statements) == (1 if group_commit == "on" else RUNS)
    if group_commit == "off":
        assert watched.committed
        assert all(len(written) <= 1 for written in watched.committed), watched.committed
    for run in runs:
        run.refresh_from_db()
        assert (run.status, run.final_text) == (RunStatus.SUCCEEDED,
                                                 "done: value of c\necho:\\u0000d\\u0000")
        assert run.tool_calls_count == 4
        assert_seqs_gapless(run)
    assert len({Run.objects.get(pk=run.pk).last_seq for run in runs}) == 1


@pytest.mark.parametrize(("value", "grouped"), [("", True), ("on", True), ("OFF", False),
                                                ("off", False)])
def test_the_switch_reads_the_environment(monkeypatch: pytest.MonkeyPatch, value: str,
                                          grouped: bool) -> None:
    monkeypatch.setenv(loop_groups.ENVIRONMENT_VARIABLE, value)
    assert loop_groups.grouping_chosen() is grouped


def test_a_bad_value_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(loop_groups.ENVIRONMENT_VARIABLE, "no")
    with pytest.raises(ImproperlyConfigured, match="AGENTFORGE_GROUP_COMMIT"):
        loop_groups.grouping_chosen()


def test_a_process_started_with_the_switch_off_does_each_item_alone() -> None:
    """Read once, at import, as the benchmark's servers (daphne, db_workers) read it."""
    code = ("import django; django.setup()\n"
            "from tools_app.runs.loops import loop_groups\n"
            "print(loop_groups.GROUPED)\n")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agentforge_web.settings",
           loop_groups.ENVIRONMENT_VARIABLE: "off"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
