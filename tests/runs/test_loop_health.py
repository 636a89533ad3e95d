"""Loop health in a run: a scripted model that repeats a call is told at the policy's
third identical call and stopped at the fifth (LoopDetectedError), every flagged round is
recorded (LoopDetected events, the run's count), a replay of it stops at the same place
with the same texts, per-run overrides change the thresholds and are checked like the
admin form, and a snapshot frozen before the fields existed loads with the defaults."""

from __future__ import annotations

from typing import Any

import pytest

from tests.runs.support import calls, events, execute, rounds, start
from tools_app.engine import LoopHealth, LoopRule
from tools_app.engine.loop.health import NOTE_MARK
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, RunStatus, ToolRegistration
from tools_app.runs.debugger.rerun import ReplayOptions, run_rerun
from tools_app.runs.debugger.timeline import round_views
from tools_app.runs.services import RunRequestError
from tools_app.runs.snapshot.engine import engine_for_snapshot
from tools_app.runs.snapshot.model import PolicySnapshot, RunSnapshot, snapshot_of
from tools_app.runs.store.lifecycle import create_queued

pytestmark = pytest.mark.both

PARIS = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
REPEATING_SCRIPT = [PARIS] * 6 + [{"text": "done"}]
DEFAULT_HEALTH = LoopHealth(repeated_call=LoopRule(3, "tell_model", 5),
                            ping_pong=LoopRule(4, "tell_model", 8),
                            no_progress=LoopRule(3, "note", None))


def repeating_run(make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
                  policy: ErrorPolicy, **kwargs: Any) -> Run:
    run = start(make_endpoint(REPEATING_SCRIPT), [demo_tools["get_weather"]], policy, **kwargs)
    execute(run)
    return run


def flagged(run: Run) -> list[tuple[int, str, str, int]]:
    return [(e.payload["round_index"], e.payload["detector"], e.payload["action"],
             e.payload["count"]) for e in events(run) if e.kind == "loop_detected"]


def test_a_repeated_call_is_told_at_the_third_time_and_stopped_at_the_fifth(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    run = repeating_run(make_endpoint, demo_tools, policy)

    assert run.status == RunStatus.FAILED
    assert run.error_type == "LoopDetectedError"
    assert run.error_message == ("Loop detected in round 5: call 5 of get_weather with the "
                                 "same arguments (the policy stops the run at 5)")
    # The calls of the stopping round never ran; every earlier one did.
    assert len(rounds(run)) == 5
    texts = [c.result_text or "" for c in calls(run)]
    assert len(texts) == 4
    assert [NOTE_MARK in text for text in texts] == [False, False, True, True]
    assert texts[2].split(NOTE_MARK)[1].startswith(
        "This is call 3 of get_weather with these same arguments in this conversation.")
    # Repeated calls (told at 3 and 4, stopped at 5); the same results three rounds
    # running from round 4 on (noted only, by default).
    assert flagged(run) == [(2, "repeated_call", "tell_model", 3),
                            (3, "repeated_call", "tell_model", 4),
                            (3, "no_progress", "note", 3),
                            (4, "repeated_call", "stop", 5),
                            (4, "no_progress", "note", 4)]
    assert run.loop_detections == 5
    assert [e.kind for e in events(run)][-2:] == ["chat_failed", "run_status"]


def test_the_flagged_rounds_carry_their_notes_for_the_page(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    run = repeating_run(make_endpoint, demo_tools, policy)

    notes = {r["index"]: r["loop_notes"] for r in round_views(run)}

    assert notes[0] == notes[1] == []
    [told] = notes[2]
    assert (told["label"], told["action"], told["detail"]) == (
        "repeated call", "tell_model", "call 3 of get_weather with the same arguments")
    assert told["told"].startswith("This is call 3 of get_weather")
    assert [n["action"] for n in notes[4]] == ["stop", "note"]
    assert "stopped the run" in notes[4][0]["outcome"]


def test_a_replay_of_a_flagged_run_stops_at_the_same_place_with_the_same_texts(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    run = repeating_run(make_endpoint, demo_tools, policy)

    replayed = run_rerun(run=run, user=None, mode="as_it_was",
                         replay=ReplayOptions(model="recorded", tools="recorded"))
    execute(replayed)

    assert (replayed.status, replayed.error_type) == (RunStatus.FAILED, "LoopDetectedError")
    # A recorded result carries its note: it is served as it was, not noted twice.
    assert [c.result_text for c in calls(replayed)] == [c.result_text for c in calls(run)]
    assert flagged(replayed) == flagged(run)


def test_calls_that_differ_are_not_flagged(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    cities = ["Paris", "London", "Hangzhou", "Tokyo", "Berlin", "New York"]
    script = [{"tool_calls": [{"name": "get_weather", "arguments": {"city": city}}]}
              for city in cities] + [{"text": "done"}]
    run = start(make_endpoint(script), [demo_tools["get_weather"]], policy)

    assert execute(run) == RunStatus.SUCCEEDED
    assert flagged(run) == []
    assert run.loop_detections == 0
    assert all(NOTE_MARK not in (c.result_text or "") for c in calls(run))


def test_the_policys_own_values_are_frozen_and_used(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    policy.loop_repeat_action = "note"
    policy.loop_repeat_stop_at = None
    policy.loop_no_progress_at = None
    policy.save()

    run = repeating_run(make_endpoint, demo_tools, policy)

    assert run.status == RunStatus.SUCCEEDED
    assert snapshot_of(run).policy.loop_health().repeated_call == LoopRule(3, "note", None)
    assert [(index, action) for index, _, action, _ in flagged(run)] == [
        (2, "note"), (3, "note"), (4, "note"), (5, "note")]
    assert all(NOTE_MARK not in (c.result_text or "") for c in calls(run))


def test_per_run_overrides_change_the_thresholds_for_that_run_only(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    run = repeating_run(make_endpoint, demo_tools, policy, policy_overrides={
        "loop_repeat_at": 2, "loop_repeat_action": "stop", "loop_no_progress_action": "tell_model"})

    frozen = run.snapshot["policy"]
    assert (frozen["loop_repeat_at"], frozen["loop_repeat_action"]) == (2, "stop")
    assert set(snapshot_of(run).policy_changed) == {
        "loop_repeat_at", "loop_repeat_action", "loop_no_progress_action"}
    assert run.error_message.startswith("Loop detected in round 2: call 2 of get_weather")
    policy.refresh_from_db()
    assert (policy.loop_repeat_at, policy.loop_repeat_action) == (3, "tell_model")


@pytest.mark.parametrize(("overrides", "field", "problem"), [
    ({"loop_repeat_action": "ignore"}, "loop_repeat_action", "is not a valid choice"),
    ({"loop_repeat_at": "3"}, "loop_repeat_at", "must be an integer"),
    ({"loop_repeat_at": 1}, "loop_repeat_at", "greater than or equal to 2"),
    ({"loop_ping_pong_at": 2}, "loop_ping_pong_at", "greater than or equal to 3"),
    ({"loop_no_progress_stop_at": 101}, "loop_no_progress_stop_at",
     "less than or equal to 100"),
    ({"loop_repeat_stop_at": 3}, "loop_repeat_stop_at",
     "must be more than the flag threshold (3)"),
    ({"loop_repeat_at": 6}, "loop_repeat_stop_at", "must be more than the flag threshold (6)"),
])
def test_loop_overrides_are_checked_like_the_admin_form(
    weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    overrides: dict[str, Any], field: str, problem: str,
) -> None:
    with pytest.raises(RunRequestError) as refused:
        start(weather_endpoint, [demo_tools["get_weather"]], policy, policy_overrides=overrides)

    assert f"policy_overrides.{field}: " in str(refused.value)
    assert problem in str(refused.value)
    assert not Run.objects.exists()


# -- snapshots frozen before loop health -------------------------------------------------

OLD_POLICY = {"id": 1, "name": "Before loop health", "arguments_error": "rethrow",
              "arguments_error_template": "{error}", "execution_error": "to_model",
              "execution_error_template": "{error}", "hallucinated_tool": "raise",
              "max_round_trips": 100, "default_tool_timeout": None, "parallel": True,
              "max_concurrency": None, "provider_max_retries": 2}


def test_a_policy_frozen_without_the_fields_loads_with_the_defaults_and_keeps_its_shape() -> None:
    policy = PolicySnapshot.model_validate(OLD_POLICY)

    assert policy.loop_health() == DEFAULT_HEALTH
    assert policy.stored() == OLD_POLICY


def test_a_run_frozen_without_the_fields_is_checked_with_the_defaults(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    fresh = start(make_endpoint(REPEATING_SCRIPT), [demo_tools["get_weather"]], policy)
    stored = fresh.snapshot | {"policy": OLD_POLICY}
    run = create_queued(created_by=None, endpoint=None, policy=None, parent=None,
                        title="frozen before loop health", snapshot=stored)

    assert engine_for_snapshot(RunSnapshot.load(stored)).service.loop_health == DEFAULT_HEALTH
    assert execute(run) == RunStatus.FAILED
    assert run.error_type == "LoopDetectedError"
    assert run.snapshot["policy"] == OLD_POLICY
