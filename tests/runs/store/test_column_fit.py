"""Values from outside (a model's tool names and call ids, its finish reason) fit their
columns on every database: PostgreSQL refuses a value longer than a CharField."""

from __future__ import annotations

from typing import Any

import pytest

from tests.runs.support import calls, execute, start
from tools_app.engine.events import (
    RoundStarted,
    ToolCallFinished,
    ToolCallProposed,
    ToolCallStarted,
)
from tools_app.engine.messages import ToolExecutionRequest
from tools_app.models import ErrorPolicy, ToolCall, ToolRegistration
from tools_app.runs.store.leases import claim
from tools_app.runs.store.sanitize import fit_column
from tools_app.runs.worker.recorder import RunRecorder

pytestmark = pytest.mark.both

LONG_NAME = "n" * 500


@pytest.mark.parametrize("length", [0, 199, 200, 201, 5000])
def test_a_value_is_cut_to_its_column_with_the_marker_inside_the_limit(length: int) -> None:
    value = "x" * length

    fitted = fit_column(ToolCall, "call_id", value)

    assert len(fitted) <= 200
    if length <= 200:
        assert fitted == value
    else:
        kept = fitted.split("[+")[0]
        assert fitted == f"{kept}[+{length - len(kept)} chars]"


def test_a_hallucinated_tool_name_longer_than_its_column_is_recorded_and_the_run_goes_on(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    policy.hallucinated_tool = "tell_model"
    policy.save()
    script = [{"tool_calls": [{"name": LONG_NAME, "arguments": {}}]},
              {"text": "model saw: {last_result}"}]
    run = start(make_endpoint(script), [tools["lookup"]], policy)

    assert execute(run) == "succeeded", (run.error_type, run.error_message)

    [call] = calls(run)
    assert call.state == "hallucinated"
    assert len(call.tool_name) <= 200
    assert call.tool_name.startswith("n" * 150)
    assert call.tool_name.endswith(" chars]")
    # The model was told the name it sent, as far as a message names a tool (200
    # characters, marked as cut), whatever the column kept.
    assert f"tool '{LONG_NAME[:200]}...'" in (run.final_text or "")


def test_a_call_id_longer_than_its_column_is_recorded_from_proposal_to_result(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    run = start(make_endpoint([{"text": "unused"}]), [tools["lookup"]], policy)
    token = claim(str(run.pk), "worker-1")
    assert token is not None
    recorder = RunRecorder(str(run.pk), token)
    long_id = "call_" + "i" * 400
    recorder.record(RoundStarted(round_index=0), {})
    request = ToolExecutionRequest(id=long_id, name="lookup", arguments='{"key": "k"}')
    recorder.record(ToolCallProposed(round_index=0, call_index=0, known_tool=True,
                                     request=request), {})
    recorder.record(ToolCallStarted(round_index=0, call_id=long_id, tool_name="lookup"), {})
    recorder.record(ToolCallFinished(round_index=0, call_id=long_id, tool_name="lookup",
                                     outcome="succeeded", text="value of k"),
                    {"result_json": None, "error_details": None})

    [call] = calls(run)
    assert len(call.call_id) <= 200
    assert (call.state, call.result_text, call.attempts) == ("succeeded", "value of k", 1)
