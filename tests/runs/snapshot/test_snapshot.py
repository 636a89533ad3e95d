"""A run's snapshot is frozen at run_create: later edits never change what it does."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.runs.support import calls, execute, start
from tools_app.models import ErrorPolicy, ModelEndpoint, RunStatus, ToolRegistration
from tools_app.runs.snapshot.model import EndpointSnapshot
from tools_app.tools.example_tools import get_weather

pytestmark = pytest.mark.both

HANGZHOU = json.dumps(get_weather("Hangzhou"), ensure_ascii=False)
PARIS = json.dumps(get_weather("Paris"), ensure_ascii=False)


def test_the_snapshot_freezes_endpoint_tools_policy_and_messages(
    weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    tool = demo_tools["get_weather"]
    run = start(weather_endpoint, [tool], policy, "Weather in two cities?")

    snapshot = run.snapshot
    assert snapshot["endpoint"]["script"] == weather_endpoint.script
    assert snapshot["endpoint"]["kind"] == "scripted"
    [frozen_tool] = snapshot["tools"]
    assert frozen_tool["name"] == "get_weather"
    assert frozen_tool["python_path"] == "tools_app.tools.example_tools.get_weather"
    assert frozen_tool["version_hash"] == tool.version_hash
    assert frozen_tool["json_schema"] == tool.json_schema
    assert snapshot["policy"]["id"] == policy.pk
    assert snapshot["policy"]["max_round_trips"] == policy.max_round_trips
    assert snapshot["messages"] == [{"type": "user", "text": "Weather in two cities?"}]


def test_editing_policy_tool_and_endpoint_after_create_changes_nothing(
    weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    tool = demo_tools["get_weather"]
    run = start(weather_endpoint, [tool], policy)
    frozen = copy.deepcopy(run.snapshot)

    weather_endpoint.script = [{"text": "EDITED SCRIPT"}]
    weather_endpoint.model = "edited-model"
    weather_endpoint.save()
    tool.python_path = "tools_app.tools.example_tools.always_fails"
    tool.description = "edited"
    tool.timeout_seconds = 0.001
    tool.version_hash = "edited"
    tool.save()
    policy.execution_error = "rethrow"
    policy.max_round_trips = 1
    policy.parallel = False
    policy.default_tool_timeout = 0.001
    policy.provider_max_retries = 9
    policy.save()

    run.refresh_from_db()
    assert run.snapshot == frozen


def test_a_run_plays_the_script_it_was_created_with(
    weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    run = start(weather_endpoint, [demo_tools["get_weather"]], policy)
    weather_endpoint.script = [{"text": "EDITED SCRIPT"}]
    weather_endpoint.save()

    assert execute(run) == "succeeded"

    assert run.final_text == f"Here you go: {HANGZHOU}\n{PARIS}"
    assert [c.tool_name for c in calls(run)] == ["get_weather", "get_weather"]


def test_a_run_calls_the_tool_function_it_was_created_with(
    weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    tool = demo_tools["get_weather"]
    run = start(weather_endpoint, [tool], policy)
    tool.python_path = "tools_app.tools.example_tools.always_fails"
    tool.timeout_seconds = 0.001
    tool.save()

    execute(run)

    assert run.status == RunStatus.SUCCEEDED
    assert [c.state for c in calls(run)] == ["succeeded", "succeeded"]
    assert [c.result_text for c in calls(run)] == [HANGZHOU, PARIS]


def test_a_run_follows_the_policy_it_was_created_with(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    endpoint = make_endpoint([
        {"tool_calls": [{"name": "always_fails", "arguments": {"reason": "boom"}}]},
        {"tool_calls": [{"name": "always_fails", "arguments": {"reason": "again"}}]},
        {"text": "model saw: {last_result}"},
    ])
    run = start(endpoint, [demo_tools["always_fails"]], policy)
    policy.execution_error = "rethrow"
    policy.max_round_trips = 1
    policy.save()

    assert execute(run) == "succeeded"

    assert run.final_text == "model saw: RuntimeError: again"
    assert [c.handled_by for c in calls(run)] == ["execution_error_to_model"] * 2


ENDPOINT = {"name": "proxied", "kind": "openai_compatible", "base_url": "http://model.test/v1",
            "model": "m", "api_key_env": "", "stream": False, "extra_headers": {},
            "default_parameters": {}, "script": []}


def endpoint(changes: dict[str, Any]) -> EndpointSnapshot:
    """A frozen endpoint as a version-1 snapshot held it (no proxy_url key)."""
    return EndpointSnapshot.model_validate(ENDPOINT | changes)


@pytest.mark.parametrize(("proxy_url", "environment", "expected"), [
    ("", {}, None),  # the worker's proxy variables decide
    ("http://proxy.corp:3128", {}, "http://proxy.corp:3128"),
    ("env:CORP_PROXY_URL", {"CORP_PROXY_URL": "http://me:pw-1234567@proxy.corp:3128"},
     "http://me:pw-1234567@proxy.corp:3128"),
])
def test_an_endpoints_proxy_reaches_its_model_and_its_credentials_are_redacted(
    monkeypatch: pytest.MonkeyPatch, proxy_url: str, environment: dict[str, str],
    expected: str | None,
) -> None:
    from tools_app.runs.snapshot.engine import chat_model_for

    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    model, secrets = chat_model_for(endpoint({"proxy_url": proxy_url}), max_retries=0)

    assert model.http.config.proxy == expected  # type: ignore[attr-defined]
    if expected and "@" in expected:
        assert expected in secrets
        assert "pw-1234567" in secrets


def test_a_proxy_read_from_an_unset_variable_fails_the_run_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from tools_app.runs.snapshot.engine import chat_model_for

    monkeypatch.delenv("CORP_PROXY_URL", raising=False)
    with pytest.raises(ImproperlyConfigured, match="CORP_PROXY_URL, which is not set"):
        chat_model_for(endpoint({"proxy_url": "env:CORP_PROXY_URL"}), max_retries=0)


def test_a_snapshot_from_before_proxies_still_builds_its_model() -> None:
    from tools_app.runs.snapshot.engine import chat_model_for

    model, _ = chat_model_for(endpoint({}), max_retries=0)  # no proxy_url key at all
    assert model.http.config.proxy is None  # type: ignore[attr-defined]


@pytest.mark.parametrize("config", [
    {"api_key_env": "DATABASE_URL"},
    {"extra_headers": {"X-Api-Key": "env:SECRET_KEY"}},
    {"proxy_url": "env:HOME"},
])
def test_a_credential_from_a_variable_outside_the_allowlist_fails_the_run_unread(
    monkeypatch: pytest.MonkeyPatch, config: dict[str, Any],
) -> None:
    """An endpoint edited to read DATABASE_URL (say) must not send it to its server."""
    from django.core.exceptions import ImproperlyConfigured

    from tools_app.runs.snapshot.engine import chat_model_for

    monkeypatch.setenv("DATABASE_URL", "postgres://user:hunter2@db/prod")
    monkeypatch.setenv("SECRET_KEY", "django-secret")
    with pytest.raises(ImproperlyConfigured, match="AGENTFORGE_SECRET_ENV_ALLOW allows") as err:
        chat_model_for(endpoint(config), max_retries=0)
    assert "hunter2" not in str(err.value)
    assert "django-secret" not in str(err.value)


def test_the_allowlist_is_the_operators_to_widen(
    monkeypatch: pytest.MonkeyPatch, settings: Any,
) -> None:
    from tools_app.runs.snapshot.engine import chat_model_for

    settings.AGENTFORGE_SECRET_ENV_ALLOW = ["LOCAL_MODEL_*"]
    monkeypatch.setenv("LOCAL_MODEL_KEY", "sk-local-123456789")
    _, secrets = chat_model_for(endpoint({"api_key_env": "LOCAL_MODEL_KEY"}),
                                    max_retries=0)
    assert secrets == ("sk-local-123456789",)
