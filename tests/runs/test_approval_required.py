"""A tool flagged "requires approval" (in code or in the admin) never executes in a run:
no one can approve it yet, so the call is recorded as rejected and the model is told."""

from __future__ import annotations

from typing import Any

import pytest

from tools_app.models import ErrorPolicy, ToolRegistration

from .support import calls, execute, start
from .tools_for_tests import STATE

pytestmark = pytest.mark.both


@pytest.mark.parametrize("flagged_in", ["code", "admin"])
def test_a_flagged_tool_never_executes_and_the_run_shows_why(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    flagged_in: str,
) -> None:
    name = "delete_everything" if flagged_in == "code" else "transfer"
    if flagged_in == "admin":
        ToolRegistration.objects.filter(name=name).update(requires_approval=True)
    script = [{"tool_calls": [{"name": name, "arguments": {"scope": "all"} if flagged_in ==
                               "code" else {"to": "mallory"}},
                              {"name": "lookup", "arguments": {"key": "k"}}]},
              {"text": "model saw: {last_results}"}]
    run = start(make_endpoint(script), [ToolRegistration.objects.get(name=name),
                                        tools["lookup"]], policy)

    assert execute(run) == "succeeded", (run.error_type, run.error_message)

    assert STATE.calls == [("lookup", "k")]  # the flagged tool never ran
    refused, looked_up = calls(run)
    assert (refused.tool_name, refused.state, refused.is_error) == (name, "rejected", True)
    assert "requires a person's approval" in (refused.result_text or "")
    assert refused.error_type == "ToolRejectedError"
    assert refused.started_at is not None  # when it was refused
    assert looked_up.state == "succeeded"
    assert "requires a person's approval" in (run.final_text or "")
