"""The runs list in a real browser: try-it runs hidden unless the filter shows them, the
selection's count, and the column heads that sort by errors and duration (the filter
form keeps the sort)."""

from __future__ import annotations

from typing import Any

import pytest

from .checks import SCREENSHOTS, no_dialogs, screenshot_path
from .support import Server, start_run, wait_status
from .tool_forms import control, run_and_wait

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

WEATHER = "Scripted: weather in parallel"
FAILING_AND_SLOW = "Scripted: failing + slow tools"
ROW_IDS_JS = "rows => rows.map(r => r.id.replace('run-row-', ''))"


async def column(page: Any, sort: str) -> list[str]:
    """The texts of the column whose head sorts by `sort`, top to bottom."""
    return list(await page.evaluate("""(sort) => {
      const heads = [...document.querySelectorAll('table.runs thead th')];
      const at = heads.findIndex(th => th.querySelector(`a[data-sort="${sort}"]`));
      return [...document.querySelectorAll('table.runs tbody tr[id^="run-row-"]')]
        .map(row => row.children[at].innerText.trim());
    }""", sort))


async def total(page: Any) -> int:
    text = await page.inner_text("#run-total strong")
    assert text.endswith((" runs", " run")), text
    return int(text.split()[0].replace(",", ""))


def milliseconds(text: str) -> float:
    """A duration as the list shows it ("1.51 s", "87 ms", "-")."""
    if text == "-":
        return -1.0
    number, unit = text.split()
    return float(number) * (1000 if unit == "s" else 1)


async def test_try_it_runs_hide_and_the_columns_sort(open_page: Any, server: Server) -> None:
    page = await open_page(user="bob")
    dialogs = no_dialogs(page)
    await page.goto("/tools/calculator/")
    await control(page, "/expression").fill("6 * 7")
    tried = await run_and_wait(page)
    weather = await start_run(page, endpoint=WEATHER, tools=["get_weather"],
                              message="Runs list sortcheck: the fast one", system_prompt="",
                              policy="Default", tool_choice="auto", parallel=True,
                              max_rounds="")
    assert await wait_status(page) == "succeeded"
    failing = await start_run(page, endpoint=FAILING_AND_SLOW,
                              tools=["always_fails", "slow_tool", "calculator"],
                              message="Runs list sortcheck: the slow one with an error",
                              system_prompt="", policy="Default", tool_choice="auto",
                              parallel=True, max_rounds="")
    assert await wait_status(page) == "succeeded"

    await page.goto("/runs/")
    rows = page.locator('table.runs tbody tr[id^="run-row-"]')
    listed = await rows.evaluate_all(ROW_IDS_JS)
    assert tried not in listed
    assert listed[:2] == [failing, weather]
    without = await total(page)
    assert await page.inner_text("#tryit-hidden") == "try-it runs hidden: show them"

    await page.click("#tryit-hidden a")
    await page.wait_for_url("**/runs/?tryit=any")
    assert tried in await rows.evaluate_all(ROW_IDS_JS)
    with_tryits = await total(page)
    await page.select_option("#run-filters select[name=tryit]", "true")
    await page.wait_for_url("**/runs/?tryit=true")
    only = await rows.evaluate_all(ROW_IDS_JS)
    assert tried in only
    # bob's try-it runs (other tests' too) are what showing them adds.
    assert with_tryits == without + await total(page)
    assert weather not in only
    assert failing not in only
    await page.select_option("#run-filters select[name=tryit]", "")
    await page.wait_for_url("**/runs/")
    await page.wait_for_selector("#tryit-hidden")

    # Sorting: most errors first, then fewest; longest first. The list is narrowed to
    # this test's two runs (the sort links keep the search): the package's other tests
    # give bob more runs than one page holds, some longer and some with more errors.
    await page.goto("/runs/?q=sortcheck")
    assert await total(page) == 2
    await page.click("a[data-sort=errors]")
    await page.wait_for_url("**/runs/?q=sortcheck&sort=-errors")
    errors = [int(n) for n in await column(page, "errors")]
    assert errors == sorted(errors, reverse=True)
    order = await rows.evaluate_all(ROW_IDS_JS)
    assert order.index(failing) < order.index(weather)
    assert await page.get_attribute("th:has(a[data-sort=errors])", "aria-sort") == "descending"
    await page.click("a[data-sort=errors]")
    await page.wait_for_url("**/runs/?q=sortcheck&sort=errors")
    errors = [int(n) for n in await column(page, "errors")]
    assert errors == sorted(errors)
    await page.click("a[data-sort=duration]")
    await page.wait_for_url("**/runs/?q=sortcheck&sort=-duration")
    durations = [milliseconds(t) for t in await column(page, "duration")]
    timed = [d for d in durations if d >= 0]
    assert timed == sorted(timed, reverse=True)
    assert durations[len(timed):] == [-1.0] * (len(durations) - len(timed))  # none: last
    order = await rows.evaluate_all(ROW_IDS_JS)
    assert order.index(failing) < order.index(weather)
    assert "duration, longest first" in await page.inner_text("#run-total")
    if SCREENSHOTS:
        await page.screenshot(path=screenshot_path(server, "runs-list.png"), full_page=True)

    # A filter chosen now keeps the sort.
    await page.select_option("#run-filters select[name=status]", "succeeded")
    await page.wait_for_url("**/runs/?*status=succeeded*")
    assert "sort=-duration" in page.url
    assert await page.get_attribute("th:has(a[data-sort=duration])", "aria-sort") == (
        "descending")
    assert dialogs == []


async def test_a_title_of_one_long_word_wraps_on_the_page_and_in_the_list(
        open_page: Any) -> None:
    page = await open_page(user="bob")
    word = "Unbroken" + "y" * 300
    await start_run(page, endpoint=WEATHER, tools=["get_weather"], message=word,
                    system_prompt="", policy="Default", tool_choice="auto", parallel=True,
                    max_rounds="")
    assert await wait_status(page) == "succeeded"
    title = await page.eval_on_selector(
        "h1", "h => [h.getBoundingClientRect().right, h.closest('.card')"
        ".getBoundingClientRect().right, document.documentElement.scrollWidth, innerWidth]")
    assert title[0] <= title[1], title  # inside its card
    assert title[2] <= title[3], title  # the page does not scroll sideways

    await page.goto("/runs/")
    widths = await page.eval_on_selector(
        "table.runs", "t => [t.getBoundingClientRect().right, "
        "t.closest('.card').getBoundingClientRect().right]")
    assert widths[0] <= widths[1], widths  # the other columns stay on the page
