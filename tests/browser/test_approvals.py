"""Approvals in a real browser: a run waits on the timeline until each flagged call is
approved, edited or rejected; the arguments editor shows problems by argument as the
user types; a second viewer sees each decision live."""

from __future__ import annotations

import os
from typing import Any

import pytest

from .support import Server, assert_equals_reload, log_in, start_run, wait_status
from .world import APPROVAL_ENDPOINT

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

SCREENSHOTS = os.environ.get("AGENTFORGE_SCREENSHOTS") == "1"


async def waiting_run(page: Any) -> str:
    run_id = await start_run(page, endpoint=APPROVAL_ENDPOINT, tools=["send_email"],
                             message="Email ann and eve")
    assert await wait_status(page, "waiting") == "waiting"
    await page.wait_for_selector("#round-0 .approval", state="visible")
    return run_id


def lane(page: Any, index: int) -> Any:
    return page.locator("#round-0 article.lane").nth(index)


async def test_edit_with_live_checks_then_reject_with_a_message(
    open_page: Any, server: Server,
) -> None:
    page = await open_page(record=True)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    await log_in(page, server, "alice")
    await waiting_run(page)
    assert await page.locator("#round-0 .approval").count() == 2
    assert await page.locator("#round-0 .approve-all").inner_text() == "Approve all 2"

    first = lane(page, 0)
    await first.locator("details.edit-arguments summary").click()
    editor = first.locator("textarea")
    problems = first.locator(".argument-problems li")
    await editor.fill('{"to": "ann@example.com", ')
    await problems.filter(has_text="not valid JSON").wait_for()
    await editor.fill('{"to": 42, "subject": "Hello"}')
    await problems.filter(has_text="42 is not of type 'string'").wait_for()
    assert await problems.first.get_attribute("data-argument") == "to"
    await editor.fill('{"subject": "Hello"}')
    await problems.filter(has_text="'to' is a required property").wait_for()
    await editor.fill('{"to": "ann@example.org", "subject": "Hello again"}')
    await page.wait_for_selector("#round-0 article.lane >> nth=0 >> "
                                 "textarea[aria-invalid=false]")
    assert await problems.count() == 0
    if SCREENSHOTS:
        await page.locator("#round-0").screenshot(
            path=str(server.root / "docs" / "screenshots" / "approval.png"))
    await first.locator("button.edit").click()

    # One call decided: the run still waits for the other.
    await page.wait_for_selector("#round-0 article.lane >> nth=0 >> [data-decision=edit]")
    assert await page.locator("#round-0 .approval").count() == 1
    second = lane(page, 1)
    await second.locator("input[name^=message-]").fill("not to <eve>, ever")
    await second.locator("button.reject").click()

    assert await wait_status(page, "succeeded") == "succeeded"
    final = await page.locator("#run-header .final .text").inner_text()
    assert "sent 'Hello again' to ann@example.org" in final
    assert "rejected by alice: not to <eve>, ever" in final
    assert await lane(page, 0).get_attribute("data-state") == "succeeded"
    assert await lane(page, 1).get_attribute("data-state") == "rejected"
    decision = await lane(page, 0).locator(".decision").inner_text()
    assert "Approved with edited arguments by alice" in decision
    assert "ann@example.org" in decision
    assert "not to <eve>, ever" in await lane(page, 1).locator(".decision").inner_text()
    assert await page.locator(".approval").count() == 0
    await assert_equals_reload(page)
    assert errors == []
    assert await page.evaluate("window.__cspViolations") == []


async def test_a_decision_reaches_another_viewer_live_and_approve_works(
    open_page: Any, server: Server,
) -> None:
    deciding = await open_page(user="alice")
    run_id = await waiting_run(deciding)
    watching = await open_page(user="alice", record=True)
    await watching.goto(f"/runs/{run_id}/")
    await watching.wait_for_selector("#live-state[data-state=live]")

    await lane(deciding, 0).locator("button.approve").click()

    # The other page was not reloaded: the decision arrived over its socket.
    await watching.wait_for_selector("#round-0 article.lane >> nth=0 >> "
                                     "[data-decision=approve]")
    assert await watching.locator("#round-0 .approval").count() == 1
    assert await watching.evaluate("window.__live.length") > 0
    await lane(watching, 1).locator("button.approve").click()
    assert await wait_status(watching, "succeeded") == "succeeded"
    assert await wait_status(deciding, "succeeded") == "succeeded"
    final = await watching.locator("#run-header .final .text").inner_text()
    assert "sent 'Hello' to ann@example.com" in final
    assert "sent '<b>Secrets</b>' to eve@example.com" in final


async def test_approve_all_decides_the_whole_round(open_page: Any, server: Server) -> None:
    page = await open_page(user="alice")
    await waiting_run(page)

    await page.locator("#round-0 .approve-all").click()

    assert await wait_status(page, "succeeded") == "succeeded"
    states = [await lane(page, i).get_attribute("data-state") for i in range(2)]
    assert states == ["succeeded", "succeeded"]
    assert await page.locator("#round-0 [data-decision=approve]").count() == 2
