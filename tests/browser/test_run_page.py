"""The run page leads with the run, in a real browser: the title at the top of the page
(a plain run and a spliced one alike), the actions beside it (rerun, fork, export), and
lineage you can follow: badges on the page and in /runs/, and a parent's list of the
runs made from it with how each was made."""

from __future__ import annotations

from typing import Any

import pytest

from .checks import SCREENSHOTS, no_dialogs, screenshot_path
from .support import RUN_URL, Server, fill_playground, submit_run, wait_status
from .test_reexec import first_lane, re_execute

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

WEATHER = "Scripted: weather in parallel"
# Where the title must start: under the top bar and the card's padding, not below
# anything else (it started 300 px down, 1,100 px on a spliced run).
TITLE_TOP_MAX = 150


async def weather_run(page: Any) -> str:
    await fill_playground(page, endpoint=WEATHER, tools=["get_weather"],
                          message="Weather in Hangzhou and London?", system_prompt="",
                          policy="Default", tool_choice="auto", parallel=True, max_rounds="")
    run_id = await submit_run(page)
    assert await wait_status(page) == "succeeded"
    return run_id


async def box(page: Any, selector: str) -> dict[str, float]:
    found = await page.locator(selector).bounding_box()
    assert found is not None, f"{selector} is not laid out"
    return dict(found)


async def assert_leads_with_the_run(page: Any) -> dict[str, float]:
    """The title is at the top, before what the run came from and its conversation; the
    actions sit beside it, on its row, to its right. Returns the title's box."""
    await page.reload()  # as a person opening the page sees it: scrolled to the top
    title = await box(page, "#run-header h1")
    assert title["y"] < TITLE_TOP_MAX, title
    status = await box(page, "#run-header [data-status]")
    assert status["y"] < TITLE_TOP_MAX
    for below in ("#start-conversation", "#rounds"):
        assert (await box(page, below))["y"] > title["y"] + title["height"]
    if await page.locator("#run-lineage").count():
        assert (await box(page, "#run-lineage"))["y"] > title["y"] + title["height"]
    actions = await box(page, "#run-actions")
    assert actions["y"] < title["y"] + title["height"]  # on the title's row
    assert actions["y"] + actions["height"] > title["y"]
    assert actions["x"] >= title["x"] + title["width"]  # to its right
    for selector in ("#rerun-action summary", "#run-actions details.fork-form summary",
                     "#export-run"):
        assert await page.locator(selector).is_visible()
    # The totals are in the header's first lines, above the page's fold.
    totals = await box(page, '#run-header [data-total="duration"]')
    assert totals["y"] < TITLE_TOP_MAX + 120
    return title


async def test_the_title_leads_a_plain_run_and_a_spliced_run(open_page: Any,
                                                           server: Server) -> None:
    page = await open_page(user="bob")
    dialogs = no_dialogs(page)
    parent = await weather_run(page)

    plain = await assert_leads_with_the_run(page)
    if SCREENSHOTS:
        await page.screenshot(path=screenshot_path(server, "run-page-header.png"),
                              clip={"x": 0, "y": 0, "width": 1400, "height": 420})

    call = await first_lane(page)
    item = await re_execute(page, call, {"city": "Tokyo"}, 1)
    await item.locator("button.reexec-splice").click()
    await page.wait_for_url(lambda url: RUN_URL.search(url) is not None and parent not in url)
    assert await wait_status(page) == "succeeded"

    spliced = await assert_leads_with_the_run(page)
    assert spliced["y"] == plain["y"]  # what a splice adds is below its header
    assert await page.locator("#run-badges [data-lineage]").evaluate_all(
        "badges => badges.map(b => b.dataset.lineage)") == ["splice"]
    origin = await page.inner_text("#lineage-origin")
    assert origin.startswith("Splice of Weather in Hangzhou and London? · round 1's call "
                             "get_weather")
    assert await page.locator("#spliced").is_visible()
    assert dialogs == []


async def test_the_action_bar_reruns_forks_and_exports(open_page: Any) -> None:
    page = await open_page(user="bob")
    dialogs = no_dialogs(page)
    run_id = await weather_run(page)

    # Export: a download, straight from the bar.
    async with page.expect_download() as download_info:
        await page.click("#export-run")
    assert (await download_info.value).suggested_filename == f"run-{run_id}.agentforge.json"

    # Fork: its panel opens over the page, with the round to fork from.
    await page.click("#run-actions details.fork-form summary")
    assert await page.locator("#fork-form input[name=round]").is_visible()
    await page.fill("#fork-form input[name=round]", "1")
    await page.click("#fork-form button[type=submit]")
    await page.wait_for_url(f"**/runs/{run_id}/fork/?round=1")

    # Rerun: its panel holds the replay options and both modes.
    await page.goto(f"/runs/{run_id}/")
    assert not await page.locator("#rerun-model").is_visible()  # folded until asked
    await page.click("#rerun-action summary")
    assert await page.locator("#rerun-model").is_visible()
    assert await page.locator("#rerun-form button[value=current]").is_visible()
    await page.click("#rerun-form button[value=as_it_was]")
    await page.wait_for_url(lambda url: RUN_URL.search(url) is not None and run_id not in url)
    assert await wait_status(page) == "succeeded"
    assert await page.locator("#run-badges [data-lineage]").evaluate_all(
        "badges => badges.map(b => b.dataset.lineage)") == ["rerun"]
    assert dialogs == []


async def test_lineage_is_followed_from_the_parent_the_child_and_the_runs_list(
        open_page: Any, server: Server) -> None:
    page = await open_page(user="bob")
    dialogs = no_dialogs(page)
    parent = await weather_run(page)
    children: list[str] = []
    for model in ("live", "recorded"):  # a rerun as it was, then a replay
        await page.goto(f"/runs/{parent}/")
        await page.click("#rerun-action summary")
        await page.select_option("#rerun-model", model)
        await page.click("#rerun-form button[value=as_it_was]")
        await page.wait_for_url(lambda url: RUN_URL.search(url) is not None
                                and parent not in url)
        assert await wait_status(page) == "succeeded"
        match = RUN_URL.search(page.url)
        assert match
        children.append(match.group(1))
    rerun, replay = children

    # The child says what it is in its header, and where it came from below it.
    assert await page.locator("#run-badges [data-lineage]").evaluate_all(
        "badges => badges.map(b => b.dataset.lineage)") == ["replay"]
    assert await page.locator("#run-badges [data-lineage=replay]").is_visible()
    assert (await page.inner_text("#lineage-origin")).startswith(
        "Replay of Weather in Hangzhou and London? · as it was")

    # The parent lists both, newest first, each with how it was made.
    await page.goto(f"/runs/{parent}/")
    items = page.locator("#run-children li")
    assert await items.evaluate_all("items => items.map(i => i.dataset.childKind)") == [
        "replay", "rerun"]
    texts = await items.all_inner_texts()
    assert "Replay · as it was · replay model recorded, tools live, stops where it " \
           "diverges · succeeded · " in texts[0]
    assert "Rerun · as it was · succeeded · " in texts[1]
    await items.nth(1).locator("a").click()
    await page.wait_for_url(f"**/runs/{rerun}/")
    if SCREENSHOTS:
        await page.goto(f"/runs/{parent}/")
        top = await box(page, ".run-top")
        lineage = await box(page, "#run-lineage")
        await page.screenshot(path=screenshot_path(server, "lineage.png"), clip={
            "x": 0, "y": 0, "width": 1400, "height": lineage["y"] + lineage["height"] + 12})
        assert top["y"] < lineage["y"]

    # The runs list: a badge in each child's title cell, none on the parent.
    await page.goto("/runs/")
    for run_id, kinds in ((parent, []), (rerun, ["rerun"]), (replay, ["replay"])):
        cell = page.locator(f"#run-row-{run_id} td.run-title-cell")
        assert await cell.locator("[data-lineage]").evaluate_all(
            "badges => badges.map(b => b.dataset.lineage)") == kinds
        if kinds:
            assert await cell.locator("[data-lineage]").first.is_visible()
    assert dialogs == []


async def test_a_parents_open_page_lists_a_rerun_made_elsewhere_without_a_reload(
        open_page: Any, server: Server) -> None:
    """The parent's page is open (finished: its socket listens for the runs made from
    it); a rerun is made in another window; it appears in the parent's list, and its
    status follows it there."""
    watcher = await open_page(user="bob")
    parent = await weather_run(watcher)
    await watcher.goto(f"/runs/{parent}/")  # served finished: its socket is for children
    assert await watcher.locator("#run-children").count() == 0
    await watcher.wait_for_selector('#timeline[data-socket="live"]', state="attached")
    await watcher.evaluate("window.__samePage = true")  # gone if the page reloads

    other = await open_page(user="bob")
    await other.goto(f"/runs/{parent}/")
    await other.click("#rerun-action summary")
    await other.click("#rerun-form button[value=as_it_was]")
    await other.wait_for_url(lambda url: RUN_URL.search(url) is not None
                             and parent not in url)
    match = RUN_URL.search(other.url)
    assert match
    child = match.group(1)

    item = watcher.locator(f'#run-children li:has(a[href="/runs/{child}/"])')
    await item.wait_for()
    assert await item.get_attribute("data-child-kind") == "rerun"
    await watcher.wait_for_selector(
        f'#run-children li[data-status="succeeded"]:has(a[href="/runs/{child}/"])')
    assert "Rerun · as it was · succeeded · " in await item.inner_text()
    assert await watcher.evaluate("window.__samePage") is True
    if SCREENSHOTS:
        lineage = await box(watcher, "#run-lineage")
        await watcher.screenshot(path=screenshot_path(server, "lineage-live.png"), clip={
            "x": 0, "y": 0, "width": 1400, "height": lineage["y"] + lineage["height"] + 12})
