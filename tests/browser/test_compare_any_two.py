"""Comparing any two runs in a real browser: two rows ticked in the runs list, or two
calls of different runs in the calls list, and Compare; the button waits for exactly two
ticks; a folded round of the comparison opens in place; a refusal says what to tick."""

from __future__ import annotations

from typing import Any

import pytest

from .checks import SCREENSHOTS, no_dialogs, screenshot_path
from .support import Server, start_run, wait_status

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

WEATHER = "Scripted: weather in parallel"
FAILING_AND_SLOW = "Scripted: failing + slow tools"


async def weather_run(page: Any, message: str) -> str:
    run_id = await start_run(page, endpoint=WEATHER, tools=["get_weather"], message=message,
                             system_prompt="", policy="Default", tool_choice="auto",
                             parallel=True, max_rounds="")
    assert await wait_status(page) == "succeeded"
    return run_id


async def hint(page: Any, form: str) -> tuple[bool, str]:
    button = page.locator(f"{form} button.compare-button")
    return await button.is_disabled(), await page.inner_text(f"{form} .compare-hint")


async def test_two_runs_ticked_in_the_runs_list_compare(open_page: Any) -> None:
    page = await open_page(user="bob")
    dialogs = no_dialogs(page)
    first = await weather_run(page, "Compare: weather, once")
    second = await weather_run(page, "Compare: weather, twice")
    third = await weather_run(page, "Compare: weather, thrice")

    await page.goto("/runs/")
    assert await hint(page, "#compare-runs") == (True, "Tick two rows to compare their runs.")
    await page.check(f"#tick-{second}")
    assert await hint(page, "#compare-runs") == (True, "1 ticked: tick one more.")
    await page.check(f"#tick-{first}")
    assert await hint(page, "#compare-runs") == (False, "2 ticked: ready to compare.")
    await page.check(f"#tick-{third}")
    assert await hint(page, "#compare-runs") == (True, "3 ticked: untick 1 to compare two.")
    await page.uncheck(f"#tick-{third}")

    await page.click("#compare-runs button.compare-button")

    await page.wait_for_url(f"**/runs/compare?a={first}&b={second}")
    assert await page.inner_text("#compare-a-id") == first
    assert await page.inner_text("#compare-b-id") == second
    assert (await page.inner_text("#compare-relation")).startswith("Not related")
    assert await page.inner_text("#compare-verdict") == (
        "Same tool calls, results and texts in every round.")
    # Same rounds come folded; opening one loads its calls in place.
    fold = page.locator("#cmp-round-0 details.round-fold")
    assert await page.locator("#cmp-round-0 tr.call").count() == 0
    await page.evaluate("window.__samePage = true")
    await fold.locator("summary").click()
    rows = page.locator("#cmp-round-0 tr.call")
    await rows.first.wait_for()
    assert await rows.evaluate_all("rows => rows.map(r => r.dataset.status)") == [
        "same", "same"]
    assert await page.evaluate("window.__samePage") is True
    assert dialogs == []


async def test_two_calls_ticked_in_the_calls_list_compare_their_runs(
    open_page: Any, server: Server,
) -> None:
    page = await open_page(user="bob")
    dialogs = no_dialogs(page)
    weather = await weather_run(page, "Compare: weather against failing tools")
    failing = await start_run(page, endpoint=FAILING_AND_SLOW,
                              tools=["always_fails", "slow_tool", "calculator"],
                              message="Compare: failing tools against weather",
                              system_prompt="", policy="Default", tool_choice="auto",
                              parallel=True, max_rounds="")
    assert await wait_status(page) == "succeeded"

    await page.goto("/calls/")
    ticks = "#compare-calls input[name=run]"
    # Two calls of one run: the server refuses, saying what to tick.
    await page.locator(f"{ticks}[value='{weather}']").nth(0).check()
    await page.locator(f"{ticks}[value='{weather}']").nth(1).check()
    assert await hint(page, "#compare-calls") == (False, "2 ticked: ready to compare.")
    await page.click("#compare-calls button.compare-button")
    await page.wait_for_url("**/runs/compare?run=*")
    assert await page.inner_text("#compare-refusal") == (
        "The two ticked rows are of the same run: tick rows of two different runs.")

    await page.goto("/calls/")
    await page.locator(f"{ticks}[value='{failing}']").first.check()
    await page.locator(f"{ticks}[value='{weather}']").first.check()
    await page.click("#compare-calls button.compare-button")

    await page.wait_for_url(f"**/runs/compare?a={weather}&b={failing}")
    verdict = await page.inner_text("#compare-verdict")
    assert verdict == "The runs part at round 1."
    assert await page.get_attribute("#cmp-round-0", "data-detailed") == "true"
    statuses = await page.locator("#cmp-round-0 tr.call").evaluate_all(
        "rows => rows.map(r => r.dataset.status)")
    assert statuses == ["only_a", "only_a", "only_b", "only_b", "only_b"]
    endpoints = await page.locator("tr[data-fact=endpoint] td").all_inner_texts()
    assert endpoints[:2] == [f"{WEATHER} (scripted)", f"{FAILING_AND_SLOW} (scripted)"]
    if SCREENSHOTS:
        await page.screenshot(path=screenshot_path(server, "compare-any-two.png"),
                              full_page=True)
    assert dialogs == []
