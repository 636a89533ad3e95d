"""Comparing two runs (page and API): rounds aligned by index, calls by (tool,
arguments), the first divergent round marked, diffs of arguments, results and text
(escaped), deltas of latency, tokens and errors; only runs the user may see."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.runs.support import execute
from tests.web.support import Api, Tree, error_of, start_run
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, ToolCall, ToolRegistration
from tools_app.runs.debugger.rerun import run_rerun
from tools_app.web.api.tokens import create_token

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
