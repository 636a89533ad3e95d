""""Save as a test case" on calls ticked in /calls/ (issue 41), in a real browser: one of
a run's two calls ticked in the Case column becomes a case whose expectation is that
call, others allowed around it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from .checks import SCREENSHOTS, no_dialogs, screenshot_path
from .support import Server, start_run, wait_status

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

SUITE = "Browser: calls suite"


async def test_a_ticked_call_becomes_a_case(open_page: Any, server: Server) -> None:
    page = await open_page(user="bob")
    dialogs = no_dialogs(page)
    run_id = await start_run(page, endpoint="Scripted: weather in parallel",
                             tools=["get_weather"], message="Weather in Hangzhou and London?",
                             system_prompt="", policy="Default", tool_choice="auto",
                             parallel=True, max_rounds="")
    assert await wait_status(page) == "succeeded"

    await page.goto("/calls/?tool=get_weather")
    rows = page.locator(f"tbody tr:has(a[href='/runs/{run_id}/'])")
    assert await rows.count() == 2
    london = rows.filter(has=page.locator("details[data-cell=arguments]", has_text="London"))
    await london.locator("input[name=call]").check()
    await page.fill("#save-calls-case input[name=suite]", SUITE)
    await page.fill("#save-calls-case input[name=case]", "london only")
    if SCREENSHOTS:
        await page.screenshot(path=screenshot_path(server, "calls-save-case.png"))
    await page.click("#save-calls-case button[type=submit]")

    await page.wait_for_url(re.compile(r"/suites/\d+/cases/\d+/$"))
    sentences = await page.locator("#case-sentences li").all_inner_texts()
    assert sentences[0] == ("The model makes these calls in this order (others may come "
                            "between): get_weather.")
    assert 'In a call of get_weather, the arguments are equal to {"city": "London"}.' in (
        sentences)
    assert not any("Hangzhou" in s for s in sentences)
    if SCREENSHOTS:
        await page.screenshot(path=screenshot_path(server, "calls-case.png"), full_page=True)
    assert dialogs == []
