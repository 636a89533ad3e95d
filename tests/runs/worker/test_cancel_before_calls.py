"""A cancel requested while a round's first call runs: the round's later
non-idempotent calls never start (their start's commit reads the cancel), whatever the
heartbeat's poll."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from tests.runs.support import assert_seqs_gapless, calls, execute, start, statuses
from tests.runs.tools_for_tests import STATE
from tools_app.models import ErrorPolicy, Run, RunStatus, ToolRegistration
from tools_app.runs.services import run_cancel

pytestmark = pytest.mark.both

THREE_TRANSFERS = [
    {"tool_calls": [{"name": "transfer", "arguments": {"to": "a"}},
                    {"name": "transfer", "arguments": {"to": "b"}},
                    {"name": "transfer", "arguments": {"to": "c"}}]},
    {"text": "sent: {last_results}"},
]


@pytest.mark.parametrize("fields", [{"parallel": False},
                                    {"parallel": True, "max_concurrency": 1}],
                         ids=["sequential", "one-at-a-time"])
def test_later_calls_of_the_round_never_start_after_a_cancel(
    make_endpoint: Any, tools: dict[str, ToolRegistration], fields: dict[str, Any],
) -> None:
    policy = ErrorPolicy.objects.create(name="one by one", **fields)
    run = start(make_endpoint(THREE_TRANSFERS), [tools["transfer"]], policy)

    def cancel_from_the_ui() -> None:  # the cancel button, pressed while "a" is sent
        run_cancel(run=Run.objects.get(pk=run.pk))

    STATE.on_enter["transfer"].append(sync_to_async(cancel_from_the_ui))

    assert execute(run) == "cancelled"

    assert STATE.calls == [("transfer", "a")]  # b and c never started
    assert (run.status, run.error_type) == (RunStatus.CANCELLED, "Cancelled")
    by_target = {(c.arguments or {})["to"]: c for c in calls(run)}
    assert by_target["a"].state == "succeeded"
    assert {by_target[t].state for t in ("b", "c") if t in by_target} <= {
        "proposed", "cancelled"}
    assert statuses(run) == ["queued", "cancelled"]
    assert_seqs_gapless(run)
