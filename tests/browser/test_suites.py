"""Test suites in a real browser (issue 41): a run saved as a test case from its page's
action bar, the case's expectations read as sentences, the suite run on two endpoints
from the suite's page, its matrix filling in live (htmx polling) with the pass rates,
and a failing cell opened on its runs' failed assertions."""

from __future__ import annotations

import re
from typing import Any

import pytest

from .checks import SCREENSHOTS, no_dialogs, screenshot_path
from .support import Server, start_run, wait_status

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

WEATHER = "Scripted: weather in parallel"
HALLUCINATING = "Scripted: hallucinated tool"
SUITE = "Browser: weather suite"


async def test_a_run_becomes_a_case_and_its_suite_runs_as_a_matrix(
        open_page: Any, server: Server) -> None:
    page = await open_page(user="bob")
    dialogs = no_dialogs(page)
    run_id = await start_run(page, endpoint=WEATHER, tools=["get_weather"],
                             message="Weather in Hangzhou and London?", system_prompt="",
                             policy="Default", tool_choice="auto", parallel=True,
                             max_rounds="")
    assert await wait_status(page) == "succeeded"

    await page.click("#save-case-action summary")
    await page.fill("#save-case-form input[name=suite]", SUITE)
    await page.fill("#save-case-form input[name=case]", "two cities")
    if SCREENSHOTS:
        await page.screenshot(path=screenshot_path(server, "suite-save-case.png"))
    await page.click("#save-case-form button[type=submit]")

    await page.wait_for_url(re.compile(r"/suites/\d+/cases/\d+/$"))
    sentences = await page.locator("#case-sentences li").all_inner_texts()
    assert sentences[0] == ("The model makes exactly these calls, in this order: "
                            "get_weather, get_weather.")
    assert 'In a call of get_weather, the arguments are equal to {"city": "Hangzhou"}.' in (
        sentences)
    assert sentences[-1] == "The run ends without any error."
    assert await page.locator("text=saved from").count() == 1
    assert run_id in (await page.get_attribute("text=this run", "href") or "")
    if SCREENSHOTS:
        await page.screenshot(path=screenshot_path(server, "suite-case.png"), full_page=True)
    case_url = page.url

    # Back on the run, the panel offers the suite's name once it is opened.
    await page.goto(f"/runs/{run_id}/")
    assert await page.locator("#suite-names option").count() == 0
    await page.click("#save-case-action summary")
    await page.wait_for_selector(f"#suite-names option[value='{SUITE}']", state="attached")
    await page.goto(case_url)

    await page.click(f"main a:text-is('{SUITE}')")
    await page.check(f"#suite-run-form input[name=endpoints][value='{WEATHER}']")
    await page.check(f"#suite-run-form input[name=endpoints][value='{HALLUCINATING}']")
    await page.fill("#suite-run-form input[name=repeat]", "2")
    await page.click("#suite-run-form button[type=submit]")

    await page.wait_for_url(re.compile(r"/suite-runs/[0-9a-f-]+/$"))
    # The matrix polls itself until the suite run has finished.
    await page.wait_for_selector("#suite-run-status:text('Finished')", timeout=30_000)
    good = page.locator(f"td[data-case='two cities'][data-endpoint='{WEATHER}']")
    bad = page.locator(f"td[data-case='two cities'][data-endpoint='{HALLUCINATING}']")
    assert (await good.locator(".rate").inner_text()) == "100%"
    assert (await bad.locator(".rate").inner_text()) == "0%"
    assert "2/2 of 2" in await good.inner_text()
    assert await good.get_attribute("class") == "cell pass"
    assert await bad.get_attribute("class") == "cell fail"
    assert await page.inner_text(".verdict") == "1 cell below the bar."
    if SCREENSHOTS:
        await page.screenshot(path=screenshot_path(server, "suite-matrix.png"), full_page=True)

    await bad.locator(".rate").click()
    await page.wait_for_url(re.compile(r"/cells/\d+/$"))
    failures = await page.locator("#cell-run-1 .failures li").all_inner_texts()
    assert failures[0].startswith("The model makes exactly these calls, in this order")
    assert "actual: [get_stock_price]" in failures[0]
    if SCREENSHOTS:
        await page.screenshot(path=screenshot_path(server, "suite-cell.png"), full_page=True)
    assert dialogs == []
