"""Reruns that replay the original's recording: the model and/or the tools answer from
it; where a recorded answer no longer fits, the run says at which round and call and
stops, or goes on live, as asked."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.runs.support import calls, execute, start
from tests.runs.tools_for_tests import ToolState
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, RunEvent, ToolCall, ToolRegistration
from tools_app.runs.debugger.rerun import ReplayOptions, RerunError, run_rerun

pytestmark = pytest.mark.both

SCRIPT = [{"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}},
                          {"name": "transfer", "arguments": {"to": "bob"}}]},
          {"text": "model saw: {last_results}"}]


@pytest.fixture
def original(make_endpoint: Any, tools: dict[str, ToolRegistration],
             policy: ErrorPolicy) -> Run:
    run = start(make_endpoint(SCRIPT), [tools["lookup"], tools["transfer"]], policy,
                "Look k up and pay bob")
    assert execute(run) == "succeeded"
    return run


def replayed(original: Run, *, mode: str = "as_it_was", **options: Any) -> Run:
    again = run_rerun(run=original, user=None, mode=mode,  # type: ignore[arg-type]
                      replay=ReplayOptions(**options))
    execute(again)
    return again


def results(run: Run) -> list[tuple[str, str | None]]:
    return [(c.tool_name, c.result_text) for c in calls(run)]


def test_recorded_model_and_tools_repeat_the_run_executing_nothing(
    original: Run, tool_state: ToolState,
) -> None:
    tool_state.reset()
    ModelEndpoint.objects.filter(pk=original.endpoint_id).update(
        script=[{"text": "a changed script"}])

    again = replayed(original, model="recorded", tools="recorded")

    assert again.status == "succeeded"
    assert again.final_text == original.final_text
    assert results(again) == results(original)
    assert tool_state.calls == []
    assert again.snapshot["rerun"]["replay"] == {"model": "recorded", "tools": "recorded",
                                                 "on_divergence": "stop"}


def _record_other_result(original: Run) -> None:
    """The recording says lookup answered otherwise than it answers now."""
    ToolCall.objects.filter(run=original, tool_name="lookup").update(result_text="value of X")


def test_a_result_that_no_longer_fits_stops_the_run_saying_where(
    original: Run, tool_state: ToolState,
) -> None:
    _record_other_result(original)

    again = replayed(original, model="recorded", tools="live")

    assert again.status == "failed"
    assert again.error_type == "ReplayDivergence"
    assert again.error_message.startswith(
        "The replay left its recording at round 1, call 1 (lookup): the result differs: "
        "recorded 'value of X', now 'value of k'")
    assert again.final_text is None


def test_or_goes_on_live_as_asked(original: Run) -> None:
    _record_other_result(original)

    again = replayed(original, model="recorded", tools="live", on_divergence="live")

    assert again.status == "succeeded"
    assert again.final_text == "model saw: value of k\nsent to bob"
    notes = [e.payload for e in RunEvent.objects.filter(run=again, kind="replay_diverged")]
    assert len(notes) == 1
    assert notes[0]["detail"].startswith("The replay left its recording at round 1, call 1 "
                                         "(lookup)")
    assert notes[0]["detail"].endswith("going on live")


def test_recorded_tools_stop_at_a_call_the_recording_lacks(original: Run) -> None:
    ModelEndpoint.objects.filter(pk=original.endpoint_id).update(script=[
        {"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}},
                        {"name": "transfer", "arguments": {"to": "mallory"}}]},
        {"text": "done"}])

    again = replayed(original, mode="current", model="live", tools="recorded")

    assert again.status == "failed"
    assert again.error_type == "ReplayDivergence"
    assert ("left its recording at round 1, call 2 (transfer): the recording has no call of "
            "transfer with the arguments '{\"to\": \"mallory\"}'") in again.error_message
    stopped = calls(again)[1]
    assert (stopped.error_type, stopped.stopped_run, stopped.handled_by) == (
        "ReplayDivergence", True, "replay")


def test_or_execute_it_live(original: Run, tool_state: ToolState) -> None:
    ModelEndpoint.objects.filter(pk=original.endpoint_id).update(script=[
        {"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}},
                        {"name": "transfer", "arguments": {"to": "mallory"}}]},
        {"text": "done"}])
    tool_state.reset()

    again = replayed(original, mode="current", model="live", tools="recorded",
                     on_divergence="live")

    assert again.status == "succeeded"
    assert tool_state.calls == [("transfer", "mallory")]  # lookup came from the recording
    assert results(again)[1] == ("transfer", "sent to mallory")


def test_mock_tools_answer_a_call_the_recording_lacks(original: Run,
                                                      tool_state: ToolState) -> None:
    ModelEndpoint.objects.filter(pk=original.endpoint_id).update(script=[
        {"tool_calls": [{"name": "transfer", "arguments": {"to": "mallory"}}]},
        {"text": "done"}])
    tool_state.reset()

    again = replayed(original, mode="current", model="live", tools="mock")

    assert again.status == "succeeded"
    assert results(again) == [("transfer", "mock result: the recording has no call of "
                                           "transfer with these arguments")]
    assert tool_state.calls == []


def test_unknown_options_are_refused(original: Run) -> None:
    with pytest.raises(RerunError, match="tools must be one of recorded, live, mock"):
        run_rerun(run=original, user=None, mode="as_it_was",
                  replay=ReplayOptions(tools="fake"))  # type: ignore[arg-type]


@pytest.mark.parametrize("tools_mode", ["recorded", "mock"])
def test_a_recorded_timeout_replays_as_a_timeout(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    tools_mode: str,
) -> None:
    policy.default_tool_timeout = 0.2
    policy.save()
    script = [{"tool_calls": [{"name": "slow_tool", "arguments": {"seconds": 30}}]},
              {"text": "model saw: {last_result}"}]
    slow = start(make_endpoint(script), [tools["slow_tool"]], policy, "Nap")
    assert execute(slow) == "succeeded"
    [timed_out] = calls(slow)
    assert timed_out.state == "timed_out"

    again = replayed(slow, model="recorded", tools=tools_mode)

    assert again.status == "succeeded"
    [replay] = calls(again)
    assert (replay.state, replay.is_error, replay.error_type, replay.error_message,
            replay.result_text) == (
        "timed_out", True, "ToolTimeoutError", timed_out.error_message, timed_out.result_text)
    assert replay.error_message == "Tool 'slow_tool' timed out after 0.2 s"
    assert again.final_text == slow.final_text


def test_a_run_file_and_a_rerun_hold_the_one_recording_shape(original: Run) -> None:
    """Export, a rerun's replay section and the engine's recorded model read the same
    rounds: the run file's rounds are recorded rounds with their audit record added, and
    what a replay stores is exactly what the engine serves from."""
    from tools_app.engine.providers.recorded import RecordedRound
    from tools_app.runs.debugger.run_files import export_run, load_fixture, recording_of
    from tools_app.runs.snapshot.model import snapshot_of

    from_file = load_fixture(json.dumps(export_run(original))).recording()
    from_run = recording_of(original)
    again = run_rerun(run=original, user=None, mode="as_it_was",
                      replay=ReplayOptions(model="recorded", tools="recorded"))
    stored = snapshot_of(Run.objects.get(pk=again.pk)).replay

    assert stored is not None
    assert all(type(r) is RecordedRound for r in stored.rounds)
    as_recorded = [RecordedRound.model_validate(r.model_dump()) for r in from_file]
    assert as_recorded == from_run == stored.rounds
    assert [c.tool_name for c in stored.rounds[0].calls] == ["lookup", "transfer"]
