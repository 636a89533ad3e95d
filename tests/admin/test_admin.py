"""The admin: every page loads, the audit log is read-only, edits are validated and
policy edits leave a revision, and no API key ever reaches a page."""

import hashlib
import json
import re
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.db.models import Model
from django.test import Client
from django.urls import reverse

from tests.admin.support import form_errors, tool_data, url
from tools_app.admin import POLICY_FIELDS
from tools_app.models import (
    ApiToken,
    CallReexecution,
    ErrorPolicy,
    ModelEndpoint,
    PolicyRevision,
    Round,
    Run,
    RunEvent,
    ToolCall,
    ToolRegistration,
)
from tools_app.tools.registry import compute_version_hash
from tools_app.web.api.tokens import create_token, user_for_token

pytestmark = pytest.mark.django_db

EDITABLE: list[type[Model]] = [ModelEndpoint, ToolRegistration, ErrorPolicy, ApiToken]
READ_ONLY: list[type[Model]] = [Run, Round, ToolCall, RunEvent, PolicyRevision, CallReexecution]
KEY_VARIABLE = "AGENTFORGE_TEST_CANARY_API_KEY"


@pytest.fixture
def world(alice: AbstractUser) -> dict[type[Model], Model]:
    """One row of every model the admin shows."""
    endpoint = ModelEndpoint.objects.create(
        name="Local llama", kind="openai_compatible", model="llama3.1",
        base_url="http://localhost:11434/v1", api_key_env=KEY_VARIABLE,
        capability_report={"parallel_tool_calls": True, "note": "<script>x</script>"},
    )
    tool = ToolRegistration(
        name="get_weather", python_path="tools_app.tools.example_tools.get_weather",
        description="Weather", json_schema={"type": "object", "properties": {}},
    )
    tool.version_hash = compute_version_hash(tool)
    tool.save()
    policy = ErrorPolicy.objects.create(name="Default", is_default=True)
    revision = PolicyRevision.objects.create(
        policy=policy, changed_by=alice, changes={"max_round_trips": [100, 5]}
    )
    run = Run.objects.create(
        created_by=alice, endpoint=endpoint, policy=policy, title="Demo run", status="failed",
        snapshot={"endpoint": {"api_key_env": KEY_VARIABLE}}, rounds_count=1,
        tool_calls_count=1, errors_count=1,
    )
    round_ = Round.objects.create(run=run, index=0, ai_text="Checking the weather")
    call = ToolCall.objects.create(
        run=run, round=round_, call_index=0, call_id="call_0_0", tool_name="get_weather",
        arguments_raw='{"city": "Hangzhou"}', state="succeeded", result_text="rain",
    )
    event = RunEvent.objects.create(run=run, seq=1, kind="round_started", payload={"index": 0})
    reexecution = CallReexecution.objects.create(
        run=run, tool_call=call, number=1, tool_name="get_weather", tool_kind="python",
        arguments={"city": "Paris"}, state="succeeded", result_text="sun",
        requested_by=alice, requested_by_label="alice")
    token, _ = create_token(alice, "laptop")
    return {ModelEndpoint: endpoint, ToolRegistration: tool, ErrorPolicy: policy,
            PolicyRevision: revision, Run: run, Round: round_, ToolCall: call,
            RunEvent: event, CallReexecution: reexecution, ApiToken: token}


# -- every page loads ------------------------------------------------------------------


@pytest.mark.parametrize("model", EDITABLE + READ_ONLY, ids=lambda m: m.__name__)
def test_changelist_search_and_change_pages_load_for_alice(
    alice_client: Client, world: dict[type[Model], Model], model: type[Model]
) -> None:
    assert alice_client.get(url(model, "changelist")).status_code == 200
    assert alice_client.get(url(model, "changelist"), {"q": "demo"}).status_code == 200
    assert alice_client.get(url(model, "change", world[model].pk)).status_code == 200


@pytest.mark.parametrize("model", EDITABLE, ids=lambda m: m.__name__)
def test_add_and_delete_pages_of_editable_models_load(
    alice_client: Client, world: dict[type[Model], Model], model: type[Model]
) -> None:
    assert alice_client.get(url(model, "add")).status_code == 200
    assert alice_client.get(url(model, "delete", world[model].pk)).status_code == 200


def test_the_run_list_shows_the_counts_and_the_author(
    alice_client: Client, world: dict[type[Model], Model]
) -> None:
    page = alice_client.get(url(Run, "changelist")).content.decode()
    for column in ("Title", "Status", "Created by", "Rounds count", "Tool calls count",
                   "Errors count", "Created at"):
        assert column in page
    assert "Demo run" in page
    assert "alice" in page


def test_bob_cannot_open_the_admin(client: Client, bob: AbstractUser) -> None:
    client.force_login(bob)
    response = client.get(url(ErrorPolicy, "changelist"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


# -- the audit log is read-only --------------------------------------------------------


@pytest.mark.parametrize("model", READ_ONLY, ids=lambda m: m.__name__)
def test_the_audit_log_refuses_add_change_and_delete(
    alice_client: Client, world: dict[type[Model], Model], model: type[Model]
) -> None:
    obj = world[model]
    changelist = alice_client.get(url(model, "changelist")).content.decode()
    assert url(model, "add") not in changelist
    assert alice_client.get(url(model, "add")).status_code == 403
    assert alice_client.post(url(model, "add"), {}).status_code == 403
    change_page = alice_client.get(url(model, "change", obj.pk)).content.decode()
    assert 'name="_save"' not in change_page
    assert alice_client.post(url(model, "change", obj.pk), {"title": "x"}).status_code == 403
    assert alice_client.get(url(model, "delete", obj.pk)).status_code == 403
    assert alice_client.post(url(model, "delete", obj.pk), {"post": "yes"}).status_code == 403
    assert model._default_manager.filter(pk=obj.pk).exists()


def test_the_bulk_delete_action_is_not_offered_for_runs(
    alice_client: Client, world: dict[type[Model], Model]
) -> None:
    response = alice_client.post(url(Run, "changelist"), {
        "action": "delete_selected", "_selected_action": [str(world[Run].pk)], "post": "yes",
    })
    assert Run.objects.filter(pk=world[Run].pk).exists()
    assert "delete_selected" not in alice_client.get(url(Run, "changelist")).content.decode()
    assert response.status_code in (200, 302)


# -- model endpoints -------------------------------------------------------------------


def endpoint_data(**overrides: str) -> dict[str, str]:
    data = {"name": "New endpoint", "kind": "openai", "model": "gpt-4o-mini", "base_url": "",
            "api_key_env": "OPENAI_API_KEY", "extra_headers": "{}",
            "default_parameters": "{}", "proxy_url": "", "script": "[]"}
    return data | overrides


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"base_url": "ftp://example.com/v1"}, "base_url", "http:// or https://"),
        ({"base_url": "localhost:11434"}, "base_url", "http:// or https://"),
        ({"base_url": "http://"}, "base_url", "http:// or https://"),
        ({"base_url": "https://user:pw@api.example.com"}, "base_url", "No credentials"),
        ({"model": ""}, "model", "Name the model to call"),
        ({"kind": "scripted", "model": ""}, "script", "needs a list of steps"),
        ({"kind": "scripted", "script": '[{"tool_calls": [{"arguments": {}}]}]'}, "script",
         "Step 1: tool_calls.0.name: Field required"),
        ({"kind": "scripted", "script": '[{"text": "ok"}, {"txt": "typo"}]'}, "script",
         "Step 2: txt: Extra inputs are not permitted"),
        ({"kind": "scripted", "script": '{"text": "hi"}'}, "script", "needs a list of steps"),
        ({"kind": "scripted", "script": "[" * 5000 + "]" * 5000}, "script",
         "Enter a valid JSON"),
        ({"api_key_env": "sk-live-1234"}, "api_key_env", "NAME of an environment variable"),
        ({"extra_headers": '{"Authorization": "Bearer sk-1"}'}, "extra_headers",
         "Authorization carries a credential"),
        ({"extra_headers": '{"X-Count": 1}'}, "extra_headers", "JSON object of strings"),
        ({"default_parameters": "[1]"}, "default_parameters", "Give a JSON object"),
        ({"proxy_url": "socks5://proxy:1080"}, "proxy_url", "http://host:port"),
        ({"proxy_url": "http://"}, "proxy_url", "http://host:port"),
        ({"proxy_url": "http://proxy:99999"}, "proxy_url", "http://host:port"),
        ({"proxy_url": "http://me:pw@proxy:3128"}, "proxy_url", "Do not store proxy credentials"),
        ({"proxy_url": "http://proxy:3128/path"}, "proxy_url", "only a scheme, a host"),
        ({"proxy_url": "env:lower-case"}, "proxy_url", "NAME of an environment variable"),
        ({"api_key_env": "DATABASE_URL"}, "api_key_env",
         "DATABASE_URL is not one endpoints may read credentials from"),
        ({"extra_headers": '{"X-Api-Key": "env:SECRET_KEY"}'}, "extra_headers",
         "X-Api-Key: the environment variable SECRET_KEY is not one"),
        ({"proxy_url": "env:HOME"}, "proxy_url", "AGENTFORGE_SECRET_ENV_ALLOW allows"),
        ({"timeout_seconds": "0"}, "timeout_seconds", "greater than or equal to 0.1"),
        ({"timeout_seconds": "-5"}, "timeout_seconds", "greater than or equal to 0.1"),
        ({"timeout_seconds": "1e9"}, "timeout_seconds", "less than or equal to 3600"),
        ({"timeout_seconds": "nan"}, "timeout_seconds", "Enter a number"),
    ],
)
def test_endpoint_form_errors(
    alice_client: Client, overrides: dict[str, str], field: str, message: str
) -> None:
    response = alice_client.post(url(ModelEndpoint, "add"), endpoint_data(**overrides))
    assert response.status_code == 200
    assert any(message in error for error in form_errors(response).get(field, [])), (
        form_errors(response))
    assert not ModelEndpoint.objects.exists()


@pytest.mark.parametrize(
    "overrides",
    [
        {"kind": "scripted", "model": "", "api_key_env": "",
         "script": '[{"tool_calls": [{"name": "get_weather", "arguments": "{bad"}]}, '
                   '{"text": "done: {last_result}"}]'},
        {"kind": "openai_compatible", "base_url": "http://ollama:11434/v1", "api_key_env": "",
         "extra_headers": '{"Authorization": "env:OLLAMA_TOKEN", "X-Team": "docs"}'},
        {"proxy_url": "http://proxy.corp:3128"},
        {"proxy_url": "env:CORP_PROXY_URL"},
        {"timeout_seconds": "30.0"},
    ],
)
def test_valid_endpoints_are_saved(alice_client: Client, overrides: dict[str, str]) -> None:
    response = alice_client.post(url(ModelEndpoint, "add"), endpoint_data(**overrides))
    assert response.status_code == 302, form_errors(response)
    saved = ModelEndpoint.objects.get()
    assert {field: str(getattr(saved, field)) for field in overrides
            if field not in ("script", "extra_headers")} == {
        field: value for field, value in overrides.items()
        if field not in ("script", "extra_headers")}


def test_an_endpoint_saved_without_a_timeout_gets_the_default(alice_client: Client) -> None:
    response = alice_client.post(url(ModelEndpoint, "add"), endpoint_data(timeout_seconds=""))
    assert response.status_code == 302, form_errors(response)
    assert ModelEndpoint.objects.get().timeout_seconds == 120.0


def test_the_key_field_shows_only_the_variable_name(
    alice_client: Client, world: dict[type[Model], Model], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VARIABLE, "sk-should-not-show")
    page = alice_client.get(url(ModelEndpoint, "change", world[ModelEndpoint].pk))
    html = page.content.decode()
    assert re.search(rf'name="api_key_env" value="{KEY_VARIABLE}"', html)
    assert "sk-should-not-show" not in html
    assert ">set<" in html


def test_the_capability_report_is_shown_pretty_and_escaped(
    alice_client: Client, world: dict[type[Model], Model]
) -> None:
    html = alice_client.get(url(ModelEndpoint, "change", world[ModelEndpoint].pk)).content
    assert b"&quot;parallel_tool_calls&quot;: true" in html
    assert b"&lt;script&gt;x&lt;/script&gt;" in html
    assert b"<script>x</script>" not in html


def test_a_canary_key_never_appears_on_any_admin_page(
    alice_client: Client, world: dict[type[Model], Model], monkeypatch: pytest.MonkeyPatch
) -> None:
    canary = f"sk-canary-{uuid.uuid4().hex}"
    monkeypatch.setenv(KEY_VARIABLE, canary)
    pages = [reverse("admin:index"), reverse("admin:app_list", args=["tools_app"])]
    for model in EDITABLE + READ_ONLY:
        pk = world[model].pk
        pages += [url(model, "changelist"), url(model, "change", pk), url(model, "history", pk)]
    pages += [url(model, "add") for model in EDITABLE]
    for page in pages:
        response = alice_client.get(page)
        assert response.status_code == 200, page
        assert canary not in response.content.decode(), page


# -- tools -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"json_schema": '{"type": "string"}'}, "json_schema", '"type" must be "object"'),
        ({"json_schema": "[1, 2]"}, "json_schema", "must be a JSON object"),
        ({"json_schema": "not json"}, "json_schema", "Enter a valid JSON"),
        ({"json_schema": "[" * 5000 + "]" * 5000}, "json_schema", "Enter a valid JSON"),
        ({"config": "[" * 5000 + "]" * 5000}, "config", "Enter a valid JSON"),
        ({"json_schema": '{"type": "object", "properties": {"a": {}}, "required": ["b"]}'},
         "json_schema", "missing from \"properties\": ['b']"),
        ({"json_schema": '{"type": "object", "properties": []}'}, "json_schema",
         '"properties" must map'),
        ({"python_path": ""}, "python_path", "A Python tool needs module.function"),
        ({"python_path": "no_such_module_q.tool"}, "python_path", "cannot import"),
        ({"python_path": "tools_app.tools.example_tools.nope"}, "python_path", "has no attribute"),
        ({"python_path": "os.system"}, "python_path", "is not decorated with @tool"),
        ({"kind": "mock"}, "python_path", "Only Python tools have a Python path"),
        ({"name": "bad name!"}, "name", "Tool names must be"),
        ({"timeout_seconds": "0"}, "timeout_seconds", "greater than or equal to 0.001"),
    ],
)
def test_tool_form_errors(
    alice_client: Client, overrides: dict[str, str], field: str, message: str
) -> None:
    response = alice_client.post(url(ToolRegistration, "add"), tool_data(**overrides))
    assert response.status_code == 200
    assert any(message in error for error in form_errors(response).get(field, [])), (
        form_errors(response))
    assert not ToolRegistration.objects.exists()


def test_a_tool_added_in_the_admin_gets_its_version_hash(alice_client: Client) -> None:
    response = alice_client.post(url(ToolRegistration, "add"), tool_data())
    assert response.status_code == 302, form_errors(response)
    tool = ToolRegistration.objects.get()
    assert tool.version_hash == compute_version_hash(tool)


def test_an_admin_edit_recomputes_the_version_hash(
    alice_client: Client, world: dict[type[Model], Model]
) -> None:
    tool = world[ToolRegistration]
    assert isinstance(tool, ToolRegistration)
    old_hash = tool.version_hash
    response = alice_client.post(url(ToolRegistration, "change", tool.pk), tool_data(
        name=tool.name, python_path=tool.python_path, description="Edited description",
        json_schema=json.dumps(tool.json_schema),
    ))
    assert response.status_code == 302, form_errors(response)
    tool.refresh_from_db()
    assert tool.description == "Edited description"
    assert tool.version_hash == compute_version_hash(tool)
    assert tool.version_hash != old_hash


# -- error policies --------------------------------------------------------------------


def policy_data(policy: ErrorPolicy | None = None, **overrides: Any) -> dict[str, str]:
    """The POST an admin form would send; booleans are checkboxes (absent when off)."""
    values = {name: getattr(policy or ErrorPolicy(name="Strict"), name) for name in POLICY_FIELDS}
    values |= overrides
    data = {}
    for name, value in values.items():
        if value is True:
            data[name] = "on"
        elif value is not False:
            data[name] = "" if value is None else str(value)
    return data


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"arguments_error_template": "Bad {tool}: {secret}"}, "arguments_error_template",
         "Unknown placeholder {secret}: use only {tool}, {error}, {arguments}"),
        ({"execution_error_template": "{error.__class__}"}, "execution_error_template",
         "Unknown placeholder {error.__class__}"),
        ({"execution_error_template": "{error:>999999999}"}, "execution_error_template",
         "Unknown placeholder {error:>999999999}"),
        ({"execution_error_template": "{error!r}"}, "execution_error_template",
         "Unknown placeholder {error!r}"),
        ({"execution_error_template": "{0}"}, "execution_error_template",
         "Unknown placeholder {0}"),
        ({"execution_error_template": "{}"}, "execution_error_template",
         "Unknown placeholder {}"),
        ({"arguments_error_template": "unclosed {tool"}, "arguments_error_template",
         "Not a valid template"),
        ({"arguments_error_template": "stray } brace"}, "arguments_error_template",
         "Not a valid template"),
        ({"execution_error_template": ""}, "execution_error_template", "required"),
        ({"max_round_trips": 0}, "max_round_trips", "greater than or equal to 1"),
        ({"max_round_trips": 1001}, "max_round_trips", "less than or equal to 1000"),
        ({"default_tool_timeout": -1}, "default_tool_timeout", "greater than or equal to 0.001"),
        ({"default_tool_timeout": 0}, "default_tool_timeout", "greater than or equal to 0.001"),
        ({"provider_max_retries": 11}, "provider_max_retries", "less than or equal to 10"),
        ({"run_timeout_seconds": 0}, "run_timeout_seconds", "greater than or equal to 1"),
        ({"run_timeout_seconds": -60}, "run_timeout_seconds", "greater than or equal to 1"),
        ({"run_timeout_seconds": 10**9}, "run_timeout_seconds",
         "less than or equal to 86400"),
        ({"max_concurrency": 0}, "max_concurrency", "greater than or equal to 1"),
        ({"max_concurrency": 4, "parallel": False}, "max_concurrency",
         "Only meaningful when calls run in parallel"),
        ({"arguments_error": "ignore"}, "arguments_error", "Select a valid choice"),
        ({"name": ""}, "name", "required"),
    ],
)
def test_policy_form_errors(
    alice_client: Client, overrides: dict[str, Any], field: str, message: str
) -> None:
    response = alice_client.post(url(ErrorPolicy, "add"), policy_data(**overrides))
    assert response.status_code == 200
    assert any(message in error for error in form_errors(response).get(field, [])), (
        form_errors(response))
    assert not ErrorPolicy.objects.exists()
    assert not PolicyRevision.objects.exists()


def test_templates_may_use_the_placeholders_and_escaped_braces(alice_client: Client) -> None:
    template = "{{not a placeholder}} {tool} failed with {error} for {arguments}"
    response = alice_client.post(url(ErrorPolicy, "add"), policy_data(
        arguments_error_template=template, max_concurrency=8,
    ))
    assert response.status_code == 302, form_errors(response)
    assert ErrorPolicy.objects.get().arguments_error_template == template


def test_a_policy_may_have_a_run_deadline_or_none(alice_client: Client) -> None:
    response = alice_client.post(url(ErrorPolicy, "add"), policy_data(run_timeout_seconds=90))
    assert response.status_code == 302, form_errors(response)
    assert ErrorPolicy.objects.get().run_timeout_seconds == 90.0
    response = alice_client.post(url(ErrorPolicy, "add"), policy_data(name="No deadline"))
    assert response.status_code == 302, form_errors(response)
    assert ErrorPolicy.objects.get(name="No deadline").run_timeout_seconds is None


def test_a_policy_edit_records_who_changed_what(
    alice_client: Client, alice: AbstractUser
) -> None:
    policy = ErrorPolicy.objects.create(name="Default", is_default=True)
    response = alice_client.post(url(ErrorPolicy, "change", policy.pk), policy_data(
        policy, max_round_trips=5, execution_error="rethrow", default_tool_timeout=2.5,
    ))
    assert response.status_code == 302, form_errors(response)
    [revision] = PolicyRevision.objects.filter(policy=policy)
    assert revision.changed_by == alice
    assert revision.changes == {
        "execution_error": ["to_model", "rethrow"],
        "max_round_trips": [100, 5],
        "default_tool_timeout": [None, 2.5],
    }


def test_saving_without_changes_records_no_revision(alice_client: Client) -> None:
    policy = ErrorPolicy.objects.create(name="Default", is_default=True)
    response = alice_client.post(url(ErrorPolicy, "change", policy.pk), policy_data(policy))
    assert response.status_code == 302, form_errors(response)
    assert not PolicyRevision.objects.exists()


def test_creating_a_policy_records_every_field(
    alice_client: Client, alice: AbstractUser
) -> None:
    response = alice_client.post(url(ErrorPolicy, "add"), policy_data(max_round_trips=7))
    assert response.status_code == 302, form_errors(response)
    [revision] = PolicyRevision.objects.all()
    assert revision.changed_by == alice
    assert set(revision.changes) == set(POLICY_FIELDS)
    assert revision.changes["name"] == [None, "Strict"]
    assert revision.changes["max_round_trips"] == [None, 7]
    assert all(old is None for old, _ in revision.changes.values())


def test_making_a_policy_the_default_clears_the_previous_default(
    alice_client: Client, alice: AbstractUser
) -> None:
    old = ErrorPolicy.objects.create(name="Old", is_default=True)
    response = alice_client.post(url(ErrorPolicy, "add"), policy_data(is_default=True))
    assert response.status_code == 302, form_errors(response)
    new = ErrorPolicy.objects.get(name="Strict")
    assert list(ErrorPolicy.objects.filter(is_default=True)) == [new]
    [demotion] = PolicyRevision.objects.filter(policy=old)
    assert demotion.changes == {"is_default": [True, False]}
    assert demotion.changed_by == alice


def test_the_change_page_shows_the_history(
    alice_client: Client, world: dict[type[Model], Model]
) -> None:
    html = alice_client.get(url(ErrorPolicy, "change", world[ErrorPolicy].pk)).content.decode()
    assert "Change history" in html
    assert "<td>alice</td>" in html
    assert "max_round_trips: 100 → 5" in html
    assert f"{url(PolicyRevision, 'changelist')}?policy__id__exact={world[ErrorPolicy].pk}" in html
    filtered = alice_client.get(url(PolicyRevision, "changelist"),
                                {"policy__id__exact": world[ErrorPolicy].pk})
    assert filtered.status_code == 200
    assert "max_round_trips: 100 → 5" in filtered.content.decode()


def test_the_loop_health_fields_are_saved_and_recorded(
    alice_client: Client, alice: AbstractUser
) -> None:
    policy = ErrorPolicy.objects.create(name="Default", is_default=True)
    page = alice_client.get(url(ErrorPolicy, "change", policy.pk)).content.decode()
    assert "Loop health" in page
    assert "Tell the model it is repeating itself" in page

    response = alice_client.post(url(ErrorPolicy, "change", policy.pk), policy_data(
        policy, loop_repeat_at=4, loop_repeat_action="note", loop_repeat_stop_at="",
        loop_ping_pong_action="stop", loop_no_progress_stop_at=6))

    assert response.status_code == 302, form_errors(response)
    policy.refresh_from_db()
    assert (policy.loop_repeat_at, policy.loop_repeat_action, policy.loop_repeat_stop_at,
            policy.loop_ping_pong_action, policy.loop_no_progress_stop_at) == (
        4, "note", None, "stop", 6)
    [revision] = PolicyRevision.objects.filter(policy=policy)
    assert revision.changes == {"loop_repeat_at": [3, 4], "loop_repeat_action": [
        "tell_model", "note"], "loop_repeat_stop_at": [5, None],
        "loop_ping_pong_action": ["tell_model", "stop"], "loop_no_progress_stop_at": [None, 6]}


@pytest.mark.parametrize(("overrides", "field", "message"), [
    ({"loop_repeat_stop_at": 3}, "loop_repeat_stop_at",
     "Must be more than the flag threshold (3): to stop the run at the first flag"),
    ({"loop_ping_pong_at": 8}, "loop_ping_pong_stop_at", "Must be more than the flag threshold"),
    ({"loop_repeat_at": 1}, "loop_repeat_at", "greater than or equal to 2"),
    ({"loop_ping_pong_at": 2}, "loop_ping_pong_at", "greater than or equal to 3"),
    ({"loop_no_progress_stop_at": 101}, "loop_no_progress_stop_at", "less than or equal to 100"),
    ({"loop_no_progress_action": "ignore"}, "loop_no_progress_action", "Select a valid choice"),
])
def test_loop_health_thresholds_that_contradict_each_other_are_refused(
    alice_client: Client, overrides: dict[str, Any], field: str, message: str
) -> None:
    response = alice_client.post(url(ErrorPolicy, "add"), policy_data(**overrides))
    assert response.status_code == 200
    assert any(message in error for error in form_errors(response).get(field, [])), (
        form_errors(response))
    assert not ErrorPolicy.objects.exists()


# -- API tokens ------------------------------------------------------------------------


def test_the_token_add_form_asks_only_for_user_and_name(alice_client: Client) -> None:
    response = alice_client.get(url(ApiToken, "add"))
    assert list(response.context["adminform"].form.fields) == ["user", "name"]


def test_adding_a_token_shows_it_once_and_stores_only_its_hash(
    alice_client: Client, bob: AbstractUser
) -> None:
    response = alice_client.post(url(ApiToken, "add"), {"user": bob.pk, "name": "ci"},
                                 follow=True)
    assert response.status_code == 200
    shown = " ".join(str(m) for m in response.context["messages"])
    [plaintext] = re.findall(r"afw_[A-Za-z0-9_-]{43}", shown)
    token = ApiToken.objects.get(name="ci")
    assert token.token_hash == hashlib.sha256(plaintext.encode()).hexdigest()
    assert token.prefix == plaintext[:8]
    assert user_for_token(plaintext) == bob

    for page in (url(ApiToken, "changelist"), url(ApiToken, "change", token.pk)):
        html = alice_client.get(page).content.decode()
        assert plaintext not in html
        assert token.token_hash not in html


def test_editing_a_token_keeps_its_secret_and_user(
    alice_client: Client, alice: AbstractUser, bob: AbstractUser
) -> None:
    token, plaintext = create_token(alice, "laptop")
    response = alice_client.post(url(ApiToken, "change", token.pk),
                                 {"name": "old laptop", "user": bob.pk})
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.name == "old laptop"
    assert token.user == alice
    assert user_for_token(plaintext) == alice


def test_runs_rounds_and_calls_link_to_their_place_on_the_timeline(
    alice_client: Client, world: dict[type[Model], Model],
) -> None:
    run, round_, call = world[Run], world[Round], world[ToolCall]
    Run.objects.filter(pk=run.pk).update(wall_ms=1534.2)
    Round.objects.filter(pk=round_.pk).update(latency_ms=87.4)
    ToolCall.objects.filter(pk=call.pk).update(duration_ms=4.25)

    runs = alice_client.get(url(Run, "changelist")).content.decode()
    rounds = alice_client.get(url(Round, "changelist")).content.decode()
    calls = alice_client.get(url(ToolCall, "changelist")).content.decode()

    assert f'<a href="/runs/{run.pk}/">timeline</a>' in runs
    assert "1.53 s" in runs
    assert f'<a href="/runs/{run.pk}/#round-0">timeline</a>' in rounds
    assert "87 ms" in rounds
    assert f'<a href="/runs/{run.pk}/#call-{call.pk}">timeline</a>' in calls
    assert "4.2 ms" in calls


def test_re_executions_show_their_duration_and_link_to_their_call_on_the_timeline(
    alice_client: Client, world: dict[type[Model], Model],
) -> None:
    run, call, reexecution = world[Run], world[ToolCall], world[CallReexecution]
    CallReexecution.objects.filter(pk=reexecution.pk).update(duration_ms=2340.0)

    page = alice_client.get(url(CallReexecution, "changelist")).content.decode()

    assert f'<a href="/runs/{run.pk}/#call-{call.pk}">timeline</a>' in page
    assert "2.34 s" in page
