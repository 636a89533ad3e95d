"""The `q` filter is a full-text search with each database's own index (SQLite FTS5,
PostgreSQL tsvector + GIN), with the same meaning on both: every word of the query, as a
word prefix, in any case, in the run's own text or in one of its calls' (arguments,
result, error); any input is plain text, never an error."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser

from tests.web.support import Api
from tools_app.audit import search
from tools_app.audit.search_index import INDEXED_CHARS
from tools_app.models import Round, Run, ToolCall
from tools_app.web.api.tokens import create_token

pytestmark = [pytest.mark.django_db, pytest.mark.both]


@pytest.fixture(autouse=True, params=["ids", "walk"])
def plan(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test with both ways a runs search can go (`audit.search`): reading the ids of
    the runs that match (few matches), and checking each run in the list's order (many:
    forced here by a bound of -1 matches)."""
    monkeypatch.setattr(search, "FEW_MATCHES", 10**9 if request.param == "ids" else -1)
    return str(request.param)


@pytest.fixture
def api(alice: AbstractUser) -> Api:
    return Api(create_token(alice, "ops")[1])


def make_run(title: str, *, final_text: str | None = None, error_message: str = "",
             calls: tuple[dict[str, Any], ...] = ()) -> Run:
    run = Run.objects.create(title=title, final_text=final_text, error_message=error_message,
                             status="succeeded", snapshot={"endpoint": {"name": "e", "model": "m"},
                                                         "tools": [], "policy": {"name": "p"}})
    round_ = Round.objects.create(run=run, index=0)
    for index, call in enumerate(calls):
        ToolCall.objects.create(run=run, round=round_, call_index=index, call_id=f"c{index}",
                                tool_name="t", **call)
    return run


@pytest.fixture
def world(db: None) -> dict[str, Run]:
    return {
        "zurich": make_run("Plan a trip", calls=(
            {"arguments_raw": '{"city": "Zürich", "unit_system": "metric", "id": "A-1042"}',
             "result_text": '{"forecast": "snow and wind near the lake"}'},)),
        "paris": make_run("Weather in Paris, please", final_text="Clear skies over Paris.",
                          calls=({"arguments_raw": '{"city": "Paris"}', "result_text": "14 C"},)),
        "broken": make_run("Divide", error_message="ProviderError: upstream said NOT NOW",
                           calls=({"arguments_raw": '{"expression": "1/0"}',
                                   "error_message": "ZeroDivisionError: division by zero "
                                                    "(not retried)"},)),
    }


def run_names(api: Api, world: dict[str, Run], q: str) -> list[str]:
    response = api.client.get("/api/runs", {"q": q}, headers=api.headers)
    assert response.status_code == 200, response.content
    by_id = {str(run.pk): name for name, run in world.items()}
    return sorted(by_id[r["id"]] for r in response.json()["runs"])


def call_runs(api: Api, world: dict[str, Run], q: str) -> list[str]:
    response = api.client.get("/api/calls", {"q": q}, headers=api.headers)
    assert response.status_code == 200, response.content
    by_id = {str(run.pk): name for name, run in world.items()}
    return sorted(by_id[c["run"]] for c in response.json()["calls"])


@pytest.mark.parametrize(("q", "expected"), [
    ("zürich", ["zurich"]),  # a value inside JSON arguments
    ("ZÜRICH", ["zurich"]),  # any case
    ("Zür", ["zurich"]),  # a word prefix
    ("rich", []),  # not a substring
    ("zurich", []),  # accents are kept: the same on both databases
    ("city", ["paris", "zurich"]),  # a JSON key is a word too
    ("unit", ["zurich"]),  # the underscore separates words
    ("system", ["zurich"]),
    ("1042", ["zurich"]),  # "A-1042": the hyphen separates words
    ("zürich metric", ["zurich"]),  # every word must be there
    ("zürich imperial", []),
    ("metric, zürich!", ["zurich"]),  # order and punctuation do not matter
    ("snow lake", ["zurich"]),  # the result
    ("division", ["broken"]),  # the error
    ("ZeroDivision", ["broken"]),
    ("DivisionError", []),
])
def test_calls_match_words(api: Api, world: dict[str, Run], q: str,
                           expected: list[str]) -> None:
    assert call_runs(api, world, q) == expected


@pytest.mark.parametrize(("q", "expected"), [
    ("paris", ["paris"]),  # the title, the answer and a call
    ("skies", ["paris"]),  # the final answer only
    ("upstream", ["broken"]),  # the run's error only
    ("trip", ["zurich"]),  # the title only
    ("snow", ["zurich"]),  # a call's result only
    ("zero", ["broken"]),  # a call's error only
    ("paris weather", ["paris"]),
    ("trip snow", []),  # all the words in one row: the run's own, or one call's
    ("nowhere", []),
])
def test_runs_match_their_text_or_a_calls(api: Api, world: dict[str, Run], q: str,
                                          expected: list[str]) -> None:
    assert run_names(api, world, q) == expected


@pytest.mark.parametrize(("q", "expected"), [
    ("NEAR", ["zurich"]),  # an FTS5 operator is the plain word "near"
    ("near(snow lake)", ["zurich"]),
    ('"snow', ["zurich"]),
    ('snow"', ["zurich"]),
    ('"', []),  # nothing searchable: nothing matches, not an error
    ("*", []),
    ("-", []),
    ("-snow", ["zurich"]),  # not a NOT
    ("snow*", ["zurich"]),
    ("snow AND", ["zurich"]),  # "and" is a word like any
    ("NOT", ["broken"]),  # not a NOT: the word, in the run's error and the call's
    ("NOT OR", []),  # "or" is a word too, and neither error holds it
    ("snow | lake & !paris", []),  # tsquery operators: "paris" is a word too
    ("snow:*", ["zurich"]),
    ("' OR 1=1 --", []),
    ("'; DROP TABLE tools_app_run; --", []),
    ("\\", []),
    ("%", []),
    ("_", []),
    ("snow^2", []),
    ("a@b.com", []),
])
def test_hostile_queries_are_plain_text(api: Api, world: dict[str, Run], q: str,
                                        expected: list[str]) -> None:
    assert call_runs(api, world, q) == expected
    assert run_names(api, world, q) == expected
    assert Run.objects.count() == 3


def test_the_index_follows_updates_and_deletes(api: Api, world: dict[str, Run]) -> None:
    # as the recorder writes a finished call: an UPDATE of the result
    ToolCall.objects.filter(run=world["paris"]).update(result_text="fog in the morning")
    assert call_runs(api, world, "fog") == ["paris"]
    assert call_runs(api, world, "14") == []
    Run.objects.filter(pk=world["paris"].pk).update(final_text="Foggy.")
    assert run_names(api, world, "skies") == []
    assert run_names(api, world, "foggy") == ["paris"]
    world["broken"].delete()
    assert run_names(api, world, "zero") == []
    assert call_runs(api, world, "division") == []
    assert call_runs(api, world, "zürich") == ["zurich"]


def test_long_text_is_stored_and_its_head_is_searchable(api: Api,
                                                        world: dict[str, Run]) -> None:
    """Distinct words far past a tsvector's limit still store (PostgreSQL would refuse a
    whole field); the first INDEXED_CHARS characters of each field are searchable."""
    head = "alphaword " + " ".join(f"w{i}x" for i in range(40_000))
    long = make_run("long", calls=({"result_text": head + " omegaword"},))
    assert len(head) > 8 * INDEXED_CHARS
    world = world | {"long": long}
    assert call_runs(api, world, "alphaword") == ["long"]
    assert call_runs(api, world, "omegaword") == []


def test_the_page_searches_too(alice_client: Any, world: dict[str, Run]) -> None:
    html = alice_client.get("/calls/", {"q": "Zür metric"}).content.decode()
    assert f"/runs/{world['zurich'].pk}/#call-" in html
    assert f"/runs/{world['paris'].pk}/#call-" not in html
    html = alice_client.get("/runs/", {"q": 'NEAR "snow'}).content.decode()
    assert "Plan a trip" in html
    assert "Weather in Paris" not in html
