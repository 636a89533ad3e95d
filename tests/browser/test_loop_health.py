"""Loop health on the run page, in a real browser: a model that repeats a call gets a
note on the round where it was told it repeats itself and on the round where the policy
stopped it, live and after a reload; the runs list finds the run as "loop detected"."""

from __future__ import annotations

from typing import Any

import pytest

from .support import Server, snapshot, start_run, wait_caught_up, wait_status
from .world import LOOP_ENDPOINT

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]


async def test_the_flagged_rounds_show_their_notes(open_page: Any, server: Server) -> None:
    page = await open_page(user="alice", record=True)
    run_id = await start_run(page, endpoint=LOOP_ENDPOINT, tools=["get_weather"],
                             message="Weather in Paris?", system_prompt="", policy="Default",
                             tool_choice="auto", parallel=True, max_rounds="")

    assert await wait_status(page, "failed") == "failed"
    # The notes arrived live as they are in a fresh rendering.
    await wait_caught_up(page)
    live = await snapshot(page)
    await page.reload()
    assert (await snapshot(page))["rounds"] == live["rounds"]

    assert await page.locator("#run-error h2").inner_text() == "LoopDetectedError"
    # Rounds 1 and 2 are not flagged; round 3 told the model, round 5 stopped the run.
    for index in (0, 1):
        assert await page.locator(f"#round-{index} .loop-note").count() == 0
        assert await page.locator(f"#round-{index} .loop-badge").count() == 0
    told = page.locator('#round-2 .loop-note[data-detector="repeated_call"]')
    assert await told.get_attribute("data-action") == "tell_model"
    text = await told.inner_text()
    assert "Loop detected (repeated call): call 3 of get_weather with the same arguments." in text
    assert "The model was told it is repeating itself." in text
    await told.locator("summary").click()
    assert (await told.locator("pre").inner_text()).startswith(
        "This is call 3 of get_weather with these same arguments")
    assert await page.locator("#round-2 .loop-badge").is_visible()
    # What the model was told is in the call's result too.
    assert "This is call 3 of get_weather" in await page.locator(
        "#round-2 article.lane").inner_text()

    stopped = page.locator('#round-4 .loop-note[data-action="stop"]')
    assert "call 5 of get_weather" in await stopped.inner_text()
    assert "The policy stopped the run here" in await stopped.inner_text()
    assert await page.locator('#round-4 article.lane[data-state="not_executed"]').count() == 1

    await page.goto("/runs/?loop_detected=true")
    assert await page.locator(f'a[href="/runs/{run_id}/"]').count() == 1
    await page.goto("/runs/?loop_detected=false")
    assert await page.locator(f'a[href="/runs/{run_id}/"]').count() == 0
