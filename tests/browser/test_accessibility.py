"""The accessibility scan (issue 43): axe-core in a real Chromium over the pages a user
works in (the playground, a finished run, a call re-executed, a spliced run, a run loop
health stopped, a run waiting for a decision, the runs and calls lists, the tools index,
a tool page before and after Try it, the fork editor and compare) finds no violation of
any impact. A failure names each page, rule and element."""

from __future__ import annotations

from typing import Any

import pytest

from .axe import described, violations
from .support import Server, start_run, wait_status
from .tool_forms import control, run_and_wait
from .world import APPROVAL_ENDPOINT, FORK_ENDPOINT, LOOP_ENDPOINT

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]


async def scanned(page: Any, name: str, reports: list[str]) -> None:
    """Scan the page once it has settled (htmx's loads done), noting what axe finds."""
    await page.wait_for_load_state("networkidle")
    found = await violations(page)
    if found:
        reports.append(described(name, found))


async def finished_run(page: Any, message: str) -> str:
    run_id = await start_run(page, endpoint=FORK_ENDPOINT, tools=["convert_units"],
                             message=message, system_prompt="", policy="Default",
                             tool_choice="auto", parallel=True, max_rounds="")
    assert await wait_status(page) == "succeeded"
    return run_id


async def re_executed(page: Any) -> None:
    """Re-execute the run's first call from its lane, as it was: the lane's editor and
    the re-execution beside the original."""
    lane = page.locator("#rounds article.lane").first
    await lane.locator("button.reexec-open").click()
    await lane.locator("button.reexec-run").click()
    await lane.locator('[id^="reexec-"][data-state="succeeded"]').first.wait_for()


async def test_the_scan_names_the_rule_and_the_element(open_page: Any) -> None:
    """The scan is not blind: an input without a label is reported, with its element."""
    page = await open_page(user="bob")
    await page.goto("/runs/")
    await page.evaluate("""() => {
      const input = document.createElement('input');
      input.id = 'axe-probe';
      document.querySelector('main').appendChild(input);
    }""")
    found = await violations(page)
    [label] = [v for v in found if v["rule"] == "label"]
    assert label["impact"] == "critical"
    assert [node["target"] for node in label["nodes"]] == ["#axe-probe"]
    assert "#axe-probe" in described("/runs/", found)


async def test_the_pages_a_user_works_in_have_no_moderate_or_worse_violation(
    open_page: Any,
) -> None:
    page = await open_page(user="bob")
    reports: list[str] = []

    await page.goto("/playground/")
    await scanned(page, "the playground", reports)

    first = await finished_run(page, "Accessibility: convert 1 km")
    await scanned(page, "a finished run", reports)
    await re_executed(page)
    await scanned(page, "a finished run with a call re-executed", reports)
    await page.locator("button.reexec-splice").first.click()
    await page.wait_for_url(lambda url: first not in url)
    assert await wait_status(page) == "succeeded"
    await scanned(page, "a spliced run", reports)
    second = await finished_run(page, "Accessibility: convert it again")

    await page.goto(f"/runs/{first}/fork/?round=1")
    await scanned(page, "the fork editor", reports)

    await page.goto(f"/runs/compare?a={first}&b={second}")
    await scanned(page, "compare", reports)

    await start_run(page, endpoint=LOOP_ENDPOINT, tools=["get_weather"],
                    message="Accessibility: weather in Paris, again and again",
                    system_prompt="", policy="Default", tool_choice="auto", parallel=True,
                    max_rounds="")
    assert await wait_status(page, "failed") == "failed"
    await scanned(page, "a run loop health stopped", reports)

    await page.goto("/runs/")  # with the loop-detected badge of that run
    await scanned(page, "the runs list", reports)

    await page.goto("/calls/")
    await scanned(page, "the calls list", reports)

    await page.goto("/tools/")
    await scanned(page, "the tools index", reports)

    await page.goto("/tools/convert_units/")
    await control(page, "/value").wait_for()
    await scanned(page, "a tool page", reports)
    await control(page, "/value").fill("2")
    await control(page, "/from_unit").fill("km")
    await control(page, "/to_unit").fill("m")
    await run_and_wait(page)
    await scanned(page, "a tool page after Try it", reports)

    await start_run(page, endpoint=APPROVAL_ENDPOINT, tools=["send_email"],
                    message="Accessibility: email ann and eve")
    assert await wait_status(page, "waiting") == "waiting"
    await page.wait_for_selector("#round-0 .approval", state="visible")
    await scanned(page, "a run waiting for a decision", reports)
    await page.get_by_role("button", name="Cancel run").click()
    assert await wait_status(page, "cancelled") == "cancelled"

    assert not reports, "axe-core found violations:\n" + "\n".join(reports)


async def test_the_staff_pages_have_no_violation(open_page: Any, server: Server) -> None:
    """The registry outside the admin (its forms empty and refused, an MCP server's
    page), the endpoints page, and the login page."""
    server.world("mcp")  # the browser world's MCP servers, synced: listed, with a page
    page = await open_page(user="alice")
    reports: list[str] = []
    for path, name in (("/registry/", "the registry"),
                       ("/registry/tools/new/", "adding a tool"),
                       ("/registry/tools/import/", "importing tools"),
                       ("/registry/mcp/new/", "adding an MCP server"),
                       ("/endpoints/", "the endpoints")):
        await page.goto(path)
        await scanned(page, name, reports)
    await page.goto("/registry/tools/new/")
    await page.click("#tool-form button[type=submit]")  # every required field empty
    await page.wait_for_selector("#form-problems")
    await scanned(page, "adding a tool, refused", reports)
    await page.goto("/registry/")
    await page.click('tr[data-server="time"] a')
    await page.wait_for_url("**/registry/mcp/*/")
    await scanned(page, "an MCP server", reports)
    await page.goto("/tools/")  # as staff: the registry's links
    await scanned(page, "the tools index of staff", reports)

    anonymous = await open_page()
    await anonymous.goto("/accounts/login/")
    await scanned(anonymous, "the login page", reports)

    assert not reports, "axe-core found violations:\n" + "\n".join(reports)
