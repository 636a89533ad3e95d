"""Limits on what a run request may ask for, checked where every run starts
(services.run_create, fork): error-policy templates (size and placeholders, and the
formatted text capped for a policy stored before the limits), request parameters
(custom keys per provider, max_output_tokens and sampling ranges), and the model,
which only staff may change."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser

from tests.runs.support import calls, execute
from tools_app.engine import ChatRequestParameters
from tools_app.engine.errors import ERROR_TEXT_LIMIT
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, RunStatus, ToolRegistration
from tools_app.runs.debugger.fork import ForkConfig, ForkError, run_fork
from tools_app.runs.services import RunRequestError, conversation, run_create

pytestmark = pytest.mark.both

ATTACK = "{arguments}" * 90_000
FAILING_TOOL_SCRIPT = [
    {"tool_calls": [{"name": "always_fails", "arguments": {"reason": "x" * 2_000}}]},
    {"text": "done"},
]


def start(endpoint: ModelEndpoint, tools: list[ToolRegistration], policy: ErrorPolicy, *,
          user: AbstractUser | None = None, **kwargs: Any) -> Run:
    return run_create(user=user, endpoint=endpoint, tools=tools, policy=policy,
                      messages=conversation(user_message="Please help"), **kwargs)


def refusal(endpoint: ModelEndpoint, tools: list[ToolRegistration], policy: ErrorPolicy,
            **kwargs: Any) -> RunRequestError:
    with pytest.raises(RunRequestError) as refused:
        start(endpoint, tools, policy, **kwargs)
    assert not Run.objects.exists()
    return refused.value


# -- templates -------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["execution_error_template", "arguments_error_template"])
def test_the_90000_placeholder_template_is_refused(
    weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy, field: str,
) -> None:
    error = refusal(weather_endpoint, [demo_tools["get_weather"]], policy,
                    policy_overrides={field: ATTACK})

    assert (error.field, list(error.problems)) == ("policy_overrides", [field])
    assert f"policy_overrides.{field}: At most 2,000 characters" in str(error)


@pytest.mark.parametrize(("template", "problem"), [
    ("x" * 2_001, "At most 2,000 characters (this one has 2,001)"),
    ("{error}" * 11, "At most 10 placeholders (this one has 11)"),
    ("{tool}" * 11, "At most 10 placeholders (this one has 11)"),
])
def test_a_template_past_a_limit_is_refused(
    weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy, template: str, problem: str,
) -> None:
    error = refusal(weather_endpoint, [demo_tools["get_weather"]], policy,
                    policy_overrides={"execution_error_template": template})

    assert f"policy_overrides.execution_error_template: {problem}" in str(error)


@pytest.mark.parametrize("template", [
    "{error}" * 10,
    "{arguments}" * 10 + "x" * (2_000 - len("{arguments}") * 10),
    "x" * 2_000,
])
def test_a_template_at_the_limits_is_accepted(
    weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy, template: str,
) -> None:
    run = start(weather_endpoint, [demo_tools["get_weather"]], policy,
                policy_overrides={"execution_error_template": template})

    assert run.snapshot["policy"]["execution_error_template"] == template


def test_a_stored_oversized_template_is_capped_when_it_formats(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    # Saved with the ORM, as a policy from before the limits was: never validated.
    ErrorPolicy.objects.filter(pk=policy.pk).update(execution_error="to_model",
                                                    execution_error_template=ATTACK)
    policy.refresh_from_db()

    run = start(make_endpoint(FAILING_TOOL_SCRIPT), [demo_tools["always_fails"]], policy)
    assert execute(run) == RunStatus.SUCCEEDED, run.error_message

    [call] = calls(run)
    assert len(call.result_text) == ERROR_TEXT_LIMIT
    assert call.result_text.startswith('{"reason": "xxx')
    assert call.result_text.endswith("[... cut: error text limited to 65,536 characters]")


# -- parameters ------------------------------------------------------------------------


@pytest.fixture
def endpoints(db: None) -> dict[str, ModelEndpoint]:
    """One endpoint of each real provider kind (no run here reaches it)."""
    models = {"openai": "gpt-4o-mini", "openai_compatible": "llama3.1",
              "anthropic": "claude-sonnet-4-5", "gemini": "gemini-2.5-flash"}
    return {kind: ModelEndpoint.objects.create(name=kind, kind=kind, model=model)
            for kind, model in models.items()}


FORBIDDEN = ["model", "messages", "input", "tools", "tool_choice", "n", "stream",
             "max_tokens", "system", "contents"]


# An allowed key beside the forbidden one: only the forbidden one is named.
ALLOWED: dict[str, dict[str, Any]] = {
    "openai": {"seed": 1}, "openai_compatible": {"top_k": 4}, "anthropic": {"top_k": 4},
    "gemini": {"generationConfig": {"seed": 1}}}


@pytest.mark.parametrize("kind", sorted(ALLOWED))
@pytest.mark.parametrize("key", FORBIDDEN)
def test_a_forbidden_custom_key_is_refused_by_name(
    endpoints: dict[str, ModelEndpoint], demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy, kind: str, key: str,
) -> None:
    error = refusal(endpoints[kind], [demo_tools["get_weather"]], policy,
                    parameters=ChatRequestParameters(custom={key: "x"} | ALLOWED[kind]))

    assert (error.field, list(error.problems)) == ("parameters", [f"custom.{key}"])
    assert f"parameters.custom.{key}: not allowed for {kind} endpoints" in str(error)


def test_the_reported_attack_is_refused_key_by_key(
    endpoints: dict[str, ModelEndpoint], demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy,
) -> None:
    custom = {"model": "expensive-model-xl", "n": 64, "max_tokens": 1_000_000}

    error = refusal(endpoints["openai"], [demo_tools["get_weather"]], policy,
                    parameters=ChatRequestParameters(custom=custom))

    assert sorted(error.problems) == ["custom.max_tokens", "custom.model", "custom.n"]


@pytest.mark.parametrize("tokens", [-1, 0, 1_000_001, 10**12])
def test_max_output_tokens_out_of_bounds_is_refused(
    endpoints: dict[str, ModelEndpoint], demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy, tokens: int,
) -> None:
    error = refusal(endpoints["openai"], [demo_tools["get_weather"]], policy,
                    parameters=ChatRequestParameters(max_output_tokens=tokens))

    assert "parameters.max_output_tokens: must be from 1 to 1,000,000" in str(error)


def test_temperature_follows_the_provider_range(
    endpoints: dict[str, ModelEndpoint], demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy,
) -> None:
    hot = ChatRequestParameters(temperature=1.5, max_output_tokens=1_000_000)

    start(endpoints["openai"], [demo_tools["get_weather"]], policy, parameters=hot)
    Run.objects.all().delete()
    error = refusal(endpoints["anthropic"], [demo_tools["get_weather"]], policy,
                    parameters=hot)

    assert "parameters.temperature: must be a number from 0 to 1" in str(error)


def test_a_non_staff_user_cannot_change_the_model(
    endpoints: dict[str, ModelEndpoint], demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy, bob: AbstractUser,
) -> None:
    with pytest.raises(RunRequestError) as refused:
        start(endpoints["openai"], [demo_tools["get_weather"]], policy, user=bob,
              parameters=ChatRequestParameters(model_name="expensive-model-xl"))

    assert list(refused.value.problems) == ["model_name"]
    assert "parameters.model_name: only staff may run another model" in str(refused.value)
    assert not Run.objects.exists()


def test_the_endpoints_own_model_and_staff_changes_are_accepted(
    endpoints: dict[str, ModelEndpoint], demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy, bob: AbstractUser, alice: AbstractUser,
) -> None:
    same = ChatRequestParameters(model_name="gpt-4o-mini")
    other = ChatRequestParameters(model_name="gpt-4.1")

    mine = start(endpoints["openai"], [demo_tools["get_weather"]], policy, user=bob,
                 parameters=same)
    staff = start(endpoints["openai"], [demo_tools["get_weather"]], policy, user=alice,
                  parameters=other)

    assert mine.snapshot["parameters"]["model_name"] == "gpt-4o-mini"
    assert staff.snapshot["parameters"]["model_name"] == "gpt-4.1"


def test_a_fork_checks_its_parameters_like_a_new_run(
    make_endpoint: Any, endpoints: dict[str, ModelEndpoint],
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy, bob: AbstractUser,
) -> None:
    run = start(make_endpoint([{"text": "hi"}]), [demo_tools["get_weather"]], policy,
                user=bob)
    execute(run)

    for config, path in [
        (ForkConfig(parameters=ChatRequestParameters(custom={"messages": []})),
         "custom.messages"),
        (ForkConfig(parameters=ChatRequestParameters(model_name="expensive-model-xl")),
         "model_name"),
        (ForkConfig(endpoint=endpoints["anthropic"],
                    parameters=ChatRequestParameters(temperature=1.5)), "temperature"),
    ]:
        with pytest.raises(ForkError) as refused:
            run_fork(run=run, user=bob, round_number=1, config=config)
        assert refused.value.field == "parameters"
        assert f"parameters.{path}: " in str(refused.value)
    assert Run.objects.count() == 1
