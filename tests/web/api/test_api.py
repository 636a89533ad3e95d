"""The JSON API: bearer tokens only, a run started and read back, and a clear 4xx JSON
error naming the problem for every bad input."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.runs.support import execute
from tests.web.support import MISSING_RUN, Api, error_of, start_run
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, ToolRegistration
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db

# -- authentication --------------------------------------------------------------------


@pytest.mark.parametrize("authorization", [
    None,
    "",
    "Bearer",
    "Bearer ",
    "Bearer afw_not-a-real-token",
    "Bearer not-even-the-prefix",
    "Token {token}",
    "Basic {token}",
    "{token}",
    "Bearer {token}x",
])
@pytest.mark.parametrize("request_line", [
    ("post", "/api/runs"), ("get", "/api/runs"), ("get", f"/api/runs/{MISSING_RUN}"),
    ("get", f"/api/runs/{MISSING_RUN}/events"),
])
def test_no_valid_bearer_token_is_401_json(
    bob: AbstractUser, authorization: str | None, request_line: tuple[str, str],
) -> None:
    _, token = create_token(bob, "ci")
    api = Api(None)
    headers = {} if authorization is None else {
        "Authorization": authorization.format(token=token)}
    method, path = request_line
    response = (api.post(path, {}, **headers) if method == "post"
                else api.get(path, **headers))

    error = error_of(response, 401)
    assert error["code"] == "unauthorized"
    assert "Bearer" in error["message"]
    assert response["WWW-Authenticate"] == "Bearer"


def test_a_logged_in_session_is_no_api_credential(
    alice_client: Client, body: dict[str, Any],
) -> None:
    response = alice_client.post("/api/runs", json.dumps(body), content_type="application/json")
    assert error_of(response, 401)["code"] == "unauthorized"
    assert not Run.objects.exists()


def test_an_inactive_users_token_is_refused(bob: AbstractUser, body: dict[str, Any]) -> None:
    api = Api(create_token(bob, "ci")[1])
    bob.is_active = False
    bob.save()
    assert error_of(api.post("/api/runs", body), 401)["code"] == "unauthorized"


def test_the_scheme_is_case_insensitive(bob: AbstractUser, body: dict[str, Any]) -> None:
    _, token = create_token(bob, "ci")
    response = Api(None).post("/api/runs", body, Authorization=f"bearer {token}")
    assert response.status_code == 201


# -- the happy path --------------------------------------------------------------------


def test_start_a_run_then_read_it_back(
    bob: AbstractUser, bob_api: Api, body: dict[str, Any], enqueued: list[str],
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = bob_api.post("/api/runs", body)

    assert response.status_code == 201
    created = response.json()
    run = Run.objects.get()
    assert created == {"id": str(run.pk), "status": "queued", "url": f"/runs/{run.pk}/"}
    assert run.created_by == bob
    assert enqueued == [str(run.pk)]
    assert run.snapshot["policy"]["name"] == "Test policy"  # the default policy
    assert [m["type"] for m in run.snapshot["messages"]] == ["system", "user"]

    assert execute(created["id"]) == "succeeded"
    detail = bob_api.get(f"/api/runs/{run.pk}")

    assert detail.status_code == 200
    data = detail.json()
    assert (data["id"], data["status"], data["endpoint"], data["tools"]) == (
        str(run.pk), "succeeded", "weather", ["get_weather"])
    assert (len(data["rounds"]), data["tool_calls"], data["errors"]) == (2, 2, 0)
    assert data["error"] is None
    assert data["final_answer"].startswith("Here you go: ")
    assert "Hangzhou" in data["final_answer"]
    assert "Paris" in data["final_answer"]
    first, second = data["rounds"]
    assert (first["index"], first["finish_reason"], first["text"]) == (0, "tool_execution", None)
    calls = first["tool_calls"]
    assert [(c["name"], json.loads(c["arguments"]), c["state"], c["is_error"]) for c in calls] == [
        ("get_weather", {"city": "Hangzhou"}, "succeeded", False),
        ("get_weather", {"city": "Paris"}, "succeeded", False),
    ]
    assert json.loads(calls[0]["result"])["condition"] == "light rain"
    assert [c["id"] for c in calls] == ["call_0_0", "call_0_1"]
    assert second["tool_calls"] == []
    assert second["text"] == data["final_answer"]


def test_the_endpoint_by_id_a_policy_by_name_or_id_and_parameters(
    bob_api: Api, body: dict[str, Any], weather_endpoint: ModelEndpoint,
    demo_tools: dict[str, ToolRegistration],
) -> None:
    strict = ErrorPolicy.objects.create(name="Strict", hallucinated_tool="tell_model")
    for policy_key in ("Strict", strict.pk, str(strict.pk)):
        response = bob_api.post("/api/runs", body | {
            "endpoint": str(weather_endpoint.pk), "policy": policy_key,
            "tools": ["get_weather", "calculator"],
            "parameters": {"temperature": 0.2, "max_output_tokens": 300,
                           "tool_choice": {"name": "get_weather"}},
            "policy_overrides": {"max_round_trips": 5, "parallel": False},
        })
        assert response.status_code == 201, response.content
        run = Run.objects.get(pk=response.json()["id"])
        assert run.endpoint == weather_endpoint
        assert run.policy == strict
        assert [t["name"] for t in run.snapshot["tools"]] == ["get_weather", "calculator"]
        assert run.snapshot["parameters"] == {"temperature": 0.2, "max_output_tokens": 300,
                                              "tool_choice": {"name": "get_weather"}}
        assert run.snapshot["policy"]["max_round_trips"] == 5
        assert run.snapshot["policy"]["parallel"] is False
        assert run.snapshot["policy"]["hallucinated_tool"] == "tell_model"


@pytest.mark.parametrize("choice", ["auto", "required", "none"])
def test_the_tool_choice_modes(bob_api: Api, body: dict[str, Any], choice: str) -> None:
    response = bob_api.post("/api/runs", body | {"parameters": {"tool_choice": choice}})
    assert response.status_code == 201
    assert Run.objects.get().snapshot["parameters"] == {"tool_choice": choice}


def test_tools_and_policy_are_optional(bob_api: Api, body: dict[str, Any]) -> None:
    del body["tools"]
    response = bob_api.post("/api/runs", body | {"policy": None})
    assert response.status_code == 201
    run = Run.objects.get()
    assert run.snapshot["tools"] == []
    assert run.snapshot["policy"]["name"] == "Test policy"


def test_a_run_says_when_it_was_queued_started_and_finished(
        bob_api: Api, body: dict[str, Any]) -> None:
    run_id = bob_api.post("/api/runs", body).json()["id"]
    queued = bob_api.get(f"/api/runs/{run_id}").json()
    assert queued["status"] == "queued"
    assert (queued["started_at"], queued["finished_at"], queued["wall_ms"]) == (None, None, None)

    execute(run_id)
    done = bob_api.get(f"/api/runs/{run_id}").json()
    run = Run.objects.get(pk=run_id)
    assert run.started_at is not None
    assert run.finished_at is not None
    assert done["created_at"] == run.created_at.isoformat()
    assert done["started_at"] == run.started_at.isoformat()
    assert done["finished_at"] == run.finished_at.isoformat()
    assert run.created_at <= run.started_at <= run.finished_at
    assert done["wall_ms"] == run.wall_ms
    listed = bob_api.get("/api/runs").json()
    assert {r["id"]: r["started_at"] for r in listed["runs"]}[run_id] == done["started_at"]


def test_the_events_after_n(bob_api: Api, body: dict[str, Any]) -> None:
    run_id = bob_api.post("/api/runs", body).json()["id"]
    execute(run_id)
    last = Run.objects.get(pk=run_id).last_seq

    everything = bob_api.get(f"/api/runs/{run_id}/events").json()
    assert [e["seq"] for e in everything["events"]] == list(range(1, last + 1))
    assert everything["last_seq"] == last
    assert everything["events"][0]["kind"] == "run_status"
    assert everything["events"][0]["payload"] == {"status": "queued"}
    assert everything["events"][-1]["payload"]["status"] == "succeeded"
    kinds = {e["kind"] for e in everything["events"]}
    assert {"round_started", "tool_call_proposed", "tool_call_finished"} <= kinds

    later = bob_api.get(f"/api/runs/{run_id}/events?after=5").json()
    assert [e["seq"] for e in later["events"]] == list(range(6, last + 1))
    assert later["events"] == everything["events"][5:]
    assert later["last_seq"] == last

    done = bob_api.get(f"/api/runs/{run_id}/events?after={last}").json()
    assert done == {"events": [], "last_seq": last}
    beyond = bob_api.get(f"/api/runs/{run_id}/events?after={last + 10}").json()
    assert beyond == {"events": [], "last_seq": last + 10}


def test_the_runs_list_holds_only_my_runs(
    bob_api: Api, charlie_api: Api, body: dict[str, Any],
) -> None:
    mine = bob_api.post("/api/runs", body).json()["id"]
    theirs = charlie_api.post("/api/runs", body).json()["id"]
    assert [r["id"] for r in bob_api.get("/api/runs").json()["runs"]] == [mine]
    assert [r["id"] for r in charlie_api.get("/api/runs").json()["runs"]] == [theirs]


def test_staff_reads_any_run(
    alice: AbstractUser, bob_api: Api, body: dict[str, Any],
) -> None:
    run_id = bob_api.post("/api/runs", body).json()["id"]
    staff = Api(create_token(alice, "ops")[1])
    assert staff.get(f"/api/runs/{run_id}").status_code == 200


def test_no_csrf_token_is_needed_with_a_bearer_token(bob_api: Api, body: dict[str, Any]) -> None:
    assert bob_api.client.handler.enforce_csrf_checks
    assert bob_api.post("/api/runs", body).status_code == 201


def test_a_failed_run_reports_its_error(
    bob_api: Api, make_endpoint: Any, policy: ErrorPolicy, demo_tools: Any,
) -> None:
    make_endpoint([{"tool_calls": [{"name": "nope", "arguments": {}}]}], name="hallucinating")
    run_id = bob_api.post("/api/runs", {
        "endpoint": "hallucinating", "tools": ["get_weather"],
        "messages": [{"role": "user", "content": "go"}]}).json()["id"]
    assert execute(run_id) == "failed"
    data = bob_api.get(f"/api/runs/{run_id}").json()
    assert data["status"] == "failed"
    assert data["final_answer"] is None
    assert data["error"]["type"]
    assert "nope" in data["error"]["message"]
    assert data["rounds"][0]["tool_calls"][0]["state"] == "hallucinated"


# -- bad input: a clear 4xx JSON error naming the problem ------------------------------


@pytest.mark.parametrize(("raw", "code"), [
    ("{not json", "invalid_json"),
    ("", "invalid_json"),
    (b"\xff\xfe{", "invalid_json"),
    ("[]", "invalid_body"),
    ('"a string"', "invalid_body"),
    ("null", "invalid_body"),
    ("42", "invalid_body"),
    ("[" * 100_000 + "]" * 100_000, "invalid_json"),  # nesting deeper than any parser
])
def test_a_body_that_is_no_json_object(bob_api: Api, raw: str | bytes, code: str) -> None:
    error = error_of(bob_api.post("/api/runs", raw), 400)
    assert error["code"] == code
    assert not Run.objects.exists()


@pytest.mark.parametrize(("change", "status", "code", "field", "words"), [
    ({"endpoint": None}, 400, "missing_field", "endpoint", "'endpoint' is required"),
    ({"endpoint": ""}, 400, "missing_field", "endpoint", "'endpoint' is required"),
    ({"endpoint": "nowhere"}, 404, "unknown_endpoint", "endpoint", "'nowhere'"),
    ({"endpoint": MISSING_RUN}, 404, "unknown_endpoint", "endpoint", MISSING_RUN),
    ({"endpoint": {"name": "weather"}}, 400, "invalid_field", "endpoint", "name or an id"),
    ({"tools": ["get_weather", "teleport", "fly"]}, 400, "unknown_tool", "tools",
     "teleport, fly"),
    ({"tools": "get_weather"}, 400, "invalid_field", "tools", "list of tool names"),
    ({"tools": [1, 2]}, 400, "invalid_field", "tools[0]",
     "tools must be a list of tool names: tools[0] must be a string"),
    ({"tools": {"get_weather": True}}, 400, "invalid_field", "tools", "list"),
    ({"messages": None}, 400, "missing_field", "messages", "'messages' is required"),
    ({"messages": []}, 400, "missing_field", "messages", "'messages' is required"),
    ({"messages": "hello"}, 400, "invalid_field", "messages", "must be a list"),
    ({"messages": [{"role": "assistant", "content": "hi"}]}, 400, "invalid_field",
     "messages[0]", "ends with an assistant message"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}]}, 400,
     "invalid_field", "messages[1]", "messages[1]"),
    ({"messages": [{"role": "user", "content": 5}]}, 400, "invalid_field", "messages[0]",
     "content"),
    ({"messages": ["hello"]}, 400, "invalid_field", "messages[0]", "role"),
    ({"messages": [{"role": "system", "content": "only a system prompt"}]}, 400,
     "invalid_request", None, "at least one user message"),
    ({"policy": "lenient"}, 400, "unknown_policy", "policy", "'lenient'"),
    ({"policy": 987654}, 400, "unknown_policy", "policy", "987654"),
    ({"policy": "99999999999999999999999"}, 400, "unknown_policy", "policy", "9999"),
    ({"policy": "²"}, 400, "unknown_policy", "policy", "²"),
    ({"policy": ["Test policy"]}, 400, "invalid_field", "policy", "name or an id"),
    ({"parameters": "hot"}, 400, "invalid_field", "parameters", "must be an object"),
    ({"parameters": [1]}, 400, "invalid_field", "parameters", "must be an object"),
    ({"policy_overrides": {"colour": "red"}}, 400, "invalid_field", "policy_overrides",
     "policy_overrides.colour: cannot be overridden per run"),
    ({"policy_overrides": {"name": "Other"}}, 400, "invalid_field", "policy_overrides",
     "policy_overrides.name: cannot be overridden per run"),
    ({"policy_overrides": {"max_round_trips": 0}}, 400, "invalid_field", "policy_overrides",
     "policy_overrides.max_round_trips: Ensure this value is greater than or equal to 1"),
    ({"policy_overrides": {"execution_error_template": "{error:>300000000}"}}, 400,
     "invalid_field", "policy_overrides", "Unknown placeholder {error:>300000000}"),
    ({"policy_overrides": {"provider_max_retries": 100000}}, 400, "invalid_field",
     "policy_overrides", "policy_overrides.provider_max_retries"),
    ({"policy_overrides": 5}, 400, "invalid_field", "policy_overrides", "must be an object"),
    ({"policy_overrides": "parallel"}, 400, "invalid_field", "policy_overrides",
     "must be an object"),
])
def test_a_bad_field_is_named(
    bob_api: Api, body: dict[str, Any], change: dict[str, Any], status: int,
    code: str | None, field: str | None, words: str,
) -> None:
    error = error_of(bob_api.post("/api/runs", body | change), status)
    if code is not None:
        assert error["code"] == code
    if field is not None:
        assert error["field"] == field
    assert words in error["message"]
    assert not Run.objects.exists()


def test_a_missing_endpoint_key_is_named(bob_api: Api, body: dict[str, Any]) -> None:
    del body["endpoint"]
    error = error_of(bob_api.post("/api/runs", body), 400)
    assert (error["code"], error["field"]) == ("missing_field", "endpoint")


def test_an_unknown_tool_error_lists_every_unknown_name(
    bob_api: Api, body: dict[str, Any],
) -> None:
    error = error_of(bob_api.post("/api/runs", body | {
        "tools": ["teleport", "get_weather", "fly"]}), 400)
    assert error["unknown"] == ["teleport", "fly"]


def test_bad_parameters_list_the_pydantic_problems(bob_api: Api, body: dict[str, Any]) -> None:
    error = error_of(bob_api.post("/api/runs", body | {"parameters": {
        "temperature": "hot", "tool_choice": "sometimes", "colour": "red"}}), 400)

    assert (error["code"], error["field"]) == ("invalid_field", "parameters")
    locs = {tuple(p["loc"][:1]) for p in error["problems"]}
    assert {("temperature",), ("tool_choice",), ("colour",)} <= locs
    assert all(p["msg"] for p in error["problems"])
    assert "hot" not in json.dumps(error)  # the input is not echoed back


def test_no_policy_at_all(bob_api: Api, body: dict[str, Any], policy: ErrorPolicy) -> None:
    policy.delete()
    error = error_of(bob_api.post("/api/runs", body), 400)
    assert (error["code"], error["field"]) == ("missing_field", "policy")


def test_a_disabled_tool_is_refused(
    bob_api: Api, body: dict[str, Any], demo_tools: dict[str, ToolRegistration],
) -> None:
    ToolRegistration.objects.filter(name="get_weather").update(enabled=False)
    error = error_of(bob_api.post("/api/runs", body), 400)
    assert error["code"] == "invalid_request"
    assert "get_weather" in error["message"]


def test_a_body_over_the_limit_is_413(bob_api: Api, body: dict[str, Any]) -> None:
    big = body | {"messages": [{"role": "user", "content": "x" * 1_100_000}]}
    error = error_of(bob_api.post("/api/runs", big), 413)
    assert error["code"] == "too_large"
    assert not Run.objects.exists()


def test_a_body_over_djangos_own_limit_is_413_json_too(
    bob_api: Api, body: dict[str, Any],
) -> None:
    huge = body | {"messages": [{"role": "user", "content": "x" * 3_000_000}]}
    error = error_of(bob_api.post("/api/runs", huge), 413)
    assert error["code"] == "too_large"


@pytest.mark.parametrize("after", ["-1", "x", "1.5", "", "²", "1e3", " 1", "0x10"])
def test_a_bad_after_is_400(bob_api: Api, body: dict[str, Any], after: str) -> None:
    run_id = bob_api.post("/api/runs", body).json()["id"]
    error = error_of(bob_api.get(f"/api/runs/{run_id}/events?after={after}"), 400)
    assert (error["code"], error["field"]) == ("invalid_field", "after")


@pytest.mark.parametrize("after", [str(10**26), "9" * 5000, str(2**63 - 1)])
def test_an_after_beyond_any_seq_finds_nothing(
    bob_api: Api, body: dict[str, Any], after: str,
) -> None:
    run_id = bob_api.post("/api/runs", body).json()["id"]
    response = bob_api.get(f"/api/runs/{run_id}/events?after={after}")
    assert response.status_code == 200
    assert response.json()["events"] == []


HUGE = "9" * 5000


@pytest.mark.parametrize(("key", "raw_json", "code", "field"), [
    ("endpoint", HUGE, "invalid_json", None),
    ("policy", HUGE, "invalid_json", None),
    ("policy", f'"{HUGE}"', "unknown_policy", "policy"),
    ("policy", str(2**64), "unknown_policy", "policy"),
    ("messages", '[{"role": "user", "content": "bad \\ud800 half"}]', "invalid_field",
     "messages[0].content"),
    ("endpoint", '"\\udc00"', "invalid_field", "endpoint"),
    ("tools", '["get_weather", "\\ud83d"]', "invalid_field", "tools[1]"),
    ("policy_overrides", '{"default_tool_timeout": NaN}', "invalid_json", None),
    ("parameters", '{"temperature": Infinity}', "invalid_json", None),
])
def test_hostile_numbers_and_lone_surrogates_are_400_naming_the_field(
    bob_api: Api, body: dict[str, Any], key: str, raw_json: str, code: str,
    field: str | None,
) -> None:
    """Each of these was a 500 (and, with DEBUG on, a debug page showing the token)."""
    others = json.dumps({k: v for k, v in body.items() if k != key})
    response = bob_api.post("/api/runs", f'{others[:-1]}, "{key}": {raw_json}}}')

    error = error_of(response, 400)
    assert error["code"] == code
    assert error.get("field") == field
    assert not Run.objects.exists()


def test_an_unexpected_error_is_a_json_500_without_the_debug_page(
    bob_api: Api, body: dict[str, Any], monkeypatch: pytest.MonkeyPatch, settings: Any,
) -> None:
    from tools_app.runs import services

    settings.DEBUG = True

    def broken(**kwargs: Any) -> None:
        secret_local = "the token is in a local"  # noqa: F841 (what the debug page showed)
        raise RuntimeError("boom")

    monkeypatch.setattr(services, "run_create", broken)
    response = bob_api.post("/api/runs", body)

    error = error_of(response, 500)
    assert error["code"] == "internal_error"
    assert response["content-type"] == "application/json"
    assert "the token is in a local" not in response.content.decode()


def test_another_users_run_is_404(
    bob_api: Api, charlie_api: Api, body: dict[str, Any],
) -> None:
    run_id = bob_api.post("/api/runs", body).json()["id"]
    for path in (f"/api/runs/{run_id}", f"/api/runs/{run_id}/events",
                 f"/api/runs/{run_id}/events?after=0"):
        error = error_of(charlie_api.get(path), 404)
        assert error["code"] == "not_found"
    assert bob_api.get(f"/api/runs/{run_id}/events").status_code == 200


def test_a_run_that_does_not_exist_is_404(bob_api: Api) -> None:
    for path in (f"/api/runs/{MISSING_RUN}", f"/api/runs/{MISSING_RUN}/events",
                 f"/api/runs/{MISSING_RUN}/events?after=3"):
        assert error_of(bob_api.get(path), 404)["code"] == "not_found"
    assert bob_api.get("/api/runs/not-a-uuid").status_code == 404


def test_the_wrong_method_is_405(bob_api: Api, body: dict[str, Any]) -> None:
    run_id = bob_api.post("/api/runs", body).json()["id"]
    assert bob_api.post(f"/api/runs/{run_id}", {}).status_code == 405
    assert bob_api.post(f"/api/runs/{run_id}/events", {}).status_code == 405
    response = bob_api.client.delete("/api/runs", headers=bob_api.headers)
    assert response.status_code == 405
    assert Run.objects.count() == 1


def test_runs_started_through_the_api_and_the_pages_are_the_same_runs(
    bob: AbstractUser, bob_api: Api, bob_client: Client, weather_endpoint: ModelEndpoint,
    policy: ErrorPolicy,
) -> None:
    run = start_run(bob, weather_endpoint, [], policy)
    assert bob_api.get(f"/api/runs/{run.pk}").json()["status"] == "queued"
    run_id = bob_api.post("/api/runs", {"endpoint": "weather", "messages": [
        {"role": "user", "content": "hi"}]}).json()["id"]
    assert bob_client.get(f"/runs/{run_id}/").status_code == 200


def test_a_failing_token_lookup_is_a_json_500_too(
    bob_api: Api, body: dict[str, Any], monkeypatch: pytest.MonkeyPatch, settings: Any,
) -> None:

    from tools_app.web.api import base

    settings.DEBUG = True

    def database_down(token: str) -> None:
        raise RuntimeError("database down")

    monkeypatch.setattr(base, "user_for_token", database_down)
    response = bob_api.post("/api/runs", body)

    assert error_of(response, 500)["code"] == "internal_error"
    assert bob_api.headers["Authorization"].split()[1] not in response.content.decode()
