"""The runs a loop starts together are claimed together (runner._claimed_together): the
first claims of runs never started in one statement, their rows and rounds in one read
each; any other run by the general path, alone; each run with its own outcome."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.runs.support import assert_seqs_gapless, start
from tools_app.engine import ResumeState
from tools_app.models import ErrorPolicy, Round, Run, RunStatus, ToolRegistration
from tools_app.runs import tasks
from tools_app.runs.worker import runner

pytestmark = pytest.mark.both

ANSWER = [{"text": "done"}]


@pytest.fixture
def make_run(make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
             ) -> Any:
    endpoint = make_endpoint(ANSWER)

    def make() -> Run:
        return start(endpoint, [tools["get_weather"]], policy)
    return make


def claim_updates(queries: CaptureQueriesContext) -> list[str]:
    """The statements of first claims (only they expect a run never started)."""
    return [q["sql"] for q in queries.captured_queries
            if q["sql"].startswith('UPDATE "tools_app_run"')
            and '"tools_app_run"."started_at" IS NULL' in q["sql"]]


def run_together(runs: list[Run]) -> tuple[list[str | None], list[str]]:
    """The runs executed at once on one event loop: their outcomes, and the statements
    of their first claims."""
    async def together() -> list[str | None]:
        return list(await asyncio.gather(
            *(tasks.execute_run.acall(str(run.pk)) for run in runs)))

    with CaptureQueriesContext(connection) as queries:
        outcomes = async_to_sync(together)()
    return outcomes, claim_updates(queries)


@pytest.fixture
def groups_seen(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The run ids of each group of claims the loop groups handled."""
    groups: list[list[str]] = []
    real = runner._CLAIMS.handle

    def observed(requests: Sequence[tuple[str, str]]) -> Any:
        groups.append([run_id for run_id, _ in requests])
        return real(requests)

    monkeypatch.setattr(runner._CLAIMS, "handle", observed)
    return groups


@pytest.mark.django_db(transaction=True)
def test_runs_started_together_are_claimed_by_one_statement(
    make_run: Any, groups_seen: list[list[str]], monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    settings.AGENTFORGE_WORKER_DB_THREADS = 1
    monkeypatch.setattr(runner, "claims_grouped", lambda: True)
    runs = [make_run() for _ in range(3)]

    outcomes, claims = run_together(runs)

    assert outcomes == ["succeeded"] * 3
    assert groups_seen == [[str(run.pk) for run in runs]]
    assert len(claims) == 1
    for run in runs:
        run.refresh_from_db()
        assert (run.status, run.lease_token) == (RunStatus.SUCCEEDED, 1)
        assert_seqs_gapless(run)


@pytest.mark.django_db(transaction=True)
def test_where_claims_are_not_grouped_each_run_claims_alone(
    make_run: Any, groups_seen: list[list[str]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runner, "claims_grouped", lambda: False)
    runs = [make_run() for _ in range(3)]

    outcomes, claims = run_together(runs)

    assert outcomes == ["succeeded"] * 3
    assert (groups_seen, len(claims)) == ([], 3)


def test_claims_are_grouped_on_postgresql_not_on_sqlite() -> None:
    """Grouping saves PostgreSQL's round trips and commits; on SQLite a claim is cheap
    and grouping only lined up runs that had arrived apart (runner.claims_grouped)."""
    assert runner.claims_grouped() == (connection.vendor == "postgresql")


def test_a_group_claims_each_run_as_its_own_claim_would(make_run: Any) -> None:
    """A queued run is claimed by the group's statement; an interrupted one by the general
    path (its first start kept); a queued run cancelled before its claim is ended, not
    claimed; a run whose lease is live is left to its owner."""
    fresh, interrupted, cancelled, leased = (make_run() for _ in range(4))
    started = timezone.now() - timedelta(minutes=1)
    Run.objects.filter(pk=interrupted.pk).update(
        status=RunStatus.INTERRUPTED, started_at=started, lease_token=3)
    Run.objects.filter(pk=cancelled.pk).update(cancel_requested=True)
    Run.objects.filter(pk=leased.pk).update(
        status=RunStatus.RUNNING, started_at=started, lease_token=1, lease_owner="other",
        lease_expires_at=timezone.now() + timedelta(minutes=1))

    outcomes = runner._claimed_together(
        [(str(run.pk), f"worker-{n}") for n, run in
         enumerate((fresh, interrupted, cancelled, leased))])

    first, second, third, fourth = outcomes
    assert isinstance(first, runner._Claimed)
    assert isinstance(second, runner._Claimed)
    assert (first.run.pk, first.token) == (fresh.pk, 1)
    assert (second.run.pk, second.token) == (interrupted.pk, 4)
    assert (third, fourth) == (None, None)
    assert not isinstance(first.history, Exception)
    assert first.history[1] is None  # a first start: the snapshot's messages alone
    for run in (fresh, interrupted, cancelled, leased):
        run.refresh_from_db()
    assert (fresh.status, fresh.lease_owner) == (RunStatus.RUNNING, "worker-0")
    assert (interrupted.status, interrupted.lease_owner, interrupted.started_at) == \
        (RunStatus.RUNNING, "worker-1", started)
    assert cancelled.status == RunStatus.CANCELLED
    assert (leased.lease_owner, leased.lease_token) == ("other", 1)


def test_a_queued_run_with_rounds_is_resumed_from_them(make_run: Any) -> None:
    """A run never started may hold rounds already (a fork's): the group reads which runs
    have any, and those get their history rebuilt."""
    plain, with_rounds = make_run(), make_run()
    Round.objects.create(run=with_rounds, index=0)

    outcomes = runner._claimed_together([(str(plain.pk), "w1"), (str(with_rounds.pk), "w2")])

    histories = [o.history for o in outcomes if isinstance(o, runner._Claimed)
                 and not isinstance(o.history, Exception)]
    assert [resume for _, resume in histories] == [
        None, ResumeState(round_index=0, round_trips_done=0)]


def test_a_run_whose_history_cannot_be_rebuilt_fails_alone(make_run: Any) -> None:
    """Its claim stands and the error is its own (the run fails with it once its engine
    is built); the others of the group are claimed as usual."""
    broken, fine = make_run(), make_run()
    snapshot = {**broken.snapshot, "messages": [{"role": "nobody", "content": 1}]}
    Run.objects.filter(pk=broken.pk).update(snapshot=snapshot)

    first, second = runner._claimed_together([(str(broken.pk), "w1"), (str(fine.pk), "w2")])

    assert isinstance(first, runner._Claimed)
    assert isinstance(first.history, Exception)
    assert isinstance(second, runner._Claimed)
    assert not isinstance(second.history, Exception)
    assert (first.token, second.token) == (1, 1)
