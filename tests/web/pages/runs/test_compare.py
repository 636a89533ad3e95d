"""Comparing any two runs (page and API): who they are and how they relate, rounds
aligned by index, calls by (tool, arguments), the first divergent round marked, diffs of
arguments, results and text (escaped), deltas of latency, tokens and errors; the page's
folded rounds; two rows ticked in a list; only runs the user may see."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.runs.support import execute
from tests.web.support import Api, Tree, error_of, start_run
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, ToolCall, ToolRegistration
from tools_app.runs.debugger.rerun import ReplayOptions, run_rerun
from tools_app.web.api.tokens import create_token
from tools_app.web.pages.runs import compare as compare_page

pytestmark = pytest.mark.django_db

PARIS_SCRIPT = [
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]},
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2*3"}},
                    {"name": "calculator", "arguments": {"expression": "1/0"}}]},
    {"text": "results: {last_results}"},
]


@pytest.fixture
def pair(bob: AbstractUser, make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
         policy: ErrorPolicy) -> tuple[Run, Run]:
    """A run and its rerun with the current configuration, whose script asks the second
    round otherwise (other arguments, and a call the first run did not make)."""
    endpoint = make_endpoint(PARIS_SCRIPT, name="calc")
    a = start_run(bob, endpoint, [demo_tools["calculator"]], policy, "Compute")
    execute(a)
    changed = [PARIS_SCRIPT[0],
               {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2*4"}},
                               {"name": "calculator", "arguments": {"expression": "1/0"}},
                               {"name": "calculator", "arguments": {"expression": "9"}}]},
               {"text": "<b>other</b> {last_results}"}]
    ModelEndpoint.objects.filter(pk=endpoint.pk).update(script=changed)
    b = run_rerun(run=a, user=bob, mode="current")
    execute(b)
    return a, b


def test_the_api_aligns_rounds_and_calls(bob: AbstractUser, pair: tuple[Run, Run]) -> None:
    a, b = pair
    api = Api(create_token(bob, "ci")[1])

    body = api.get(f"/api/runs/compare?a={a.pk}&b={b.pk}").json()

    assert (body["a"]["id"], body["b"]["id"]) == (str(a.pk), str(b.pk))
    assert body["first_divergent_round"] == 2
    assert [r["diverges"] for r in body["rounds"]] == [False, True, True]
    assert [r["first_divergent"] for r in body["rounds"]] == [False, True, False]
    second = body["rounds"][1]["calls"]
    assert [(c["tool"], c["status"]) for c in second] == [
        ("calculator", "same"), ("calculator", "arguments_differ"),
        ("calculator", "only_b")]
    # 1/0 was the second call in A and in B: aligned by its arguments, not its place
    assert second[0]["a"]["result"] == "ValueError: division by zero"
    assert (second[0]["a"]["call_index"], second[0]["b"]["call_index"]) == (1, 1)
    assert '-  "expression": "2*3"' in second[1]["arguments_diff"]
    assert '+  "expression": "2*4"' in second[1]["arguments_diff"]
    assert "-6" in second[1]["result_diff"]
    assert "+8" in second[1]["result_diff"]
    totals = {t["name"]: t for t in body["totals"]}
    assert (totals["tool calls"]["a"], totals["tool calls"]["b"],
            totals["tool calls"]["delta"]) == (3, 4, 1)
    assert totals["tool calls"]["delta_text"] == "+1"
    assert totals["errors"]["delta"] == 0
    assert totals["wall time"]["a_text"].endswith(("ms", " s"))
    assert totals["total tokens"]["delta"] == b.total_tokens - a.total_tokens
    assert body["final_text"]["same"] is False


def test_a_run_compared_with_its_rerun_as_it_was_is_the_same(
    bob: AbstractUser, bob_client: Client, make_endpoint: Any,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    endpoint = make_endpoint(PARIS_SCRIPT, name="calc")
    a = start_run(bob, endpoint, [demo_tools["calculator"]], policy, "Compute")
    execute(a)
    b = run_rerun(run=a, user=bob, mode="as_it_was")
    execute(b)

    page = bob_client.get(f"/runs/{b.pk}/").content.decode()
    link = Tree(page).by_id("compare-parent").attrs["href"]
    assert link == f"/runs/compare?a={a.pk}&b={b.pk}"

    compared = Tree(bob_client.get(link).content.decode())
    assert "Same tool calls" in " ".join(t for t, _ in compared.texts)
    assert [e.attrs["data-diverges"] for e in compared.elements
            if "data-diverges" in e.attrs] == ["false"] * 3


def test_the_page_marks_the_first_divergent_round_and_escapes(
    bob_client: Client, pair: tuple[Run, Run],
) -> None:
    a, b = pair
    ToolCall.objects.filter(run=b, call_index=0, round__index=0).update(
        result_text="<script>alert(1)</script>")

    response = bob_client.get(f"/runs/compare?a={a.pk}&b={b.pk}")

    page = response.content.decode()
    tree = Tree(page)
    marker = tree.by_id("first-divergent")
    assert tree.by_id("cmp-round-0") in marker.ancestors_or_self()  # now round 1 differs
    assert tree.by_id("cmp-round-1").attrs["data-diverges"] == "true"
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>other</b>" not in page
    assert "&lt;b&gt;other&lt;/b&gt;" in page


def test_only_visible_runs_are_compared(
    pair: tuple[Run, Run], charlie: AbstractUser, alice_client: Client,
) -> None:
    a, b = pair
    other = Client()
    other.force_login(charlie)
    assert other.get(f"/runs/compare?a={a.pk}&b={b.pk}").status_code == 404
    api = Api(create_token(charlie, "ci")[1])
    error = error_of(api.get(f"/api/runs/compare?a={a.pk}&b={b.pk}"), 404)
    assert error["code"] == "not_found"
    assert alice_client.get(f"/runs/compare?a={a.pk}&b={b.pk}").status_code == 200


def test_both_runs_must_be_named(bob: AbstractUser, bob_client: Client,
                                 pair: tuple[Run, Run]) -> None:
    a, _ = pair
    response = bob_client.get(f"/runs/compare?a={a.pk}")
    assert response.status_code == 400
    assert "b missing" in response.content.decode()
    api = Api(create_token(bob, "ci")[1])
    error = error_of(api.get(f"/api/runs/compare?b={a.pk}"), 400)
    assert (error["code"], error["field"]) == ("missing_field", "a")
    assert error_of(api.get(f"/api/runs/compare?a=nope&b={a.pk}"), 404)["code"] == "not_found"
    assert bob_client.get(f"/runs/compare?a={a.pk}&b=nope").status_code == 404


# -- any two runs -------------------------------------------------------------------------


def test_the_page_says_who_both_runs_are_and_how_they_relate(
    bob: AbstractUser, bob_client: Client, make_endpoint: Any,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    a = start_run(bob, make_endpoint(PARIS_SCRIPT, name="calc"), [demo_tools["calculator"]],
                  policy, "Compute")
    execute(a)
    b = run_rerun(run=a, user=bob, mode="as_it_was",
                  replay=ReplayOptions(model="recorded", tools="recorded"))
    execute(b)

    page = Tree(bob_client.get(f"/runs/compare?a={a.pk}&b={b.pk}").content.decode())

    assert page.by_id("compare-a-id").attrs["class"] == "run-id"
    assert _text(page, "compare-a-id") == str(a.pk)
    assert _text(page, "compare-b-id") == str(b.pk)
    assert _text(page, "compare-relation").startswith(
        "B is a replaying rerun (as it was) of A.")
    rows = _fact_rows(page)
    assert "model recorded, tools recorded; where it diverges: stop" in rows["replay"][1]
    assert "none (live)" in rows["replay"][0]
    assert rows["endpoint"] == ["calc", "calc"]
    assert rows["lineage"][1].startswith("replay A replaying rerun (as it was) of")
    # the lineage badges of the runs list and the run page, with their tooltips
    badges = [e for e in page.elements if e.tag == "span" and "data-lineage" in e.attrs]
    assert [(b.attrs["data-lineage"], (b.attrs["title"] or "").split(":")[0]) for b in badges] \
        == [("replay", "A rerun answering from a recording")]
    assert rows["times"][0].startswith(f"created {a.created_at:%Y-%m-%d}")
    assert "finished" in rows["times"][1]


def test_two_unrelated_runs_compare(bob: AbstractUser, bob_client: Client, make_endpoint: Any,
                                    demo_tools: dict[str, ToolRegistration],
                                    policy: ErrorPolicy) -> None:
    calc = start_run(bob, make_endpoint(PARIS_SCRIPT, name="calc"), [demo_tools["calculator"]],
                     policy, "Compute")
    weather = start_run(bob, make_endpoint([{"tool_calls": [
        {"name": "get_weather", "arguments": {"city": "Oslo"}}]}, {"text": "ok"}],
        name="weather"), [demo_tools["get_weather"]], policy, "Weather")
    for run in (calc, weather):
        execute(run)

    response = bob_client.get(f"/runs/compare?a={calc.pk}&b={weather.pk}")

    page = Tree(response.content.decode())
    assert _text(page, "compare-relation").startswith("Not related")
    assert _fact_rows(page)["endpoint"] == ["calc", "weather"]
    first = page.by_id("cmp-round-0")
    assert first.attrs["data-diverges"] == "true"
    statuses = [e.attrs["data-status"] for e in page.elements if "data-status" in e.attrs]
    assert statuses == ["only_a", "only_b", "only_a", "only_a"]


def test_rounds_that_are_the_same_are_folded_and_open_one_at_a_time(
    bob_client: Client, pair: tuple[Run, Run],
) -> None:
    a, b = pair
    query = f"a={a.pk}&b={b.pk}"

    page = Tree(bob_client.get(f"/runs/compare?{query}").content.decode())

    assert [(r.attrs["data-round"], r.attrs["data-diverges"], r.attrs["data-detailed"])
            for r in page.elements if "data-detailed" in r.attrs] == [
        ("0", "false", "false"), ("1", "true", "true"), ("2", "true", "true")]
    folded = page.by_id("cmp-round-body-0")
    assert folded.attrs["hx-get"] == f"/runs/compare?{query}&round=0"
    assert _calls_in(page, "cmp-round-0") == 0
    # with htmx: the round's calls alone; without: the page with that round open
    fragment = bob_client.get(f"/runs/compare?{query}&round=0", headers={"HX-Request": "true"})
    assert "<html" not in fragment.content.decode()
    opened = Tree(fragment.content.decode())
    assert opened.by_id("cmp-round-body-0").attrs.get("hx-get") is None
    assert [e.attrs["data-status"] for e in opened.elements if "data-status" in e.attrs] == [
        "same"]
    whole = Tree(bob_client.get(f"/runs/compare?{query}&round=0").content.decode())
    assert whole.by_id("cmp-round-0").attrs["data-detailed"] == "true"
    assert _calls_in(whole, "cmp-round-0") == 1
    assert bob_client.get(f"/runs/compare?{query}&round=7",
                          headers={"HX-Request": "true"}).status_code == 404
    assert bob_client.get(f"/runs/compare?{query}&round=x").status_code == 400


def test_differing_rounds_past_the_budget_are_folded(
    bob_client: Client, pair: tuple[Run, Run], monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = pair
    monkeypatch.setattr(compare_page, "DETAIL_CALLS", 1)

    page = Tree(bob_client.get(f"/runs/compare?a={a.pk}&b={b.pk}").content.decode())

    # the first differing round always (its 3 calls are over the budget), not the next
    assert [r.attrs["data-detailed"] for r in page.elements if "data-detailed" in r.attrs] == [
        "false", "true", "false"]
    assert "hx-get" in page.by_id("cmp-round-body-2").attrs


def test_the_page_reads_a_fixed_number_of_rows_queries(
    bob_client: Client, pair: tuple[Run, Run], django_assert_max_num_queries: Any,
) -> None:
    a, b = pair
    with django_assert_max_num_queries(10):  # not one per round or per call
        assert bob_client.get(f"/runs/compare?a={a.pk}&b={b.pk}").status_code == 200


def test_the_api_says_how_the_runs_relate(bob: AbstractUser, pair: tuple[Run, Run]) -> None:
    a, b = pair
    body = Api(create_token(bob, "ci")[1]).get(f"/api/runs/compare?a={a.pk}&b={b.pk}").json()
    assert body["relation"]["kind"] == "child"
    assert body["b"]["lineage"] == {
        "kind": "rerun", "of": str(a.pk),
        "text": "a rerun (with the configuration of its day)"}
    assert (body["a"]["parent"], body["b"]["parent"]) == (None, str(a.pk))
    assert body["b"]["replay"] is None
    assert body["a"]["finished_at"] is not None
    assert [r["counts"] for r in body["rounds"]] == [
        {"same": 1}, {"same": 1, "arguments_differ": 1, "only_b": 1}, {}]


# -- ticks in the lists -------------------------------------------------------------------


def test_two_ticked_runs_open_the_page_older_first(bob_client: Client,
                                                    pair: tuple[Run, Run]) -> None:
    a, b = pair
    response = bob_client.get(f"/runs/compare?run={b.pk}&run={a.pk}")
    assert response.status_code == 302
    assert response["Location"] == f"/runs/compare?a={a.pk}&b={b.pk}"


@pytest.mark.parametrize(("ticks", "message"), [
    ([], "Tick exactly two rows to compare their runs: none was ticked."),
    (["a"], "Tick exactly two rows to compare their runs: one was ticked."),
    (["a", "b", "a"], "Tick exactly two rows to compare their runs: 3 were ticked."),
    (["a", "a"], "The two ticked rows are of the same run: tick rows of two different runs."),
])
def test_ticks_other_than_two_runs_are_refused_with_a_message(
    bob_client: Client, pair: tuple[Run, Run], ticks: list[str], message: str,
) -> None:
    ids = {"a": pair[0].pk, "b": pair[1].pk}
    query = "&".join(f"run={ids[t]}" for t in ticks) or "run="

    response = bob_client.get(f"/runs/compare?{query}")

    assert response.status_code == 400
    assert _text(Tree(response.content.decode()), "compare-refusal") == message


def test_a_run_the_user_may_not_see_is_refused_with_a_message(
    pair: tuple[Run, Run], charlie: AbstractUser, bob_client: Client,
) -> None:
    a, b = pair
    other = Client()
    other.force_login(charlie)
    response = other.get(f"/runs/compare?run={a.pk}&run={b.pk}")
    assert response.status_code == 404
    assert _text(Tree(response.content.decode()), "compare-refusal") == (
        f"Cannot compare: the first ticked run ({a.pk}) does not exist or is not one of "
        "your runs.")
    response = bob_client.get(f"/runs/compare?run={a.pk}&run=%3Cb%3Enope")
    assert response.status_code == 404
    assert "(&lt;b&gt;nope) does not exist" in response.content.decode()


def _text(page: Tree, element_id: str) -> str:
    element = page.by_id(element_id)
    return " ".join(" ".join(t.split()) for t, e in page.texts
                    if e is not None and element in e.ancestors_or_self())


def _fact_rows(page: Tree) -> dict[str, list[str]]:
    """Each data-fact row of the head table: its A and B cells' text."""
    rows = {}
    for row in (e for e in page.elements if "data-fact" in e.attrs):
        cells = [c for c in page.elements if c.tag == "td" and c.parent is row]
        rows[row.attrs["data-fact"] or ""] = [
            " ".join(t.strip() for t, e in page.texts
                     if e is not None and cell in e.ancestors_or_self()) for cell in cells[:2]]
    return rows


def _calls_in(page: Tree, section_id: str) -> int:
    section = page.by_id(section_id)
    return sum(1 for e in page.elements
               if e.tag == "tr" and "data-status" in e.attrs and section in e.ancestors_or_self())


def test_the_runs_list_ticks_runs_into_a_form_for_the_compare_page(
    bob_client: Client, pair: tuple[Run, Run],
) -> None:
    a, b = pair
    page = Tree(bob_client.get("/runs/").content.decode())

    form = page.by_id("compare-runs")
    assert (form.tag, form.attrs["method"], form.attrs["action"]) == (
        "form", "get", "/runs/compare")
    ticks = _ticks(page, form)
    assert ticks == [str(b.pk), str(a.pk)]  # newest first, like the rows
    assert "hx-preserve" in page.by_id(f"tick-{a.pk}").attrs
    # a live row's update keeps the box (and, with hx-preserve, its tick)
    row = Tree(bob_client.get(f"/runs/{a.pk}/row/").content.decode())
    assert row.by_id(f"tick-{a.pk}").attrs["value"] == str(a.pk)


def test_the_calls_list_ticks_the_run_of_each_call(bob_client: Client,
                                                   pair: tuple[Run, Run]) -> None:
    a, b = pair
    page = Tree(bob_client.get("/calls/").content.decode())

    form = page.by_id("compare-calls")
    assert (form.attrs["method"], form.attrs["action"]) == ("get", "/runs/compare")
    ticks = _ticks(page, form)
    assert sorted(set(ticks)) == sorted({str(a.pk), str(b.pk)})
    assert len(ticks) == ToolCall.objects.filter(run__in=pair).count()


def _ticks(page: Tree, form: Any) -> list[str]:
    return [e.attrs["value"] or "" for e in page.elements
            if e.tag == "input" and e.attrs.get("name") == "run" and form in e.ancestors_or_self()]
