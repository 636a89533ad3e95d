""""Waiting for you" in a real browser: a run that starts waiting for an approval while
a page is open shows in the navigation's count without a reload, the count's link
lists it (the runs filter), and a user who opted in with "Notify me" gets a desktop
notification naming the run (the browser's notifications granted, window.Notification
stubbed to record what the page shows); the count goes down when the run ends."""

from __future__ import annotations

import os
import re
from typing import Any

import pytest

from .support import Server, start_run, wait_status
from .world import APPROVAL_ENDPOINT

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

SCREENSHOTS = os.environ.get("AGENTFORGE_SCREENSHOTS") == "1"

# Installed before the page's scripts: a Notification that records each one shown.
NOTIFICATION_STUB = """
window.__notifications = [];
window.Notification = function (title, options) {
  window.__notifications.push({title: title, body: (options || {}).body,
                               tag: (options || {}).tag});
  this.close = function () {};
};
window.Notification.permission = "granted";
window.Notification.requestPermission = function () { return Promise.resolve("granted"); };
"""

COUNT = "#waiting-for-you"


async def shown_count(page: Any) -> int:
    link = page.locator(COUNT)
    return int(await link.get_attribute("data-count") or 0)


async def test_a_run_that_starts_waiting_shows_in_the_nav_the_filter_and_a_notification(
    open_page: Any, server: Server,
) -> None:
    watcher = await open_page(user="bob")
    await watcher.context.grant_permissions(["notifications"], origin=server.base_url)
    await watcher.context.add_init_script(NOTIFICATION_STUB)
    errors: list[str] = []
    watcher.on("pageerror", lambda e: errors.append(str(e)))
    await watcher.goto("/calls/")
    before = await shown_count(watcher)
    assert await watcher.locator(COUNT).is_visible() == (before > 0)

    notify = watcher.locator("#notify-me")
    assert await notify.inner_text() == "Notify me"
    await notify.click()
    await watcher.wait_for_selector("#notify-me[aria-pressed=true]")
    assert await notify.inner_text() == "Notifications on"
    assert await watcher.evaluate("localStorage.getItem('agentforge:notify-waiting')") == "on"
    await watcher.evaluate("window.__sameDocument = true")  # gone if the page reloads

    # Meanwhile, in another window, bob starts a run that waits for his approval.
    starter = await open_page(user="bob")
    message = "Email ann <i>now</i>, then eve"
    run_id = await start_run(starter, endpoint=APPROVAL_ENDPOINT, tools=["send_email"],
                             message=message)
    assert await wait_status(starter, "waiting") == "waiting"

    # The count goes up on the open page, without a reload, and the run is named.
    await watcher.wait_for_selector(f'{COUNT}[data-count="{before + 1}"]', state="visible")
    assert await watcher.evaluate("window.__sameDocument") is True
    assert await watcher.locator(f"{COUNT} .count").inner_text() == str(before + 1)
    await watcher.wait_for_function("window.__notifications.length > 0")
    [shown] = await watcher.evaluate("window.__notifications")
    assert shown["title"] == f"Waiting for you: {message}"
    assert shown["body"].startswith("It waits for an approval (a run of bob).")
    assert shown["tag"] == f"agentforge-waiting-{run_id}"

    # The count's link: the runs waiting for bob, this one among them.
    await watcher.locator(COUNT).click()
    await watcher.wait_for_url(re.compile(r"/runs/\?waiting_for_me=true$"))
    row = watcher.locator(f"#run-row-{run_id}")
    await row.wait_for()
    assert "Waiting" in await row.inner_text()
    assert await watcher.locator("select[name=waiting_for_me]").input_value() == "true"
    assert await watcher.locator("#run-results tbody tr").count() == before + 1
    if SCREENSHOTS:
        await watcher.screenshot(path=str(server.root / "docs" / "screenshots" /
                                          "waiting-for-you.png"),
                                 clip={"x": 0, "y": 0, "width": 1400, "height": 420})

    # The run ends: the count goes back down where it was, live.
    await starter.get_by_role("button", name="Cancel run").click()
    assert await wait_status(starter, "cancelled") == "cancelled"
    if before:
        await watcher.wait_for_selector(f'{COUNT}[data-count="{before}"]', state="visible")
    else:
        await watcher.wait_for_selector(COUNT, state="hidden")
    # This tab saw that run already: the list's page did not announce it again.
    assert await watcher.evaluate("window.__notifications") == []
    assert errors == []


async def test_notify_me_off_means_no_notification(open_page: Any, server: Server) -> None:
    watcher = await open_page(user="bob")
    await watcher.context.grant_permissions(["notifications"], origin=server.base_url)
    await watcher.context.add_init_script(NOTIFICATION_STUB)
    await watcher.goto("/runs/")
    before = await shown_count(watcher)
    assert await watcher.locator("#notify-me").get_attribute("aria-pressed") == "false"

    starter = await open_page(user="bob")
    await start_run(starter, endpoint=APPROVAL_ENDPOINT, tools=["send_email"],
                    message="Nobody asked to be told")
    assert await wait_status(starter, "waiting") == "waiting"
    await watcher.wait_for_selector(f'{COUNT}[data-count="{before + 1}"]', state="visible")
    assert await watcher.evaluate("window.__notifications") == []

    await starter.get_by_role("button", name="Cancel run").click()
    assert await wait_status(starter, "cancelled") == "cancelled"
