"""A run's cost in dollars, end to end through the worker and the write path: each round
priced with the price revision frozen at the run's start (and recording it), each call
its share, the run the sum; a later edit of the price changes no recorded cost; the cost
cap, from the policy or per run, stops a run before the model call that would pass it."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from tests.prices_support import set_price
from tests.runs.support import calls, events, execute, rounds, start
from tools_app.engine import run_cost
from tools_app.models import ErrorPolicy, Round, Run, RunStatus, ToolRegistration
from tools_app.runs.debugger.fork import ForkConfig, run_fork
from tools_app.runs.services import RunRequestError
from tools_app.runs.snapshot.model import snapshot_of

pytestmark = pytest.mark.both


def weather(*cities: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "get_weather", "arguments": {"city": c}} for c in cities]}


# Two rounds of calls (three, then two), then the answer.
SCRIPT = [weather("Paris", "Rome", "Oslo"), weather("Lima", "Kyiv"), {"text": "done"}]
LONG_SCRIPT = [weather(f"City {n}") for n in range(8)] + [{"text": "done"}]


def test_a_runs_cost_is_the_sum_of_its_rounds_and_its_calls_share_them(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    endpoint = make_endpoint(SCRIPT)
    revision = set_price(endpoint, input_per_million="1000", output_per_million="3000",
                         cached_input_per_million="500")
    run = start(endpoint, [demo_tools["get_weather"]], policy)
    execute(run)

    assert run.status == RunStatus.SUCCEEDED
    stored = rounds(run)
    assert len(stored) == 3
    for round_ in stored:
        assert round_.cost_usd is not None
        assert round_.cost_usd == (Decimal(round_.input_tokens) * 1000
                                   + Decimal(round_.output_tokens) * 3000) / 1_000_000
        assert round_.price_revision_id == revision.pk
        shares = [c.cost_usd for c in calls(run) if c.round_id == round_.pk]
        assert sum(shares, Decimal(0)) == (round_.cost_usd if shares else 0)
    assert run.cost_usd == run_cost(r.cost_usd for r in stored)
    assert run.cost_usd > 0
    assert snapshot_of(run).price is not None
    assert snapshot_of(run).price.revision == revision.pk  # type: ignore[union-attr]
    response_events = [e for e in events(run) if e.kind == "model_response_received"]
    assert [Decimal(e.payload["cost"]) for e in response_events] == [r.cost_usd for r in stored]


def test_an_edit_of_the_price_after_a_run_changes_none_of_its_costs(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    endpoint = make_endpoint(SCRIPT)
    first = set_price(endpoint, input_per_million="1000", output_per_million="3000")
    run = start(endpoint, [demo_tools["get_weather"]], policy)
    execute(run)
    cost, round_costs = run.cost_usd, [r.cost_usd for r in rounds(run)]

    second = set_price(endpoint, input_per_million="2000", output_per_million="6000")
    later = start(endpoint, [demo_tools["get_weather"]], policy)
    execute(later)

    run.refresh_from_db()
    assert run.cost_usd == cost
    assert [r.cost_usd for r in rounds(run)] == round_costs
    assert {r.price_revision_id for r in rounds(run)} == {first.pk}
    assert {r.price_revision_id for r in rounds(later)} == {second.pk}
    assert later.cost_usd == 2 * cost  # the same script at twice the price


def test_a_run_without_a_price_has_no_cost_not_zero(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    run = start(make_endpoint(SCRIPT), [demo_tools["get_weather"]], policy)
    execute(run)
    assert run.status == RunStatus.SUCCEEDED
    assert run.cost_usd is None
    assert {r.cost_usd for r in rounds(run)} == {None}
    assert {c.cost_usd for c in calls(run)} == {None}


def _capped_run(make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
                policy: ErrorPolicy, **kwargs: Any) -> Run:
    endpoint = make_endpoint(LONG_SCRIPT)
    set_price(endpoint, input_per_million="1000", output_per_million="1000")
    run = start(endpoint, [demo_tools["get_weather"]], policy, **kwargs)
    execute(run)
    return run


def least_next(previous: Round | None) -> Decimal:
    """The least the call after `previous` costs: its input tokens again, at $1000/M."""
    return Decimal(previous.input_tokens or 0) * 1000 / 1_000_000 if previous else Decimal(0)


def _assert_stopped_by_the_cap(run: Run, cap: Decimal) -> None:
    assert run.status == RunStatus.FAILED
    assert run.error_type == "CostCapExceededError"
    assert f"past its cost cap of ${cap}" in run.error_message
    stored = rounds(run)
    # Stopped before a model call: every stored round was answered, the script not done.
    assert 0 < len(stored) < len(LONG_SCRIPT)
    assert all(r.status == "responded" for r in stored)
    assert run.cost_usd == run_cost(r.cost_usd for r in stored)
    assert run.cost_usd is not None
    # The last call made was let through (what came before it, plus the least it could
    # cost, stayed under the cap); the next one would have passed it.
    *before, last = stored
    spent_before = run_cost(r.cost_usd for r in before) or Decimal(0)
    assert spent_before + least_next(before[-1] if before else None) <= cap
    assert run.cost_usd + least_next(last) > cap
    assert [e.payload["error_type"] for e in events(run) if e.kind == "chat_failed"] == [
        "CostCapExceededError"]


def test_the_policys_cost_cap_stops_a_run_before_the_model_call_that_would_pass_it(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    policy.cost_cap_usd = Decimal("0.1")
    policy.save()
    run = _capped_run(make_endpoint, demo_tools, policy)
    _assert_stopped_by_the_cap(run, Decimal("0.1"))
    assert snapshot_of(run).policy.cost_cap_usd == Decimal("0.1")


def test_a_per_run_cost_cap_overrides_the_policys(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    run = _capped_run(make_endpoint, demo_tools, policy,
                      policy_overrides={"cost_cap_usd": "0.05"})
    _assert_stopped_by_the_cap(run, Decimal("0.05"))
    assert snapshot_of(run).policy_changed == ["cost_cap_usd"]


def test_a_cap_the_run_stays_under_lets_it_finish(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    run = _capped_run(make_endpoint, demo_tools, policy, policy_overrides={"cost_cap_usd": 100})
    assert run.status == RunStatus.SUCCEEDED


@pytest.mark.parametrize(("value", "problem"), [("lots", "decimal number"),
                                                (-1, "greater than or equal to 0.0001"),
                                                (True, "must be")])
def test_a_bad_per_run_cap_is_refused_with_its_reason(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    value: Any, problem: str,
) -> None:
    with pytest.raises(RunRequestError) as refused:
        start(make_endpoint(SCRIPT), [demo_tools["get_weather"]], policy,
              policy_overrides={"cost_cap_usd": value})
    assert problem in refused.value.problems["cost_cap_usd"]


def test_a_fork_onto_another_endpoint_is_priced_as_that_endpoint(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    endpoint, other = make_endpoint(SCRIPT), make_endpoint(SCRIPT, name="other")
    first = set_price(endpoint, input_per_million="1000", output_per_million="3000")
    theirs = set_price(other, input_per_million="5", output_per_million="5")
    run = start(endpoint, [demo_tools["get_weather"]], policy)
    execute(run)
    set_price(endpoint, input_per_million="2000", output_per_million="3000")

    same = run_fork(run=run, user=None, round_number=1)
    moved = run_fork(run=run, user=None, round_number=1, config=ForkConfig(endpoint=other))

    assert snapshot_of(same).price.revision == first.pk  # type: ignore[union-attr]
    assert snapshot_of(moved).price.revision == theirs.pk  # type: ignore[union-attr]
    execute(moved)
    assert {r.price_revision_id for r in rounds(moved)} == {theirs.pk}
