"""An MCP tool end to end from the playground: the time server's answer on the live
timeline, a crash mid-call recorded as a tool error, the server's markup shown as text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .checks import Problems
from .support import Server, assert_equals_reload, start_run, wait_status
from .tool_forms import control, run_and_wait
from .world import MCP_ENDPOINT, MCP_TOOLS

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "screenshots" / "mcp-run.png"


async def test_a_playground_run_calls_the_time_server(server: Server, open_page: Any) -> None:
    server.world("mcp")
    page = await open_page(user="alice")
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))

    await start_run(page, endpoint=MCP_ENDPOINT, tools=list(MCP_TOOLS),
                    message="What time is it in UTC?")

    assert await wait_status(page) == "succeeded"
    timeline = await assert_equals_reload(page)
    lanes = page.locator("article.lane")
    time_lane = lanes.filter(has=page.locator("code.tool-name", has_text="get_current_time"))
    result = json.loads(await time_lane.locator("details pre").nth(1).inner_text())
    assert result["timezone"] == "UTC"
    assert await time_lane.get_attribute("data-state") == "succeeded"

    crash_lane = lanes.filter(has=page.locator("code.tool-name", has_text="bad_crash"))
    assert await crash_lane.get_attribute("data-state") == "execution_error"
    error = await crash_lane.locator(".error-box").inner_text()
    assert "MCP server 'bad' closed the connection during the call (it may have crashed)" in error

    markup_lane = lanes.filter(has=page.locator("code.tool-name", has_text="bad_markup"))
    assert await markup_lane.get_attribute("data-state") == "succeeded"
    shown = await markup_lane.locator("details pre").nth(1).inner_text()
    assert shown == "<img src=x onerror=alert(1)><script>alert(2)</script>"
    assert await page.locator("#rounds img, #rounds script").count() == 0
    assert dialogs == []
    assert timeline["header"]

    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SCREENSHOT), full_page=True)


async def test_an_mcp_tool_is_tried_from_its_page(server: Server, open_page: Any) -> None:
    """Try it (#12) on an MCP tool's page: the form drawn from the server's schema, the
    call made through the server, its answer shown on the page."""
    server.world("mcp")
    page = await open_page(user="bob")
    problems = Problems(page)
    await page.goto("/tools/get_current_time/")
    await control(page, "/timezone").fill("Europe/Oslo")

    run_id = await run_and_wait(page)

    result = json.loads(await page.inner_text("#tryit-output"))
    assert result["timezone"] == "Europe/Oslo"
    assert await page.inner_text("#tryit-state") == "OK"
    assert problems.seen == []
    await page.locator("#tryit").screenshot(path=str(SCREENSHOT.with_name("tryit-mcp.png")))
    # Recorded as a run: its one call, through the MCP server, succeeded.
    await page.goto(f"/runs/{run_id}/")
    lane = page.locator("#round-0 article.lane")
    assert await lane.locator("code.tool-name").inner_text() == "get_current_time"
    assert await lane.get_attribute("data-state") == "succeeded"
