"""The audit log in a real browser: the runs list's live statuses, the tool-call log
(filters in place, the URL, a row opening the run's timeline at the call's lane) and a
tool page (statistics, the SVG chart, the versions)."""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any

import pytest

from .checks import HALLUCINATED_NAME, INJECTED, Watch
from .support import Server, start_run, wait_round, wait_status
from .world import LONG_ENDPOINT, XSS_ENDPOINT, XSS_POLICY
from .xss_tools import ALL_PAYLOADS

# `both`: also driven against a server on PostgreSQL in the scale-out pass (conftest.py).
pytestmark = [pytest.mark.browser, pytest.mark.both, pytest.mark.asyncio(loop_scope="package")]

FAILING_AND_SLOW = "Scripted: failing + slow tools"
SCREENSHOTS = os.environ.get("AGENTFORGE_SCREENSHOTS") == "1"
# What a payload would create, minus the calls page's own filter form and its totals'
# placeholder, a tool page's Try it form and its figures (fetched again after a try:
# htmx attributes) and its schema's field tree (json_script: data).
OWN = ":not(#call-filters):not(#call-totals):not(#tool-figures)"
OWN_HTMX_EXCEPTED = INJECTED.replace("[hx-get]", f"[hx-get]{OWN}").replace(
    "[hx-trigger]", f"[hx-trigger]{OWN}").replace(
    "[hx-post]", "[hx-post]:not(#tryit-form)").replace(
    "script:not([src])", "script:not([src]):not(#tryit-schema[type='application/json'])")


def screenshot_path(server: Server, name: str) -> str:
    folder = server.root / "docs" / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder / name)


async def test_the_runs_list_shows_a_runs_status_change_without_a_reload(
    open_page: Any,
) -> None:
    page = await open_page(user="alice")
    run_id = await start_run(page, endpoint=LONG_ENDPOINT, tools=["slow_tool"],
                             message="Audit: a long run to watch from the list")
    await wait_round(page, 0)  # running now, and for 30 rounds more

    runs = await open_page(user="alice")
    await runs.goto("/runs/")
    await runs.evaluate("window.__samePage = true")
    row = f"#run-row-{run_id}"
    assert await runs.get_attribute(row, "hx-trigger") == "every 2s"
    assert await runs.inner_text(f"{row} .badge") == "Running"

    await page.click("#run-header button.danger")  # cancel, on the run's own page
    await wait_status(page, "cancelled")

    await runs.wait_for_selector(f"{row} .badge.status-cancelled")
    assert await runs.evaluate("window.__samePage") is True  # swapped, never reloaded
    assert await runs.get_attribute(row, "hx-trigger") is None  # and polling stopped


async def test_the_calls_log_filters_in_place_and_opens_the_calls_lane(
    open_page: Any, server: Server,
) -> None:
    page = await open_page(user="alice")
    run_id = await start_run(page, endpoint=FAILING_AND_SLOW,
                             tools=["always_fails", "slow_tool", "calculator"],
                             message="Audit: calls to find", system_prompt="",
                             policy="Default", tool_choice="auto", parallel=True,
                             max_rounds="")
    assert await wait_status(page, "succeeded") == "succeeded"

    await page.goto("/calls/")
    await page.evaluate("window.__samePage = true")
    await page.select_option("#call-filters select[name=state]", "execution_error")
    await page.wait_for_url("**/calls/?state=execution_error")
    await page.select_option("#call-filters select[name=tool]", "always_fails")
    await page.wait_for_url("**/calls/?state=execution_error&tool=always_fails")
    rows = page.locator("#call-results table.calls tbody tr[data-state]")
    await page.wait_for_function(
        "() => [...document.querySelectorAll('#call-results tbody tr[data-state]')].every("
        "r => r.dataset.state === 'execution_error' && r.innerText.includes('always_fails'))")
    assert await rows.count() >= 1
    assert await page.evaluate("window.__samePage") is True

    # A refused filter says why, in place.
    await page.fill("#call-filters input[name=min_ms]", "fast")
    await page.press("#call-filters input[name=min_ms]", "Enter")
    await page.wait_for_selector("#call-results >> text=min_ms must be a number of milliseconds")
    await page.fill("#call-filters input[name=min_ms]", "")
    await page.press("#call-filters input[name=min_ms]", "Enter")
    await page.wait_for_url("**/calls/?state=execution_error&tool=always_fails")
    if SCREENSHOTS:
        await page.locator("main").screenshot(path=screenshot_path(server, "calls.png"))

    link = page.locator(f'#call-results a.call-link[href^="/runs/{run_id}/#call-"]').first
    anchor = str(await link.get_attribute("href")).split("#", 1)[1]
    await link.click()
    await page.wait_for_url(re.compile(rf"/runs/{run_id}/#{anchor}$"))
    lane = page.locator(f"#{anchor}")
    assert "always_fails" in await lane.inner_text()
    assert await lane.is_visible()
    assert await lane.evaluate(
        "e => { const r = e.getBoundingClientRect(); return r.top < innerHeight && r.bottom > 0; }")


async def test_a_tool_page_shows_its_statistics_chart_and_versions(
    open_page: Any, server: Server,
) -> None:
    page = await open_page(user="alice")
    await start_run(page, endpoint=FAILING_AND_SLOW,
                    tools=["always_fails", "slow_tool", "calculator"],
                    message="Audit: calls to count", system_prompt="", policy="Default",
                    tool_choice="auto", parallel=True, max_rounds="")
    assert await wait_status(page, "succeeded") == "succeeded"

    await page.goto("/tools/")
    await page.click('a[href="/tools/always_fails/"]')
    await page.wait_for_url("**/tools/always_fails/")
    calls = int(await page.inner_text("#stat-calls"))
    assert calls >= 1
    assert (await page.inner_text("#stat-errors")).startswith(f"{calls} (100 %)")
    chart = page.locator("svg.chart")
    assert await chart.is_visible()
    assert await chart.locator("title#chart-title").text_content() == (
        "Calls and errors of always_fails per hour")
    points = chart.locator("g.point")
    total = sum([int(await points.nth(i).get_attribute("data-calls") or 0)
                 for i in range(await points.count())])
    assert total == calls
    box = await chart.bounding_box()
    assert box is not None
    assert box["width"] > 300
    assert box["height"] > 80
    assert await page.locator("#top-errors tbody tr").count() >= 1
    assert await page.locator("#versions tr[data-version]").count() >= 1
    recent = page.locator("#recent-calls a[href*='#call-']").first
    assert re.search(r"/runs/[0-9a-f-]{36}/#call-\d+$", str(await recent.get_attribute("href")))
    if SCREENSHOTS:
        await page.locator("main").screenshot(path=screenshot_path(server, "tool.png"))


async def test_hostile_calls_stay_text_in_the_log_and_on_tool_pages(
    open_page: Any, server: Server,
) -> None:
    await asyncio.to_thread(server.world, "enable-xss")
    page = await open_page(user="alice", record=True)
    watch = Watch(page, server)
    await start_run(page, endpoint=XSS_ENDPOINT, policy=XSS_POLICY,
                    tools=["slow_tool", "xss_echo", "xss_fails"], message="Audit: hostile")
    assert await wait_status(page) == "succeeded"

    await page.goto("/calls/")
    await page.select_option("#call-filters select[name=endpoint]", XSS_ENDPOINT)
    await page.wait_for_selector("#call-results tbody tr[data-state=hallucinated]")
    assert HALLUCINATED_NAME in await page.inner_text("#call-results")
    assert "<script>alert(1)</script>" in await page.inner_text("#call-results")  # cut short
    assert await page.eval_on_selector_all(OWN_HTMX_EXCEPTED, "els => els.length") == 0

    await page.goto("/tools/")
    await page.get_by_role("link", name=HALLUCINATED_NAME).click()
    await page.wait_for_selector("#tool-stats")
    assert HALLUCINATED_NAME in await page.inner_text("h1")
    assert HALLUCINATED_NAME in await page.locator("svg.chart title#chart-title").text_content()
    await page.goto("/tools/xss_fails/")
    assert ALL_PAYLOADS in await page.inner_text("#top-errors")
    assert await page.eval_on_selector_all(OWN_HTMX_EXCEPTED, "els => els.length") == 0
    assert watch.dialogs == []
    assert await page.evaluate("window.__cspViolations") == []
    assert not [m for m in watch.console if m.startswith("pageerror")]


async def test_an_admin_edit_makes_a_version_and_two_versions_compare(
    open_page: Any, server: Server,
) -> None:
    page = await open_page(user="alice")
    await page.goto("/admin/tools_app/toolregistration/?q=convert_units")
    await page.click("#result_list a:text-is('convert_units')")
    await page.fill("textarea[name=description]", "Convert units <b>carefully</b>.")
    await page.click("input[name=_save]")
    await page.wait_for_selector(".messagelist .success")

    await page.goto("/tools/convert_units/")
    versions = page.locator("#versions tr[data-version]")
    assert await versions.count() == 2
    await page.click("#versions button[type=submit]")  # newest against the one before
    await page.wait_for_url(lambda url: "/tools/convert_units/diff/?" in url
                            and "old=" in url and "new=" in url)
    added = await page.locator("#diff .diff-add").all_inner_texts()
    assert '+  "description": "Convert units <b>carefully</b>.",' in added
    assert await page.locator("#diff b").count() == 0  # text, never markup
    if SCREENSHOTS:
        await page.locator("main").screenshot(path=screenshot_path(server, "tool-diff.png"))
