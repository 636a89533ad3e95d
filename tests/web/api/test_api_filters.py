"""`GET /api/runs` filters (status, endpoint, tool, user, q, since, until) and keyset
pagination; an unknown filter or a bad value is a 400 that names it (before, every
filter was silently ignored and everything came back)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractUser

from tests.web.support import Api, error_of
from tools_app.models import Run
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_api(alice: AbstractUser) -> Api:
    return Api(create_token(alice, "ops")[1])


def ids(api: Api, query: str) -> list[str]:
    response = api.get(f"/api/runs?{query}")
    assert response.status_code == 200, response.content
    return [r["id"] for r in response.json()["runs"]]


def names(filter_world: dict[str, Run], found: list[str]) -> list[str]:
    by_id = {str(run.pk): name for name, run in filter_world.items()}
    return [by_id[i] for i in found]


@pytest.mark.parametrize(("query", "expected"), [
    ("", ["queued", "broken", "weather"]),  # newest first
    ("status=succeeded", ["weather"]),
    ("status=failed,queued", ["queued", "broken"]),
    ("endpoint=failing", ["queued", "broken"]),
    ("endpoint=weather", ["weather"]),
    ("tool=get_weather", ["weather"]),
    ("tool=calculator", ["broken"]),  # charlie's queued run called nothing yet
    ("user=charlie", ["queued"]),
    ("q=paris", ["weather"]),  # the user's message, any case
    ("q=DIVISION+by", ["broken"]),  # a tool call's error
    ("q=Hangzhou", ["weather"]),  # a tool call's result
    ("status=failed&endpoint=failing&user=bob", ["broken"]),
])
def test_filters_narrow_the_list(staff_api: Api, filter_world: dict[str, Run], query: str,
                                 expected: list[str]) -> None:
    assert names(filter_world, ids(staff_api, query)) == expected


def test_time_bounds(staff_api: Api, filter_world: dict[str, Run]) -> None:
    middle = filter_world["broken"].created_at
    since = middle.isoformat().replace("+00:00", "Z")
    assert names(filter_world, ids(staff_api, f"since={since}")) == ["queued", "broken"]
    assert names(filter_world, ids(staff_api, f"until={since}")) == ["weather"]


def test_a_user_sees_only_their_own_whatever_the_filters(
    bob_api: Api, filter_world: dict[str, Run],
) -> None:
    assert names(filter_world, ids(bob_api, "")) == ["broken", "weather"]
    assert ids(bob_api, "user=charlie") == []


def test_pages_follow_the_cursor_without_gaps_or_repeats(
    staff_api: Api, filter_world: dict[str, Run],
) -> None:
    seen: list[str] = []
    query = "limit=1"
    for _ in range(5):
        body = staff_api.get(f"/api/runs?{query}").json()
        seen += [r["id"] for r in body["runs"]]
        if body["next_cursor"] is None:
            break
        query = f"limit=1&cursor={body['next_cursor']}"
    assert names(filter_world, seen) == ["queued", "broken", "weather"]


@pytest.mark.parametrize(("query", "field", "words"), [
    ("colour=red", "colour", "unknown filter colour"),
    ("status=exploded", "status", "status must be one or more of"),
    ("status=", "status", "status must be"),
    ("since=yesterday", "since", "ISO 8601"),
    ("until=2026-13-45T00:00:00", "until", "ISO 8601"),
    ("limit=0", "limit", "from 1 to 200"),
    ("limit=5000", "limit", "from 1 to 200"),
    ("limit=" + "9" * 5000, "limit", "from 1 to 200"),
    ("cursor=not-a-cursor", "cursor", "next_cursor this API returned"),
    ("q=" + "x" * 201, "q", "1 to 200 characters"),
])
def test_a_bad_filter_is_a_400_naming_it(staff_api: Api, filter_world: dict[str, Run], query: str,
                                         field: str, words: str) -> None:
    error = error_of(staff_api.get(f"/api/runs?{query}"), 400)
    assert (error["code"], error["field"]) == ("invalid_filter", field)
    assert words in error["message"]
