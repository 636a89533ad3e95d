"""Costs where people read them: the runs list's column, the run page's total with the
price revision it used and each round's, compare's deltas, the tools index and a tool's
page, the run and call exports and the API's runs. A run without a price says "no
price", never $0."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal
from typing import Any, NamedTuple

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.prices_support import set_price
from tests.runs.support import execute, rounds
from tests.web.support import Api, start_run
from tools_app.models import ErrorPolicy, ModelEndpoint, PriceRevision, Run, ToolRegistration
from tools_app.models.prices import format_usd
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db

SCRIPT = [
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}},
                    {"name": "calculator", "arguments": {"expression": "2*3"}}]},
    {"text": "results: {last_results}"},
]


class World(NamedTuple):
    cheap: Run  # priced at revision `first`
    dear: Run  # the same script after the price was doubled (revision `second`)
    unpriced: Run
    first: PriceRevision
    second: PriceRevision


@pytest.fixture
def world(bob: AbstractUser, make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
          policy: ErrorPolicy) -> World:
    endpoint: ModelEndpoint = make_endpoint(SCRIPT, name="calc")
    tools = [demo_tools["calculator"]]
    first = set_price(endpoint, input_per_million="1000", output_per_million="3000")
    cheap = start_run(bob, endpoint, tools, policy, "Compute")
    execute(cheap)
    second = set_price(endpoint, input_per_million="2000", output_per_million="6000")
    dear = start_run(bob, endpoint, tools, policy, "Compute")
    execute(dear)
    unpriced = start_run(bob, make_endpoint(SCRIPT, name="free"), tools, policy, "Compute")
    execute(unpriced)
    return World(cheap, dear, unpriced, first, second)


def html(response: Any) -> str:
    assert response.status_code == 200
    return str(response.content.decode())


def streamed(response: Any) -> str:
    assert response.status_code == 200
    return b"".join(response.streaming_content).decode()


def test_the_runs_list_has_a_cost_column(bob_client: Client, world: World) -> None:
    page = html(bob_client.get("/runs/"))
    assert "<th>Cost</th>" in page
    assert f'data-cost="{world.cheap.cost_usd}">{format_usd(world.cheap.cost_usd)}</td>' in page
    assert f'data-cost="{world.dear.cost_usd}">{format_usd(world.dear.cost_usd)}</td>' in page
    assert 'data-cost="">no price</td>' in page


def test_the_run_page_shows_the_total_the_revision_and_each_rounds_cost(
    bob_client: Client, world: World,
) -> None:
    page = html(bob_client.get(f"/runs/{world.cheap.pk}/"))
    assert (f'<dd data-total="cost">{format_usd(world.cheap.cost_usd)} <small title="Dollars '
            'per million tokens: input $1000.00, cached input $1000.00, output $3000.00">'
            f"at price revision #{world.first.pk}</small>") in page
    for round_ in rounds(world.cheap):
        assert (f"cost {format_usd(round_.cost_usd)} <small>(revision #{world.first.pk})"
                "</small>") in page
    unpriced = html(bob_client.get(f"/runs/{world.unpriced.pk}/"))
    assert '<dd data-total="cost">no price</dd>' in unpriced
    assert "$0.00" not in unpriced


def test_compare_shows_the_cost_delta(bob_client: Client, bob: AbstractUser,
                                      world: World) -> None:
    a, b = world.cheap, world.dear
    assert a.cost_usd is not None
    assert b.cost_usd == 2 * a.cost_usd
    page = html(bob_client.get(f"/runs/compare?a={a.pk}&b={b.pk}"))
    assert (f'<tr class="total" data-total="cost"><th scope="row">Cost</th>'
            f"<td>{format_usd(a.cost_usd)}</td><td>{format_usd(b.cost_usd)}</td>"
            f'<td class="delta">+{format_usd(a.cost_usd)}</td></tr>') in page
    _, token = create_token(bob, "t")
    totals = {t["name"]: t for t in Api(token).get(
        f"/api/runs/compare?a={a.pk}&b={b.pk}").json()["totals"]}
    assert Decimal(totals["cost"]["delta"]) == a.cost_usd
    unpriced = html(bob_client.get(f"/runs/compare?a={a.pk}&b={world.unpriced.pk}"))
    assert (f"<td>{format_usd(a.cost_usd)}</td><td>no price</td>"
            '<td class="delta">-</td>') in unpriced


def test_the_tool_pages_show_the_tools_cost(bob_client: Client, world: World) -> None:
    # The rounds with calls are shared among their calls; the answering rounds are no
    # tool's.
    total = sum((rounds(run)[0].cost_usd or Decimal(0) for run in (world.cheap, world.dear)),
                Decimal(0))
    index = html(bob_client.get("/tools/"))
    assert f'data-figure="cost">{format_usd(total)}</td>' in index
    assert 'data-figure="cost">no price</td>' in index  # a tool never called
    page = html(bob_client.get("/tools/calculator/"))
    # Four of its six calls are priced (the unpriced run's two are not).
    assert (f'<dd id="stat-cost" title="Each call\'s share of its round\'s model cost">'
            f"{format_usd(total)} <small>(4 priced calls)</small></dd>") in page


def test_the_exports_carry_costs(bob_client: Client, world: World) -> None:
    runs = {row["id"]: row for row in csv.DictReader(io.StringIO(
        streamed(bob_client.get("/runs/export.csv"))))}
    assert Decimal(runs[str(world.cheap.pk)]["cost_usd"]) == world.cheap.cost_usd
    assert runs[str(world.cheap.pk)]["price_revision"] == str(world.first.pk)
    assert runs[str(world.unpriced.pk)]["cost_usd"] == ""
    lines = [json.loads(line) for line in
             streamed(bob_client.get("/runs/export.jsonl")).splitlines()]
    by_id = {row["id"]: row for row in lines}
    assert by_id[str(world.dear.pk)]["cost_usd"] == f"{world.dear.cost_usd:f}"
    assert by_id[str(world.dear.pk)]["price_revision"] == world.second.pk
    assert by_id[str(world.unpriced.pk)]["cost_usd"] is None
    calls = list(csv.DictReader(io.StringIO(streamed(bob_client.get("/calls/export.csv")))))
    shares = [Decimal(c["cost_usd"]) for c in calls if c["run_id"] == str(world.cheap.pk)]
    assert sum(shares) == rounds(world.cheap)[0].cost_usd
    assert {c["cost_usd"] for c in calls if c["run_id"] == str(world.unpriced.pk)} == {""}


def test_the_api_reports_costs_with_the_revision(bob: AbstractUser, world: World) -> None:
    _, token = create_token(bob, "t")
    api = Api(token)
    detail = api.get(f"/api/runs/{world.cheap.pk}").json()
    assert Decimal(detail["cost_usd"]) == world.cheap.cost_usd
    assert detail["price_revision"] == world.first.pk
    stored = rounds(world.cheap)
    assert [Decimal(r["cost_usd"]) for r in detail["rounds"]] == [r.cost_usd for r in stored]
    assert {r["price_revision"] for r in detail["rounds"]} == {world.first.pk}
    first_round = detail["rounds"][0]
    assert sum(Decimal(c["cost_usd"]) for c in first_round["tool_calls"]) == Decimal(
        first_round["cost_usd"])
    listed = {r["id"]: r for r in api.get("/api/runs").json()["runs"]}
    assert listed[str(world.unpriced.pk)]["cost_usd"] is None
    assert listed[str(world.unpriced.pk)]["price_revision"] is None
