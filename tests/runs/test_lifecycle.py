"""A run from run_create to its end with the scripted model and the demo tools."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.runs.support import assert_seqs_gapless, calls, events, execute, kinds, rounds, start
from tools_app.models import ErrorPolicy, RunEvent, RunStatus, ToolRegistration
from tools_app.tools.example_tools import get_weather

pytestmark = pytest.mark.both

HANGZHOU = json.dumps(get_weather("Hangzhou"), ensure_ascii=False)
PARIS = json.dumps(get_weather("Paris"), ensure_ascii=False)


def test_run_create_stores_a_queued_run_with_its_first_event(
    weather_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: Any
) -> None:
    run = start(weather_endpoint, [demo_tools["get_weather"]], policy, "Weather please?")

    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    assert run.title == "Weather please?"
    assert (run.lease_token, run.lease_owner, run.started_at) == (0, "", None)
    [event] = RunEvent.objects.filter(run=run)
    assert (event.seq, event.kind, event.payload) == (1, "run_status", {"status": "queued"})
    assert run.last_seq == 1


def test_a_scripted_run_succeeds_with_final_text_and_totals(
    weather_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: Any
) -> None:
    run = start(weather_endpoint, [demo_tools["get_weather"]], policy)

    assert execute(run) == "succeeded"

    assert run.status == RunStatus.SUCCEEDED
    assert run.final_text == f"Here you go: {HANGZHOU}\n{PARIS}"
    assert (run.error_type, run.error_message) == ("", "")
    assert (run.rounds_count, run.tool_calls_count, run.errors_count) == (2, 2, 0)
    round_rows = rounds(run)
    assert run.input_tokens == sum(r.input_tokens or 0 for r in round_rows) > 0
    assert run.output_tokens == sum(r.output_tokens or 0 for r in round_rows) > 0
    assert run.total_tokens == run.input_tokens + run.output_tokens
    assert run.wall_ms is not None
    assert run.wall_ms > 0
    assert run.started_at is not None
    assert run.finished_at is not None
    assert run.finished_at >= run.started_at
    assert (run.lease_owner, run.lease_expires_at) == ("", None)


def test_each_round_stores_the_model_response(
    weather_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: Any
) -> None:
    run = start(weather_endpoint, [demo_tools["get_weather"]], policy)
    execute(run)

    first, last = rounds(run)
    assert [first.index, last.index] == [0, 1]
    assert {first.status, last.status} == {"responded"}
    assert first.finish_reason == "tool_execution"
    requested = first.response["ai_message"]["tool_execution_requests"]
    assert [(r["name"], json.loads(r["arguments"])) for r in requested] == [
        ("get_weather", {"city": "Hangzhou"}), ("get_weather", {"city": "Paris"})]
    assert first.ai_text is None
    assert last.finish_reason == "stop"
    assert last.ai_text == run.final_text
    assert last.response["ai_message"]["text"] == run.final_text
    for round_ in (first, last):
        assert round_.latency_ms is not None
        assert round_.latency_ms >= 0
        assert round_.started_at is not None
        assert round_.finished_at is not None
        assert round_.finished_at >= round_.started_at


def test_each_tool_call_stores_its_result_and_timing(
    weather_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: Any
) -> None:
    run = start(weather_endpoint, [demo_tools["get_weather"]], policy)
    execute(run)

    hangzhou, paris = calls(run)
    assert [(c.call_index, c.call_id, c.tool_name) for c in (hangzhou, paris)] == [
        (0, "call_0_0", "get_weather"), (1, "call_0_1", "get_weather")]
    assert hangzhou.arguments == {"city": "Hangzhou"}
    assert hangzhou.arguments_raw == '{"city": "Hangzhou"}'
    assert (hangzhou.result_text, paris.result_text) == (HANGZHOU, PARIS)
    assert hangzhou.result_json == get_weather("Hangzhou")
    for call in (hangzhou, paris):
        assert call.state == "succeeded"
        assert call.is_error is False
        assert (call.handled_by, call.error_type, call.stopped_run) == ("", "", False)
        assert call.attempts == 1
        assert call.duration_ms is not None
        assert call.duration_ms >= 0
        assert call.started_at is not None
        assert call.finished_at is not None
        assert call.finished_at >= call.started_at
        assert call.round.index == 0


def test_a_failing_tool_is_recorded_with_the_handler_that_answered(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: Any
) -> None:
    endpoint = make_endpoint([
        {"tool_calls": [{"name": "always_fails", "arguments": {"reason": "disk full"}},
                        {"name": "calculator", "arguments": {"expression": "6*7"}}]},
        {"text": "Results: {last_results}"},
    ])
    run = start(endpoint, [demo_tools["always_fails"], demo_tools["calculator"]], policy)

    assert execute(run) == "succeeded"

    failed, computed = calls(run)
    assert failed.state == "execution_error"
    assert failed.is_error is True
    assert failed.error_type == "ToolExecutionError"
    assert failed.error_message == "RuntimeError: disk full"
    assert failed.handled_by == "execution_error_to_model"
    assert failed.stopped_run is False
    assert failed.result_text == "RuntimeError: disk full"
    assert failed.result_json is None
    assert "RuntimeError: disk full" in failed.traceback
    assert (computed.state, computed.result_text, computed.result_json) == ("succeeded", "42", 42)
    assert run.final_text == "Results: RuntimeError: disk full\n42"
    assert (run.tool_calls_count, run.errors_count) == (2, 1)


def test_events_have_gapless_seqs_and_follow_the_loop_in_order(
    weather_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: Any
) -> None:
    run = start(weather_endpoint, [demo_tools["get_weather"]], policy,
                policy_overrides={"parallel": False})
    execute(run)

    assert_seqs_gapless(run)
    assert kinds(run) == [
        "run_status",
        "chat_started",
        "round_started", "model_request_sent", "model_response_received",
        "tool_call_proposed", "tool_call_proposed",
        "tool_call_started", "tool_call_finished",
        "tool_call_started", "tool_call_finished",
        "round_started", "model_request_sent", "model_response_received",
        "chat_finished",
        "run_status",
    ]
    all_events = events(run)
    assert [e.payload["status"] for e in all_events if e.kind == "run_status"] == [
        "queued", "succeeded"]
    assert all_events[-1].payload["final_text"] == run.final_text
    finished = next(e for e in all_events if e.kind == "chat_finished")
    assert (finished.payload["rounds"], finished.payload["tool_calls"]) == (2, 2)


def test_a_parallel_round_records_every_call_between_proposal_and_next_round(
    weather_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: Any
) -> None:
    run = start(weather_endpoint, [demo_tools["get_weather"]], policy)  # parallel by default
    execute(run)

    assert_seqs_gapless(run)
    names = kinds(run)
    middle = names[names.index("model_response_received") + 1:names.index("round_started", 3)]
    assert sorted(middle) == sorted(["tool_call_proposed"] * 2 + ["tool_call_started"] * 2
                                    + ["tool_call_finished"] * 2)
    assert middle[:2] == ["tool_call_proposed", "tool_call_proposed"]


def test_a_run_that_already_finished_is_not_executed_again(
    weather_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: Any
) -> None:
    run = start(weather_endpoint, [demo_tools["get_weather"]], policy)
    execute(run)
    last_seq = run.last_seq

    assert execute(run) is None

    assert run.status == RunStatus.SUCCEEDED
    assert run.last_seq == last_seq
    assert len(calls(run)) == 2



def test_a_broken_channel_layer_never_fails_a_run(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """Live notifications are best effort (the database is the truth): a channel layer
    that fails (Redis down) is logged, and the run goes on and is stored completely."""
    from tools_app.live import notify as broadcast
    from tools_app.live import watching

    class BrokenLayer:
        async def group_send(self, group: str, message: dict[str, Any]) -> None:
            raise ConnectionError("Redis is down")

    monkeypatch.setattr(broadcast, "get_channel_layer", BrokenLayer)
    # The same layer decides who watches (a layer it cannot ask is sent to): on Redis an
    # unwatched run would otherwise never reach the broken layer at all.
    monkeypatch.setattr(watching, "get_channel_layer", BrokenLayer)
    run = start(make_endpoint([{"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}]},
                               {"text": "model saw: {last_result}"}]),
                [tools["lookup"]], policy)

    assert execute(run) == "succeeded"

    assert run.final_text == "model saw: value of k"
    assert "could not send to group run." in caplog.text
    assert_seqs_gapless(run)
