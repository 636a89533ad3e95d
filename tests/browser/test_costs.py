"""Costs in a real browser: a price set in the admin (a revision), then a run on that
endpoint shows its cost and the revision in its header and each round's cost, and the
runs list its cost; the price page lists the revision with what changed."""

from __future__ import annotations

import re
from typing import Any

import pytest

from .checks import SCREENSHOTS, screenshot_path
from .support import Server, start_run, wait_status

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

WEATHER = "Scripted: weather in parallel"
DOLLARS = re.compile(r"^\$\d+\.\d{2,8}$")


async def test_a_price_set_in_the_admin_prices_the_next_run(open_page: Any,
                                                             server: Server) -> None:
    page = await open_page(user="alice")
    await page.goto("/admin/tools_app/modelprice/add/")
    await page.select_option("select[name=endpoint]", label=WEATHER)
    await page.fill("input[name=input_per_million]", "1000")
    await page.fill("input[name=output_per_million]", "3000")
    await page.click("input[name=_continue]")
    history = page.locator(".field-revision_history table")
    assert "input_per_million" in await history.inner_text()
    revision = (await history.locator("tbody td").first.inner_text()).strip()
    assert re.fullmatch(r"#\d+", revision)

    run_id = await start_run(page, endpoint=WEATHER, tools=["get_weather"],
                             message="Weather in Hangzhou and Paris?", policy="Default",
                             tool_choice="auto", parallel=True, max_rounds="")
    assert await wait_status(page, "succeeded") == "succeeded"
    cost = page.locator("#run-cost dd")
    total = (await cost.inner_text()).split(" at price revision ")
    assert DOLLARS.match(total[0]), total
    assert total[1] == revision
    rounds = page.locator("#rounds .round-cost")
    assert await rounds.count() == 2
    for index in range(2):
        assert f"(revision {revision})" in await rounds.nth(index).inner_text()
    if SCREENSHOTS:
        await page.locator("#run-header").screenshot(path=screenshot_path(server,
                                                                          "run-cost.png"))

    await page.goto("/runs/")
    assert (await page.locator(f"#run-row-{run_id} td.cost").inner_text()).strip() == total[0]
