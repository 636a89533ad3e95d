"""Rerunning a run: as it was (its snapshot) or with the current configuration (the
differences listed); the new run's parent is the original."""

from __future__ import annotations

from typing import Any

import pytest

from tests.runs.support import calls, execute, start
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, ToolRegistration
from tools_app.runs.debugger.rerun import RerunError, run_rerun

pytestmark = pytest.mark.both

SCRIPT = [{"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}]},
          {"text": "model saw: {last_result}"}]


@pytest.fixture
def original(make_endpoint: Any, tools: dict[str, ToolRegistration],
             policy: ErrorPolicy) -> Run:
    run = start(make_endpoint(SCRIPT), [tools["lookup"]], policy, "Look k up",
                policy_overrides={"max_round_trips": 5})
    assert execute(run) == "succeeded"
    return run


def test_a_rerun_as_it_was_repeats_the_snapshot(original: Run) -> None:
    ModelEndpoint.objects.filter(pk=original.endpoint_id).update(
        script=[{"text": "a changed script"}])

    again = run_rerun(run=original, user=None, mode="as_it_was")

    assert again.parent_id == original.pk
    assert again.status == "queued"
    assert {k: v for k, v in again.snapshot.items() if k != "rerun"} == original.snapshot
    assert again.snapshot["rerun"] == {"of": str(original.pk), "mode": "as_it_was",
                                       "differences": []}
    assert execute(again) == "succeeded"
    assert again.final_text == original.final_text == "model saw: value of k"
    assert [c.tool_name for c in calls(again)] == ["lookup"]


def test_a_rerun_with_the_current_configuration_lists_what_changed(
    original: Run, policy: ErrorPolicy,
) -> None:
    ModelEndpoint.objects.filter(pk=original.endpoint_id).update(
        script=[{"text": "the new script"}], model="model-2")
    ToolRegistration.objects.filter(name="lookup").update(
        description="Read a value, faster", version_hash="f" * 64)
    policy.max_round_trips = 7
    policy.save()

    again = run_rerun(run=original, user=None, mode="current")

    changes = again.snapshot["rerun"]["differences"]
    assert any(c.startswith("endpoint model: ") and "'model-2'" in c for c in changes)
    assert any(c.startswith("endpoint script: ") for c in changes)
    assert any(c.startswith("tool lookup: definition changed") for c in changes)
    assert "policy max_round_trips: 5 → 7" in changes  # the override is not carried over
    assert execute(again) == "succeeded"
    assert again.final_text == "the new script"
    assert again.snapshot["messages"] == original.snapshot["messages"]


def test_nothing_changed_nothing_listed(original: Run) -> None:
    again = run_rerun(run=original, user=None, mode="current")
    assert [c for c in again.snapshot["rerun"]["differences"]
            if not c.startswith("policy max_round_trips")] == []


@pytest.mark.parametrize("change", ["tool gone", "tool disabled", "endpoint gone"])
def test_a_rerun_with_the_current_configuration_needs_it_to_exist(
    original: Run, change: str,
) -> None:
    if change == "tool gone":
        ToolRegistration.objects.filter(name="lookup").delete()
    elif change == "tool disabled":
        ToolRegistration.objects.filter(name="lookup").update(enabled=False)
    else:
        ModelEndpoint.objects.filter(pk=original.endpoint_id).delete()
    original.refresh_from_db()

    with pytest.raises(RerunError, match="rerun the run as it was"):
        run_rerun(run=original, user=None, mode="current")
    assert run_rerun(run=original, user=None, mode="as_it_was").parent_id == original.pk


def test_an_unknown_mode_is_refused(original: Run) -> None:
    with pytest.raises(RerunError, match="mode must be one of as_it_was, current"):
        run_rerun(run=original, user=None, mode="sideways")  # type: ignore[arg-type]
