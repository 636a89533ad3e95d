"""Re-executing one tool call from its lane, and splicing the result into a new run, in
a real browser (issue #16): the editor checks the arguments as they are typed (problems
by JSON pointer), the re-execution runs in the server's worker and appears beside the
original with a diff, escaped; "Splice and continue" opens a new run that goes on with
the spliced result."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from .checks import no_dialogs, screenshot_path
from .support import RUN_URL, Server, fill_playground, start_run, submit_run, wait_status
from .world import APPROVAL_ENDPOINT

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

WEATHER = "Scripted: weather in parallel"
SCREENSHOTS = os.environ.get("AGENTFORGE_SCREENSHOTS") == "1"
HOSTILE = "<img src=x onerror=alert(1)>"


async def finished_weather_run(page: Any) -> str:
    await fill_playground(page, endpoint=WEATHER, tools=["get_weather"],
                          message="Weather in Hangzhou and London?", system_prompt="",
                          policy="Default", tool_choice="auto", parallel=True, max_rounds="")
    run_id = await submit_run(page)
    assert await wait_status(page) == "succeeded"
    return run_id


async def first_lane(page: Any) -> str:
    """The id number of the first call's lane (call-<pk>)."""
    lane_id = await page.locator("#rounds article.lane").first.get_attribute("id")
    assert lane_id is not None
    return str(lane_id.removeprefix("call-"))


async def re_execute(page: Any, call: str, arguments: dict[str, Any], number: int) -> Any:
    """Open the lane's editor (if closed), type `arguments`, submit; the re-execution's
    item once it has finished."""
    area = page.locator(f"#reexec-{call}")
    if await area.locator("textarea").count() == 0:
        await area.locator("button.reexec-open").click()
    box = area.locator(f"#reexec-arguments-{call}")
    await box.fill(json.dumps(arguments))
    await page.wait_for_function(
        "(id) => document.getElementById(id).getAttribute('aria-invalid') === 'false'",
        arg=f"reexec-arguments-{call}")
    await area.locator("button.reexec-run").click()
    item = page.locator(f"#reexec-{call}-{number}")
    await item.and_(page.locator('[data-state="succeeded"]')).wait_for()
    return item


async def test_a_call_re_executed_with_edited_arguments_shows_beside_the_original(
    open_page: Any, server: Server,
) -> None:
    page = await open_page(user="bob")
    dialogs = no_dialogs(page)
    await finished_weather_run(page)
    call = await first_lane(page)

    await page.locator(f"#reexec-{call} button.reexec-open").click()
    box = page.locator(f"#reexec-arguments-{call}")
    assert json.loads(await box.input_value()) == {"city": "Hangzhou"}  # the original's
    await box.fill('{"city": 3}')
    problem = page.locator(f'#reexec-problems-{call} li[data-argument="/city"]')
    await problem.wait_for()
    assert await problem.inner_text() == "/city: 3 is not of type 'string'"
    if SCREENSHOTS:
        await page.locator(f"#call-{call}").screenshot(
            path=screenshot_path(server, "reexecute-editor.png"))
    await box.fill('{"town": "Paris"}')
    await page.locator(f'#reexec-problems-{call} li[data-argument="/city"]').wait_for()

    item = await re_execute(page, call, {"city": "Paris"}, 1)

    original = await item.locator(".reexec-original pre").inner_text()
    new = await item.locator(".reexec-new pre").inner_text()
    assert "Hangzhou" in original
    assert json.loads(new)["city"] == "Paris"
    assert await item.locator(".reexec-diff .diff-line.del").count() >= 1
    added = await item.locator(".reexec-diff .diff-line.add").all_inner_texts()
    assert any("Paris" in line for line in added)
    assert "by bob" in await item.locator(".reexec-head").inner_text()
    # The lane still shows the call's own result, unchanged.
    assert "Hangzhou" in await page.locator(f"#call-{call} .lane-body").inner_text()

    hostile = await re_execute(page, call, {"city": HOSTILE}, 2)

    assert HOSTILE in await hostile.locator(".reexec-new pre").inner_text()
    assert await page.locator(f"#call-{call} img").count() == 0
    # Latest first, and both still there after a reload (stored, not only shown).
    await page.reload()
    numbers = await page.locator(f"#reexecutions-{call} > li").evaluate_all(
        "items => items.map(i => i.dataset.number)")
    assert numbers == ["2", "1"]
    if SCREENSHOTS:
        await page.locator(f"#call-{call}").screenshot(
            path=screenshot_path(server, "reexecute-lane.png"))
    assert dialogs == []


async def test_splice_and_continue_opens_a_new_run_with_the_spliced_result(
    open_page: Any, server: Server,
) -> None:
    page = await open_page(user="bob")
    parent = await finished_weather_run(page)
    call = await first_lane(page)
    item = await re_execute(page, call, {"city": "Tokyo"}, 1)

    await item.locator("button.reexec-splice").click()
    await page.wait_for_url(RUN_URL)
    assert parent not in page.url

    assert await wait_status(page) == "succeeded"
    spliced = page.locator("#spliced")
    assert "Hangzhou" in await spliced.locator(".reexec-original pre").inner_text()
    assert "Tokyo" in await spliced.locator(".reexec-new pre").inner_text()
    final = await page.locator("#run-header .final").inner_text()
    assert "Tokyo" in final
    assert "Hangzhou" not in final
    # The new run inherited round 1 (with the spliced result) and asked the model once.
    assert await page.locator('#rounds > [id^="round-"]').count() == 1
    # Its conversation says which result was spliced in, and counts it so.
    messages = page.locator("#start-conversation li.message")
    assert [await m.get_attribute("data-fork-mark") for m in await messages.all()] == [
        "inherited", "inherited", "spliced", "inherited"]
    assert "Tokyo" in await messages.nth(2).locator("pre").inner_text()
    assert "spliced result" in await messages.nth(2).inner_text()
    assert "3 inherited unchanged, 1 spliced result" in await page.inner_text(
        "#fork-inherited")
    if SCREENSHOTS:
        await spliced.screenshot(path=screenshot_path(server, "reexecute-spliced.png"))


async def test_re_executing_a_tool_that_requires_approval_is_the_person_s_approval(
    open_page: Any, server: Server,
) -> None:
    page = await open_page(user="bob")
    await start_run(page, endpoint=APPROVAL_ENDPOINT, tools=["send_email"],
                    message="Email ann and eve")
    assert await wait_status(page, "waiting") == "waiting"
    await page.locator("#round-0 .approve-all").click()
    assert await wait_status(page) == "succeeded"
    call = await first_lane(page)

    await page.locator(f"#reexec-{call} button.reexec-open").click()
    approve = page.locator(f"#reexec-{call} input[name=approve]")
    assert "Re-executing it is your approval" in await page.locator(
        f"#reexec-{call} .reexec-approve").inner_text()
    await page.locator(f"#reexec-arguments-{call}").fill(
        json.dumps({"to": "ann@example.com", "subject": "Again"}))
    await page.locator(f"#reexec-{call} button.reexec-run").click()
    # Not checked: the browser does not send the form (the box is required; the server
    # refuses such a request too: tests/runs/debugger/test_reexecution_kinds.py).
    assert await approve.evaluate("box => box.validity.valueMissing") is True

    await approve.check()
    await page.locator(f"#reexec-{call} button.reexec-run").click()

    item = page.locator(f"#reexec-{call}-1")
    await item.and_(page.locator('[data-state="succeeded"]')).wait_for()
    assert "approved by re-executing" in await item.locator(".reexec-head").inner_text()
    assert await item.locator(".reexec-new pre").inner_text() == \
        "sent 'Again' to ann@example.com"
    assert await page.locator(f"#reexecutions-{call} > li").count() == 1
