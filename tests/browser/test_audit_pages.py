"""The calls list and the tools index in a real browser: a call is one line however long
its arguments or error (the row's height measured), its expander shows the whole value,
the column heads sort (the rows' order read back) and the totals count the selection;
the tools index shows each tool's figures, badges and last day's sparkline; after Try it
on a tool page its figures change without a reload. Screenshots: calls-list.png,
tools-list.png (AGENTFORGE_SCREENSHOTS=1)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from .checks import SCREENSHOTS, screenshot_path
from .support import Server, start_run, wait_status

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

FAILING_AND_SLOW = "Scripted: failing + slow tools"
LONG_CITY = "Llanfair " + "pwllgwyngyll gogerych wyrndrobwll <b>llantysilio</b> " * 12
LONG_REASON = "the upstream said no: " + "<i>retry later</i> " * 30


async def try_tool(page: Any, name: str, arguments: dict[str, Any]) -> str:
    """Try `name` with `arguments` (typed as JSON) and wait for its run to end."""
    await page.goto(f"/tools/{name}/")
    await page.click('#tryit-modes button[data-mode="json"]')
    await page.fill("#tryit-json", json.dumps(arguments))
    await page.click("#tryit-submit")
    run = page.locator("#tryit-run[data-status=succeeded], #tryit-run[data-status=failed]")
    await run.wait_for()
    return str(await run.get_attribute("data-run"))


def milliseconds(text: str) -> float | None:
    """A duration as the list shows it ("-", "<0.01 ms", "4.2 ms", "87 ms", "1.25 s")."""
    found = re.fullmatch(r"(<?)([\d.]+) (ms|s)", text.strip())
    if found is None:
        return None
    if found.group(1):
        return 0.0  # below what is shown
    return float(found.group(2)) * (1000 if found.group(3) == "s" else 1)


async def column(page: Any, head: str) -> list[str]:
    """The texts of one column of the calls list (by its head's class), top to bottom."""
    return list(await page.evaluate("""head => {
        const heads = [...document.querySelectorAll('#call-results table.calls thead th')];
        const index = heads.findIndex(th => th.classList.contains(head));
        return [...document.querySelectorAll('#call-results table.calls tbody tr[data-state]')]
            .map(row => row.cells[index].innerText.trim());
    }""", head))


async def test_the_calls_list_is_a_line_per_call_sorted_and_totalled(
    open_page: Any, server: Server,
) -> None:
    page = await open_page(user="alice")
    await try_tool(page, "get_weather", {"city": LONG_CITY})
    await try_tool(page, "always_fails", {"reason": LONG_REASON})
    await start_run(page, endpoint=FAILING_AND_SLOW,
                    tools=["always_fails", "slow_tool", "calculator"],
                    message="Audit pages: calls of every kind", system_prompt="",
                    policy="Default", tool_choice="auto", parallel=True, max_rounds="")
    assert await wait_status(page, "succeeded") == "succeeded"

    await page.goto("/calls/")
    rows = page.locator("#call-results table.calls tbody tr[data-state]")
    assert await rows.count() >= 5
    heights = await rows.evaluate_all("rows => rows.map(r => r.getBoundingClientRect().height)")
    line = await page.eval_on_selector(
        "#call-results table.calls tbody td", "td => parseFloat(getComputedStyle(td).lineHeight)")
    # one line each: the long arguments and errors included, no row taller than another
    assert max(heights) - min(heights) < 1, heights
    assert max(heights) < 2 * line + 16, (heights, line)  # a line, a badge, the padding
    table = await page.eval_on_selector("#call-results table.calls",
                                        "t => [t.scrollWidth, t.clientWidth]")
    assert table[0] <= table[1]  # nothing runs out of the table
    # The tick boxes (compare, case) keep their size in the fixed layout.
    boxes = await page.locator("#call-results td.tick input[type=checkbox]").evaluate_all(
        "boxes => boxes.map(b => b.getBoundingClientRect().width)")
    assert min(boxes) >= 12, boxes

    # The totals count the selection; the current order says what it is.
    await page.locator("#call-totals strong").wait_for()  # a request of their own
    totals = await page.inner_text("#call-results p.totals")
    assert re.fullmatch(r"\d+ calls · \d+ errors \(\d+(\.\d)? %\) · newest first", totals)

    # The long arguments end in an ellipsis; the expander shows them whole, as text.
    weather = page.locator("#call-results tbody tr[data-state]", has_text="Llanfair").first
    summary = weather.locator("details[data-cell=arguments] > summary")
    assert await summary.evaluate("s => s.scrollWidth > s.clientWidth")  # cut off on screen
    whole = weather.locator("details[data-cell=arguments] pre")
    assert not await whole.is_visible()
    await summary.click()
    await whole.wait_for(state="visible")
    assert json.loads(await whole.inner_text()) == {"city": LONG_CITY}
    # open, it floats over the rows below: its own row stays one line
    assert abs(await weather.evaluate("r => r.getBoundingClientRect().height")
               - heights[0]) < 1
    panel = await whole.bounding_box()
    assert panel is not None
    assert panel["width"] > 500  # wider than its column
    assert await weather.locator("details b").count() == 0  # the markup stayed text
    failing = page.locator("#call-results tbody tr[data-state]", has_text="retry later").first
    await failing.locator("details[data-cell=error] > summary").click()
    error = await failing.locator("details[data-cell=error] pre").inner_text()
    assert error.startswith("ToolExecutionError: ")
    assert LONG_REASON.strip() in error
    assert await failing.locator("details i").count() == 0
    if SCREENSHOTS:  # the arguments' expander open, over the rows below
        await failing.locator("details[data-cell=error] > summary").click()  # closed again
        await page.screenshot(path=screenshot_path(server, "calls-list.png"), full_page=True)

    # The column heads sort; the filter form keeps the order.
    await page.click("#call-results th.c-duration a.sort")
    await page.wait_for_url("**/calls/?sort=-duration")
    assert await page.get_attribute("#call-results th.c-duration", "aria-sort") == "descending"
    longest = [milliseconds(t) for t in await column(page, "c-duration")]
    timed = [ms for ms in longest if ms is not None]
    assert timed == sorted(timed, reverse=True)
    assert longest[:len(timed)] == timed  # calls without a duration come last
    assert "duration, longest first" in await page.inner_text("#call-results p.totals")
    await page.click("#call-results th.c-duration a.sort")
    await page.wait_for_url("**/calls/?sort=duration")
    shortest = [ms for ms in map(milliseconds, await column(page, "c-duration"))
                if ms is not None]
    assert shortest == sorted(shortest)
    await page.click("#call-results th.c-tool a.sort")
    await page.wait_for_url("**/calls/?sort=tool")
    tools = await column(page, "c-tool")
    assert tools == sorted(tools)
    await page.select_option("#call-filters select[name=state]", "execution_error")
    await page.wait_for_url("**/calls/?state=execution_error&sort=tool")
    await page.wait_for_function(
        "() => [...document.querySelectorAll('#call-results tbody tr[data-state]')]"
        ".every(r => r.dataset.state === 'execution_error')")
    assert await page.get_attribute("#call-results th.c-tool", "aria-sort") == "ascending"


async def test_the_tools_index_shows_figures_badges_and_the_last_day(
    open_page: Any, server: Server,
) -> None:
    page = await open_page(user="alice")
    await start_run(page, endpoint=FAILING_AND_SLOW,
                    tools=["always_fails", "slow_tool", "calculator"],
                    message="Audit pages: calls to count", system_prompt="",
                    policy="Default", tool_choice="auto", parallel=True, max_rounds="")
    assert await wait_status(page, "succeeded") == "succeeded"

    await page.goto("/tools/")
    failing = page.locator('tr[data-tool="always_fails"]')
    assert await failing.locator("[data-figure=error-rate]").inner_text() == "100 %"
    assert milliseconds(await failing.locator("[data-figure=p95]").inner_text()) is not None
    assert await failing.locator("[data-badge=kind]").inner_text() == "Python function"
    assert await failing.locator("[data-badge=enabled]").is_visible()
    # The sparkline: an hour a bar, this hour's the last, with its numbers in its title.
    spark = failing.locator("svg.spark")
    assert await spark.is_visible()
    box = await spark.bounding_box()
    assert box is not None
    assert (box["width"], box["height"]) == (120, 24)
    hours = spark.locator("g")
    assert await hours.count() == 24
    last = hours.nth(23)
    assert int(await last.get_attribute("data-calls") or 0) >= 1
    assert re.fullmatch(r"\d\d:00 to \d\d:00: \d+ calls?, \d+ errors?",
                        await last.locator("title").text_content() or "")
    assert await last.locator("rect.errors-bar").count() == 1
    approval = page.locator('tr[data-tool="send_email"]')
    assert await approval.locator("[data-badge=approval]").inner_text() == "needs approval"
    if SCREENSHOTS:
        await page.locator("main").screenshot(path=screenshot_path(server, "tools-list.png"))


async def test_a_tool_pages_figures_follow_a_try_it_run(open_page: Any) -> None:
    page = await open_page(user="bob")
    await page.goto("/tools/convert_units/")
    await page.evaluate("window.__samePage = true")
    before = int(await page.inner_text("#stat-calls"))
    await page.click('#tryit-modes button[data-mode="json"]')
    await page.fill("#tryit-json", json.dumps({"value": 2, "from_unit": "km",
                                               "to_unit": "m"}))
    await page.click("#tryit-submit")
    await page.locator("#tryit-run[data-status=succeeded]").wait_for()
    await page.wait_for_function(
        f"() => document.querySelector('#stat-calls').innerText === '{before + 1}'")
    outcomes = page.locator("#outcomes tr[data-outcome=ok]")
    assert await outcomes.count() == 1
    assert await page.locator("#recent-calls tbody tr").count() >= 1
    assert await page.evaluate("window.__samePage") is True  # swapped in, not reloaded
    # and again: the figures it swapped in still follow the next run
    await page.click("#tryit-submit")
    await page.wait_for_function(
        f"() => document.querySelector('#stat-calls').innerText === '{before + 2}'")
