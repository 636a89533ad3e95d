"""`GET /api/calls`: every tool call across runs, with the run filters (status, endpoint,
tool, user, q, since, until), the call's own (state, min_ms, max_ms, handler) and keyset
pages; an unknown filter or a bad value is a 400 naming it. Also its export. Marked
`both`: the lookups (joins, case-insensitive text, time bounds) differ across databases."""

from __future__ import annotations

import base64
import csv
import io
import json
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser

from tests.web import audit_world
from tests.web.support import Api, error_of
from tools_app.web.api.tokens import create_token

pytestmark = [pytest.mark.django_db, pytest.mark.both]

NEWEST_FIRST = ["c4", "c3", "c2", "c1", "b3", "b2", "b1", "a3", "a2", "a1"]


@pytest.fixture
def world(alice: AbstractUser, bob: AbstractUser, charlie: AbstractUser) -> dict[str, Any]:
    return audit_world.build({"bob": bob, "charlie": charlie})


@pytest.fixture
def staff_api(alice: AbstractUser) -> Api:
    return Api(create_token(alice, "ops")[1])


def found(api: Api, world: dict[str, Any], query: str) -> list[str]:
    response = api.get(f"/api/calls?{query}")
    assert response.status_code == 200, response.content
    return audit_world.labels(world, [c["id"] for c in response.json()["calls"]])


@pytest.mark.parametrize(("query", "expected"), [
    ("", NEWEST_FIRST),
    ("status=succeeded", ["a3", "a2", "a1"]),  # the run's status
    ("status=failed,running", ["c4", "c3", "c2", "c1", "b3", "b2", "b1"]),
    ("endpoint=beta", ["b3", "b2", "b1"]),
    ("tool=lookup", ["c4", "c3"]),
    ("user=bob", ["b3", "b2", "b1", "a3", "a2", "a1"]),
    ("q=paris", ["a1"]),  # arguments and result, any case
    ("q=SUNNY", ["a1"]),
    ("q=http+500", ["b2", "a2"]),  # the error message
    ("state=ok", ["c1", "a1"]),
    ("state=arguments_error", ["a3"]),
    ("state=execution_error", ["b2", "a2"]),
    ("state=timeout", ["b1"]),
    ("state=hallucinated", ["b3"]),
    ("state=rejected", ["c3"]),
    ("state=unknown_outcome", ["c4"]),
    ("state=in_progress", ["c2"]),
    ("state=timeout,rejected", ["c3", "b1"]),
    ("min_ms=30", ["c1", "b2", "b1", "a2"]),  # bounds included
    ("max_ms=10", ["c3", "a3", "a1"]),
    ("min_ms=10&max_ms=50", ["c1", "b2", "a1"]),
    ("handler=arguments_error_rethrow", ["a3"]),
    ("handler=hallucinated_tool_raise", ["b3"]),
    ("handler=-", ["c2", "c1", "a1"]),  # no handler decided
    ("tool=get_weather&state=ok&user=charlie", ["c1"]),
])
def test_each_filter_narrows_the_calls(staff_api: Api, world: dict[str, Any], query: str,
                                       expected: list[str]) -> None:
    assert found(staff_api, world, query) == expected


def test_time_bounds_are_the_runs_creation(staff_api: Api, world: dict[str, Any]) -> None:
    since = audit_world.at(120).isoformat().replace("+00:00", "Z")
    assert found(staff_api, world, f"since={since}") == NEWEST_FIRST[:7]
    assert found(staff_api, world, f"until={since}") == ["a3", "a2", "a1"]


def test_a_call_carries_where_it_ran_and_how_it_ended(staff_api: Api,
                                                      world: dict[str, Any]) -> None:
    call = staff_api.get("/api/calls?state=timeout").json()["calls"][0]
    run = world["b"]
    assert call == {
        "id": world["b1"].pk, "run": str(run.pk), "run_status": "failed",
        "url": f"/runs/{run.pk}/#call-{world['b1'].pk}", "endpoint": "beta",
        "started_by": "bob", "call_id": "call_b1", "tool": "get_weather", "state": "timeout",
        "stored_state": "timed_out", "handled_by": "execution_error_to_model",
        "is_error": True, "duration_ms": 1000.0, "arguments": "{}",
        "error_type": "ToolExecutionError", "error_message": "timed out after 1 s",
        "started_at": audit_world.at(130).isoformat(),
    }


def test_a_user_gets_only_the_calls_of_their_own_runs(bob_api: Api,
                                                      world: dict[str, Any]) -> None:
    assert found(bob_api, world, "") == ["b3", "b2", "b1", "a3", "a2", "a1"]
    assert found(bob_api, world, "user=charlie") == []
    assert found(bob_api, world, "tool=lookup") == []


def test_pages_follow_the_cursor_without_gaps_or_repeats(staff_api: Api,
                                                         world: dict[str, Any]) -> None:
    seen: list[int] = []
    query = "limit=3&tool=get_weather"
    for _ in range(5):
        body = staff_api.get(f"/api/calls?{query}").json()
        seen += [c["id"] for c in body["calls"]]
        if body["next_cursor"] is None:
            break
        query = f"limit=3&tool=get_weather&cursor={body['next_cursor']}"
    assert audit_world.labels(world, seen) == ["c2", "c1", "b2", "b1", "a2", "a1"]


def test_a_page_is_a_fixed_number_of_queries(staff_api: Api, world: dict[str, Any],
                                             django_assert_max_num_queries: Any) -> None:
    with django_assert_max_num_queries(4):  # token, its last use, the user's page
        assert len(staff_api.get("/api/calls").json()["calls"]) == 10


# The world's calls in each sort: a call that never started sorts by its run's creation
# (b3); calls without a duration come last either way (by id: newest first when longest
# first, oldest first when shortest first); a tool's calls newest first under "tool".
SORTED = {
    "started": ["a1", "a2", "a3", "b3", "b1", "b2", "c1", "c2", "c3", "c4"],
    "-started": ["c4", "c3", "c2", "c1", "b2", "b1", "b3", "a3", "a2", "a1"],
    "duration": ["c3", "a3", "a1", "c1", "b2", "a2", "b1", "b3", "c2", "c4"],
    "-duration": ["b1", "a2", "b2", "c1", "a1", "a3", "c3", "c4", "c2", "b3"],
    "tool": ["a3", "c2", "c1", "b2", "b1", "a2", "a1", "b3", "c4", "c3"],
    "-tool": ["c3", "c4", "b3", "a1", "a2", "b1", "b2", "c1", "c2", "a3"],
}


def walked(api: Api, world: dict[str, Any], query: str, limit: int) -> list[str]:
    """Every page of a query, following next_cursor to the end."""
    seen: list[int] = []
    cursor = ""
    for _ in range(20):
        body = api.get(f"/api/calls?{query}&limit={limit}{cursor}").json()
        seen += [c["id"] for c in body["calls"]]
        if body["next_cursor"] is None:
            return audit_world.labels(world, seen)
        cursor = f"&cursor={body['next_cursor']}"
    raise AssertionError("no last page")


@pytest.mark.parametrize("sort", list(SORTED))
def test_each_sort_pages_without_gaps_or_repeats(staff_api: Api, world: dict[str, Any],
                                                 sort: str) -> None:
    assert found(staff_api, world, f"sort={sort}") == SORTED[sort]
    for limit in (1, 3, 4):  # pages ending on ties, before and inside the no-duration calls
        assert walked(staff_api, world, f"sort={sort}", limit) == SORTED[sort]


def test_a_sort_keeps_the_filters(staff_api: Api, bob_api: Api, world: dict[str, Any]) -> None:
    assert found(staff_api, world, "sort=-duration&tool=get_weather") == [
        "b1", "a2", "b2", "c1", "a1", "c2"]
    assert walked(staff_api, world, "sort=duration&state=execution_error,rejected", 2) == [
        "c3", "b2", "a2"]
    assert found(bob_api, world, "sort=tool") == ["a3", "b2", "b1", "a2", "a1", "b3"]


@pytest.mark.parametrize(("query", "words"), [
    ("sort=size", "sort must be one of started, -started, duration, -duration, tool, -tool"),
    ("sort=tool&cursor=not-a-cursor", "for the same sort"),
    ("sort=tool&cursor=" + base64.urlsafe_b64encode(b"[" * 5000 + b"]" * 5000).decode(),
     "for the same sort"),
])
def test_a_bad_sort_or_its_cursor_is_a_400(staff_api: Api, world: dict[str, Any], query: str,
                                           words: str) -> None:
    error = error_of(staff_api.get(f"/api/calls?{query}"), 400)
    assert error["field"] in ("sort", "cursor")
    assert words in error["message"]


def test_a_cursor_serves_only_its_own_sort(staff_api: Api, world: dict[str, Any]) -> None:
    by_tool = staff_api.get("/api/calls?sort=tool&limit=2").json()["next_cursor"]
    newest = staff_api.get("/api/calls?limit=2").json()["next_cursor"]
    for query in (f"sort=-tool&cursor={by_tool}", f"cursor={by_tool}",
                  f"sort=tool&cursor={newest}"):
        assert error_of(staff_api.get(f"/api/calls?{query}"), 400)["field"] == "cursor"


@pytest.mark.parametrize(("query", "field", "words"), [
    ("colour=red", "colour", "unknown filter colour"),
    ("offset=10", "offset", "unknown filter offset"),
    ("state=exploded", "state", "state must be one or more of ok, arguments_error"),
    ("state=", "state", "state must be"),
    ("status=exploded", "status", "status must be one or more of"),
    ("min_ms=fast", "min_ms", "min_ms must be a number of milliseconds"),
    ("max_ms=-1", "max_ms", "max_ms must be a number of milliseconds"),
    ("max_ms=nan", "max_ms", "max_ms must be a number"),
    ("min_ms=50&max_ms=10", "min_ms", "min_ms must not be above max_ms"),
    ("since=yesterday", "since", "ISO 8601"),
    ("until=2026-13-45T00:00:00", "until", "ISO 8601"),
    ("limit=0", "limit", "from 1 to 200"),
    ("cursor=not-a-cursor", "cursor", "next_cursor this API returned"),
    ("q=" + "x" * 201, "q", "1 to 200 characters"),
])
def test_a_bad_filter_is_a_400_naming_it(staff_api: Api, world: dict[str, Any], query: str,
                                         field: str, words: str) -> None:
    error = error_of(staff_api.get(f"/api/calls?{query}"), 400)
    assert (error["code"], error["field"]) == ("invalid_filter", field)
    assert words in error["message"]


def test_a_runs_cursor_is_not_a_calls_cursor(staff_api: Api, world: dict[str, Any]) -> None:
    runs_cursor = staff_api.get("/api/runs?limit=1").json()["next_cursor"]
    assert runs_cursor
    error = error_of(staff_api.get(f"/api/calls?cursor={runs_cursor}"), 400)
    assert error["field"] == "cursor"


def test_the_api_needs_a_token(world: dict[str, Any]) -> None:
    assert Api(None).get("/api/calls").status_code == 401
    assert Api(None).get("/api/calls/export.csv").status_code == 401


# -- export ----------------------------------------------------------------------------


def streamed(response: Any) -> str:
    assert response.status_code == 200, response.content
    assert response.streaming
    return b"".join(response.streaming_content).decode()


def test_the_export_streams_the_filtered_calls(staff_api: Api, world: dict[str, Any]) -> None:
    response = staff_api.get("/api/calls/export.jsonl?tool=get_weather&state=ok")
    assert response["Content-Disposition"] == 'attachment; filename="calls.jsonl"'
    rows = [json.loads(line) for line in streamed(response).splitlines()]
    assert [r["call_id"] for r in rows] == ["call_c1", "call_a1"]
    assert rows[1] | {"id": 0, "run_id": ""} == {
        "id": 0, "run_id": "", "run_title": "run a", "run_status": "succeeded",
        "endpoint": "alpha", "started_by": "bob", "round": 0, "call_index": 0,
        "call_id": "call_a1", "tool": "get_weather", "state": "ok",
        "stored_state": "succeeded", "handled_by": "", "is_error": False,
        "stopped_run": False, "duration_ms": 10.0, "cost_usd": None,  # no price
        "started_at": audit_world.at(5).isoformat(),
        "finished_at": (audit_world.at(5) + audit_world.timedelta(milliseconds=10)).isoformat(),
        "error_type": "", "error_message": "", "arguments": '{"city": "Paris"}',
        "result_text": "Sunny in Paris"}


def test_a_user_exports_only_their_calls_formula_safe(bob_api: Api,
                                                      world: dict[str, Any]) -> None:
    world["a2"].error_message = "=HYPERLINK(\"http://evil\")"
    world["a2"].save()
    rows = list(csv.DictReader(io.StringIO(streamed(bob_api.get("/api/calls/export.csv")))))
    assert [r["call_id"] for r in rows] == [f"call_{x}" for x in NEWEST_FIRST[4:]]
    a2 = next(r for r in rows if r["call_id"] == "call_a2")
    assert a2["error_message"] == "'=HYPERLINK(\"http://evil\")"


def test_the_export_refuses_bad_filters_and_cursors(staff_api: Api,
                                                    world: dict[str, Any]) -> None:
    error = error_of(staff_api.get("/api/calls/export.csv?state=exploded"), 400)
    assert error["field"] == "state"
    assert error_of(staff_api.get("/api/calls/export.csv?limit=5"), 400)["field"] == "limit"
