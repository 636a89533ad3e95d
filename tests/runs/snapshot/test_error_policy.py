"""Every ErrorPolicy value changes what the next run does; run_create may override some."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.runs.support import calls, execute, overlaps, rounds, start
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, RunStatus, ToolRegistration
from tools_app.runs.services import RunRequestError
from tools_app.runs.snapshot.engine import engine_for_snapshot
from tools_app.runs.snapshot.model import snapshot_of

pytestmark = pytest.mark.both

BAD_ARGUMENTS_SCRIPT = [
    {"tool_calls": [{"name": "calculator", "arguments": {"expr": "1+1"}}]},
    {"text": "model saw: {last_result}"},
]
FAILING_TOOL_SCRIPT = [
    {"tool_calls": [{"name": "always_fails", "arguments": {"reason": "disk full"}}]},
    {"text": "model saw: {last_result}"},
]
HALLUCINATED_SCRIPT = [
    {"tool_calls": [{"name": "launch_rocket", "arguments": {}}]},
    {"text": "model saw: {last_result}"},
]


def configure(policy: ErrorPolicy, **values: Any) -> ErrorPolicy:
    for name, value in values.items():
        setattr(policy, name, value)
    policy.save()
    return policy


def run_script(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    script: list[dict[str, Any]], tool_names: list[str], **kwargs: Any,
) -> Run:
    run = start(make_endpoint(script), [tools[n] for n in tool_names], policy, **kwargs)
    execute(run)
    return run


# -- arguments_error -------------------------------------------------------------------


def test_arguments_error_rethrow_stops_the_run(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    configure(policy, arguments_error="rethrow")

    run = run_script(make_endpoint, demo_tools, policy, BAD_ARGUMENTS_SCRIPT, ["calculator"])

    assert run.status == RunStatus.FAILED
    assert run.error_type == "ToolArgumentsError"
    assert "expression" in run.error_message
    [call] = calls(run)
    assert call.state == "arguments_error"
    assert call.stopped_run is True
    assert call.handled_by == "rethrow_arguments_error"
    assert call.result_text is None
    assert len(rounds(run)) == 1  # the model was not asked again


def test_arguments_error_to_model_sends_the_policy_template(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    configure(policy, arguments_error="to_model",
              arguments_error_template="BAD ARGS for {tool} ({arguments}): {error}")

    run = run_script(make_endpoint, demo_tools, policy, BAD_ARGUMENTS_SCRIPT, ["calculator"])

    assert run.status == RunStatus.SUCCEEDED
    [call] = calls(run)
    assert call.state == "arguments_error"
    assert call.stopped_run is False
    assert call.handled_by == "policy_arguments_to_model"
    assert call.result_text.startswith(
        "BAD ARGS for calculator ({\"expr\": \"1+1\"}): Invalid arguments for tool 'calculator'")
    assert "expression" in call.result_text
    assert run.final_text == f"model saw: {call.result_text}"


# -- execution_error -------------------------------------------------------------------


def test_execution_error_to_model_with_the_default_template_sends_the_error(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    configure(policy, execution_error="to_model")

    run = run_script(make_endpoint, demo_tools, policy, FAILING_TOOL_SCRIPT, ["always_fails"])

    assert run.status == RunStatus.SUCCEEDED
    assert run.final_text == "model saw: RuntimeError: disk full"


def test_execution_error_to_model_sends_the_policy_template(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    configure(policy, execution_error="to_model",
              execution_error_template="Tool {tool} failed: {error}. Try something else.")

    run = run_script(make_endpoint, demo_tools, policy, FAILING_TOOL_SCRIPT, ["always_fails"])

    assert run.status == RunStatus.SUCCEEDED
    [call] = calls(run)
    assert call.handled_by == "policy_execution_to_model"
    assert call.result_text == (
        "Tool always_fails failed: RuntimeError: disk full. Try something else.")
    assert run.final_text == f"model saw: {call.result_text}"


def test_execution_error_rethrow_stops_the_run(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    configure(policy, execution_error="rethrow")

    run = run_script(make_endpoint, demo_tools, policy, FAILING_TOOL_SCRIPT, ["always_fails"])

    assert run.status == RunStatus.FAILED
    assert run.error_type == "ToolExecutionError"
    assert run.error_message == "RuntimeError: disk full"
    [call] = calls(run)
    assert (call.state, call.stopped_run, call.handled_by) == (
        "execution_error", True, "policy_execution_rethrow")
    assert len(rounds(run)) == 1


# -- hallucinated_tool -----------------------------------------------------------------


def test_hallucinated_tool_raise_stops_the_run(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    configure(policy, hallucinated_tool="raise")

    run = run_script(make_endpoint, demo_tools, policy, HALLUCINATED_SCRIPT, ["calculator"])

    assert run.status == RunStatus.FAILED
    assert run.error_type == "HallucinatedToolError"
    assert "launch_rocket" in run.error_message
    [call] = calls(run)
    assert (call.state, call.stopped_run) == ("hallucinated", True)


def test_a_registered_tool_not_offered_to_the_run_is_said_to_be_not_offered(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    configure(policy, hallucinated_tool="raise")

    run = run_script(make_endpoint, demo_tools, policy, FAILING_TOOL_SCRIPT,
                     ["calculator", "get_weather"])

    assert ToolRegistration.objects.filter(name="always_fails").exists()
    assert run.status == RunStatus.FAILED
    assert run.error_type == "HallucinatedToolError"
    assert run.error_message == (
        "The model requested tool 'always_fails', which is not one of the tools offered to "
        "this run (offered: calculator, get_weather)")


def test_hallucinated_tool_tell_model_lists_the_available_tools(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    configure(policy, hallucinated_tool="tell_model")

    run = run_script(make_endpoint, demo_tools, policy, HALLUCINATED_SCRIPT,
                     ["calculator", "get_weather"])

    assert run.status == RunStatus.SUCCEEDED
    expected = ("Error: tool 'launch_rocket' is not one of the tools offered to this run. "
                "Offered tools: calculator, get_weather")
    assert run.final_text == f"model saw: {expected}"
    [call] = calls(run)
    assert (call.state, call.is_error, call.result_text) == ("hallucinated", True, expected)


# -- max_round_trips -------------------------------------------------------------------


LOOPING_SCRIPT = [
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i}+1"}}]}
    for i in range(6)
] + [{"text": "finally done"}]


def test_max_round_trips_stops_a_looping_model(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    configure(policy, max_round_trips=3)

    run = run_script(make_endpoint, demo_tools, policy, LOOPING_SCRIPT, ["calculator"])

    assert run.status == RunStatus.FAILED
    assert run.error_type == "MaxRoundTripsExceededError"
    assert "3 tool-calling round trips" in run.error_message
    assert [c.result_text for c in calls(run)] == ["1", "2", "3"]  # 3 rounds of tools ran
    assert len(rounds(run)) == 4  # the 4th answer still asked for tools: refused


def test_a_higher_max_round_trips_lets_the_same_script_finish(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    configure(policy, max_round_trips=6)

    run = run_script(make_endpoint, demo_tools, policy, LOOPING_SCRIPT, ["calculator"])

    assert run.status == RunStatus.SUCCEEDED
    assert run.final_text == "finally done"
    assert len(calls(run)) == 6


# -- default_tool_timeout --------------------------------------------------------------


SLOW_SCRIPT = [
    {"tool_calls": [{"name": "slow_tool", "arguments": {"seconds": 30}}]},
    {"text": "model saw: {last_result}"},
]


def test_default_tool_timeout_times_out_a_slow_tool(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    configure(policy, default_tool_timeout=0.2)

    run = run_script(make_endpoint, demo_tools, policy, SLOW_SCRIPT, ["slow_tool"])

    assert run.status == RunStatus.SUCCEEDED
    [call] = calls(run)
    assert call.state == "timed_out"
    assert call.is_error is True
    assert call.error_type == "ToolTimeoutError"
    assert call.result_text == "Tool 'slow_tool' timed out after 0.2 s"
    assert run.final_text == "model saw: Tool 'slow_tool' timed out after 0.2 s"


def test_without_a_default_timeout_the_slow_tool_finishes(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    configure(policy, default_tool_timeout=None)
    script = [{"tool_calls": [{"name": "slow_tool", "arguments": {"seconds": 0.3}}]},
              {"text": "model saw: {last_result}"}]

    run = run_script(make_endpoint, demo_tools, policy, script, ["slow_tool"])

    [call] = calls(run)
    assert call.state == "succeeded"
    assert run.final_text == "model saw: Slept 0.3 s"


# -- parallel and max_concurrency ------------------------------------------------------


FOUR_SLOW_CALLS = [
    {"tool_calls": [{"name": "slow_tool", "arguments": {"seconds": 0.5}}] * 4},
    {"text": "done"},
]


def test_parallel_runs_a_rounds_calls_at_the_same_time(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    configure(policy, parallel=True, max_concurrency=None)

    run = run_script(make_endpoint, demo_tools, policy, FOUR_SLOW_CALLS, ["slow_tool"])

    assert run.status == RunStatus.SUCCEEDED
    assert overlaps(calls(run)) == 4


def test_parallel_off_runs_the_calls_one_after_another(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    configure(policy, parallel=False)

    run = run_script(make_endpoint, demo_tools, policy, FOUR_SLOW_CALLS, ["slow_tool"])

    call_rows = calls(run)
    assert overlaps(call_rows) == 1
    for earlier, later in itertools.pairwise(call_rows):
        assert later.started_at >= earlier.finished_at  # in request order


def test_max_concurrency_caps_how_many_calls_overlap(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    configure(policy, parallel=True, max_concurrency=2)

    run = run_script(make_endpoint, demo_tools, policy, FOUR_SLOW_CALLS, ["slow_tool"])

    assert run.status == RunStatus.SUCCEEDED
    assert overlaps(calls(run)) == 2


# -- provider_max_retries --------------------------------------------------------------


def test_provider_max_retries_is_frozen_into_the_snapshot(
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    configure(policy, provider_max_retries=7)
    endpoint = ModelEndpoint.objects.create(
        name="local", kind="openai_compatible", base_url="http://127.0.0.1:9/v1", model="m")
    run = start(endpoint, [demo_tools["calculator"]], policy)
    configure(policy, provider_max_retries=1)

    run.refresh_from_db()
    assert run.snapshot["policy"]["provider_max_retries"] == 7
    model = engine_for_snapshot(snapshot_of(run)).model
    assert model.http.retry.max_retries == 7  # type: ignore[attr-defined]


# -- policy_overrides ------------------------------------------------------------------


def test_policy_overrides_apply_to_this_run_only(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    configure(policy, parallel=True, max_round_trips=100)
    script = [{"tool_calls": [{"name": "slow_tool", "arguments": {"seconds": 0.2}}] * 2},
              *FOUR_SLOW_CALLS]

    run = run_script(make_endpoint, demo_tools, policy, script, ["slow_tool"],
                     policy_overrides={"parallel": False, "max_round_trips": 1})

    assert (run.snapshot["policy"]["parallel"], run.snapshot["policy"]["max_round_trips"]) == (
        False, 1)
    assert run.status == RunStatus.FAILED
    assert run.error_type == "MaxRoundTripsExceededError"
    first_round = [c for c in calls(run) if c.round.index == 0]
    assert len(first_round) == 2
    assert overlaps(first_round) == 1
    policy.refresh_from_db()
    assert (policy.parallel, policy.max_round_trips) == (True, 100)


def test_policy_override_keys_a_run_may_not_change_are_refused_by_name(
    weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    with pytest.raises(RunRequestError) as refused:
        start(weather_endpoint, [demo_tools["get_weather"]], policy,
              policy_overrides={"parallel": False, "bogus": 1, "name": "Other", "id": 7,
                                "is_default": True})

    message = str(refused.value)
    for field in ("bogus", "name", "id", "is_default"):
        assert f"policy_overrides.{field}: cannot be overridden per run" in message
    assert "policy_overrides.parallel" not in message
    assert not Run.objects.exists()


@pytest.mark.parametrize(("overrides", "field", "problem"), [
    ({"max_round_trips": 0}, "max_round_trips", "greater than or equal to 1"),
    ({"max_round_trips": 1001}, "max_round_trips", "less than or equal to 1000"),
    ({"max_round_trips": "3"}, "max_round_trips", "must be an integer"),
    ({"max_round_trips": 2.5}, "max_round_trips", "must be an integer"),
    ({"max_round_trips": True}, "max_round_trips", "must be an integer"),
    ({"provider_max_retries": 100000}, "provider_max_retries", "less than or equal to 10"),
    ({"max_concurrency": 0}, "max_concurrency", "greater than or equal to 1"),
    ({"default_tool_timeout": 0}, "default_tool_timeout", "greater than or equal to 0.001"),
    ({"default_tool_timeout": "1"}, "default_tool_timeout", "must be an integer or a number"),
    ({"parallel": "no"}, "parallel", "must be a boolean"),
    ({"execution_error": "explode"}, "execution_error", "is not a valid choice"),
    ({"execution_error_template": "{error:>300000000}"}, "execution_error_template",
     "Unknown placeholder {error:>300000000}"),
    ({"arguments_error_template": "{error!r}"}, "arguments_error_template",
     "Unknown placeholder {error!r}"),
    ({"execution_error_template": "{secret}"}, "execution_error_template",
     "Unknown placeholder {secret}"),
    ({"execution_error_template": "{error"}, "execution_error_template", "Not a valid template"),
    ({"parallel": False, "max_concurrency": 4}, "max_concurrency",
     "only meaningful when calls run in parallel"),
    ({"default_tool_timeout": float("nan")}, "default_tool_timeout", "must be a finite number"),
    ({"default_tool_timeout": float("inf")}, "default_tool_timeout", "must be a finite number"),
    ({"execution_error_template": "{error}\x00"}, "execution_error_template", "NUL character"),
])
def test_policy_overrides_are_validated_like_the_admin_form(
    weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    overrides: dict[str, Any], field: str, problem: str,
) -> None:
    with pytest.raises(RunRequestError) as refused:
        start(weather_endpoint, [demo_tools["get_weather"]], policy, policy_overrides=overrides)

    assert f"policy_overrides.{field}: " in str(refused.value)
    assert problem in str(refused.value)
    assert not Run.objects.exists()


def test_valid_policy_overrides_are_frozen_into_the_run(
    weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    run = start(weather_endpoint, [demo_tools["get_weather"]], policy, policy_overrides={
        "provider_max_retries": 10, "max_concurrency": 2, "default_tool_timeout": 1.5,
        "execution_error_template": "{tool} failed: {error}", "max_round_trips": None})

    frozen = run.snapshot["policy"]
    assert (frozen["provider_max_retries"], frozen["max_concurrency"],
            frozen["default_tool_timeout"], frozen["execution_error_template"]) == (
        10, 2, 1.5, "{tool} failed: {error}")
    assert frozen["max_round_trips"] == policy.max_round_trips
    assert (frozen["name"], frozen["id"]) == (policy.name, policy.pk)


@pytest.mark.parametrize(("how", "error"), [("exit", "SystemExit: 3"),
                                            ("keyboard", "KeyboardInterrupt")])
def test_a_tool_that_raises_systemexit_or_keyboardinterrupt_is_an_execution_error(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    how: str, error: str,
) -> None:
    """Not Exception subclasses, but still only a tool failing: the run must go on (and
    the worker's event loop must not stop with it)."""
    script = [{"tool_calls": [{"name": "exits", "arguments": {"how": how}}]},
              {"text": "model saw: {last_result}"}]
    run = start(make_endpoint(script), [tools["exits"]], policy)

    assert execute(run) == "succeeded", (run.error_type, run.error_message)

    [call] = calls(run)
    assert call.state == "execution_error"
    assert call.error_message.startswith(error)
