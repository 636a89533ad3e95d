"""Breakpoints in a real browser: set in the playground, the run pauses before the
tool's calls, one call is stepped, the other's arguments are edited on its lane, then
the run continues to its end; and a pause before a round takes a message for the model."""

from __future__ import annotations

import os
from typing import Any

import pytest

from .support import Server, assert_equals_reload, fill_playground, submit_run, wait_status

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

WEATHER = "Scripted: weather in parallel"
SCREENSHOTS = os.environ.get("AGENTFORGE_SCREENSHOTS") == "1"


async def start_with_breakpoints(page: Any, **fields: str) -> None:
    await fill_playground(page, endpoint=WEATHER, tools=["get_weather"],
                          message="Weather in Hangzhou and London?")
    await page.locator("details.breakpoints summary").click()
    for name, value in fields.items():
        await page.fill(f"input[name={name}]", value)
    await submit_run(page)
    assert await wait_status(page, "waiting") == "waiting"
    await page.wait_for_selector("#paused", state="visible")


def lane(page: Any, index: int) -> Any:
    return page.locator("#round-0 article.lane").nth(index)


async def test_step_one_call_edit_the_other_and_continue(
    open_page: Any, server: Server,
) -> None:
    page = await open_page(user="alice", record=True)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    await start_with_breakpoints(page, break_before_tool="get_weather")
    assert "before a call of get_weather" in await page.locator("#paused h2").inner_text()
    await page.wait_for_selector("#round-0 .held >> nth=1")

    await page.locator("#paused button.step-call").click()

    # Hangzhou ran; London is held again.
    await page.wait_for_selector("#round-0 article.lane[data-state=succeeded]")
    await page.wait_for_selector("#paused", state="visible")
    assert await page.locator("#round-0 .held").count() == 1
    editor = lane(page, 1).locator(".held textarea")
    await editor.fill('{"city": 5}')
    await lane(page, 1).locator(".argument-problems li").filter(
        has_text="5 is not of type 'string'").wait_for()
    await editor.fill('{"city": "Paris"}')
    await page.wait_for_selector("#round-0 article.lane >> nth=1 >> "
                                 "textarea[aria-invalid=false]")
    if SCREENSHOTS:
        await page.locator("#timeline").screenshot(
            path=str(server.root / "docs" / "screenshots" / "breakpoint.png"))
    await page.locator("#paused button.continue").click()

    assert await wait_status(page, "succeeded") == "succeeded"
    final = await page.locator("#run-header .final .text").inner_text()
    assert "Hangzhou" in final
    assert "Paris" in final
    assert "London" not in final
    assert await page.locator("#paused").count() == 0
    await assert_equals_reload(page)
    assert errors == []
    assert await page.evaluate("window.__cspViolations") == []


async def test_a_message_added_before_a_round_reaches_the_timeline(
    open_page: Any, server: Server,
) -> None:
    page = await open_page(user="alice")
    await start_with_breakpoints(page, break_before_round="2")
    assert await page.locator("#paused[data-before=model]").count() == 1

    await page.fill("#paused textarea[name=message]", "Answer in <em>one</em> line")
    await page.locator("#paused button.continue").click()

    assert await wait_status(page, "succeeded") == "succeeded"
    added = page.locator("#round-1 .added-message")
    await added.wait_for()
    assert "Answer in <em>one</em> line" in await added.inner_text()
    assert await page.locator("#round-1 .added-message em").count() == 0
