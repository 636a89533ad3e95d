"""Breakpoints in a real browser: set in the playground, the run pauses before the
tool's calls, one call is stepped, the other's arguments are edited on its lane, then
the run continues to its end; stepping the last held call steps that call only, and
Cancel run (the paused panel's one way to stop) ends the run there; arguments edited
at a breakpoint stay on the call's lane (and in the API) beside the model's; and a
pause before a round takes a message for the model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from .support import Server, assert_equals_reload, fill_playground, submit_run, wait_status

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

WEATHER = "Scripted: weather in parallel"
FAILING_AND_SLOW = "Scripted: failing + slow tools"
SCREENSHOTS = os.environ.get("AGENTFORGE_SCREENSHOTS") == "1"


async def start_with_breakpoints(page: Any, **fields: str) -> None:
    await fill_playground(page, endpoint=WEATHER, tools=["get_weather"],
                          message="Weather in Hangzhou and London?")
    await page.locator("details.breakpoints summary").click()
    for name, value in fields.items():
        await page.fill(f"input[name={name}]", value)
    await submit_run(page)
    assert await wait_status(page, "waiting") == "waiting"
    await page.wait_for_selector("#paused", state="visible")


def lane(page: Any, index: int) -> Any:
    return page.locator("#round-0 article.lane").nth(index)


async def test_step_one_call_edit_the_other_and_continue(
    open_page: Any, server: Server,
) -> None:
    page = await open_page(user="alice", record=True)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    await start_with_breakpoints(page, break_before_tool="get_weather")
    assert "before a call of get_weather" in await page.locator("#paused h2").inner_text()
    await page.wait_for_selector("#round-0 .held >> nth=1")

    await page.locator("#paused button.step-call").click()

    # Hangzhou ran; London is held again.
    await page.wait_for_selector("#round-0 article.lane[data-state=succeeded]")
    await page.wait_for_selector("#paused", state="visible")
    assert await page.locator("#round-0 .held").count() == 1
    editor = lane(page, 1).locator(".held textarea")
    await editor.fill('{"city": 5}')
    await lane(page, 1).locator(".argument-problems li").filter(
        has_text="5 is not of type 'string'").wait_for()
    await editor.fill('{"city": "Paris"}')
    await page.wait_for_selector("#round-0 article.lane >> nth=1 >> "
                                 "textarea[aria-invalid=false]")
    if SCREENSHOTS:
        await page.locator("#timeline").screenshot(
            path=str(server.root / "docs" / "screenshots" / "breakpoint.png"))
    await page.locator("#paused button.continue").click()

    assert await wait_status(page, "succeeded") == "succeeded"
    final = await page.locator("#run-header .final .text").inner_text()
    assert "Hangzhou" in final
    assert "Paris" in final
    assert "London" not in final
    assert await page.locator("#paused").count() == 0
    await assert_equals_reload(page)
    assert errors == []
    assert await page.evaluate("window.__cspViolations") == []


async def test_stepping_the_last_held_call_steps_one_call_then_cancel_ends_the_run(
    open_page: Any, server: Server,
) -> None:
    page = await open_page(user="alice", record=True)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    await start_with_breakpoints(page, break_before_tool="get_weather")
    await page.wait_for_selector("#round-0 .held >> nth=1")
    await page.locator("#paused button.step-call").click()
    await page.wait_for_selector("#round-0 article.lane[data-state=succeeded]")
    await page.wait_for_selector("#paused[data-before=calls]")
    assert await page.locator("#round-0 .held").count() == 1

    await page.locator("#paused button.step-call").click()  # the last held call

    # That one call ran, and nothing after it: round 2's model call waits.
    await page.wait_for_selector("#paused[data-before=model]")
    assert "after stepping one call" in await page.locator("#paused h2").inner_text()
    assert await page.locator("#round-0 article.lane[data-state=succeeded]").count() == 2
    assert await page.locator("#rounds > #round-1").count() == 0
    # One way to stop, its effect said next to it.
    assert await page.locator("button", has_text="Abort").count() == 0
    cancel = page.locator("#paused button.cancel-run")
    assert await cancel.inner_text() == "Cancel run"
    assert await page.locator("#cancel-what").inner_text() == \
        "End the run here, as cancelled: the model call is not made."
    assert await page.get_by_role("button", name="Cancel run").count() == 1
    if SCREENSHOTS:
        await page.locator("#paused").screenshot(
            path=str(server.root / "docs" / "screenshots" / "breakpoint-actions.png"))

    await cancel.click()
    assert await wait_status(page, "cancelled") == "cancelled"
    assert "Cancelled at a breakpoint by alice" in await page.locator(
        "#run-error").inner_text()
    assert await page.locator("#paused").count() == 0
    await assert_equals_reload(page)
    assert errors == []
    assert await page.evaluate("window.__cspViolations") == []


def api_token(server: Server, username: str) -> str:
    """A new API token of the user, made on the server's database."""
    made = subprocess.run([sys.executable, "manage.py", "create_api_token", username,
                           "--name", "browser"], cwd=server.root, env=server.env, check=True,
                          capture_output=True, text=True, timeout=60)
    return made.stdout.strip().splitlines()[-1]


async def test_arguments_edited_at_a_breakpoint_show_beside_the_models(
    open_page: Any, server: Server,
) -> None:
    page = await open_page(user="alice", record=True)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    await fill_playground(page, endpoint=FAILING_AND_SLOW,
                          tools=["always_fails", "slow_tool", "calculator"],
                          message="Nap at a breakpoint", system_prompt="", policy="Default",
                          tool_choice="auto", parallel=True, max_rounds="")
    await page.locator("details.breakpoints summary").click()
    await page.fill("input[name=break_before_tool]", "slow_tool")
    run_id = await submit_run(page)
    assert await wait_status(page, "waiting") == "waiting"
    slow = page.locator("#round-0 article.lane").filter(
        has=page.locator("code.tool-name", has_text="slow_tool"))
    editor = slow.locator(".held textarea")
    await editor.wait_for()
    assert json.loads(await editor.input_value()) == {"seconds": 1.5}

    await editor.fill('{"seconds": 0.2}')
    await slow.locator("textarea[aria-invalid=false]").wait_for()
    await page.locator("#paused button.step-call").click()
    # The last held call stepped: the run pauses again before round 2's model call.
    await page.wait_for_selector("#paused[data-before=model]")
    await page.locator("#paused button.continue").click()
    assert await wait_status(page, "succeeded") == "succeeded"

    # Arrived live: the arguments it ran with, by whom, beside the model's.
    edited = slow.locator("[data-breakpoint-edit]")
    await edited.wait_for()
    assert "Arguments edited at a breakpoint by alice" in await edited.inner_text()
    assert json.loads(await edited.locator("pre").inner_text()) == {"seconds": 0.2}
    original = slow.locator("details.model-arguments")
    assert await original.locator("summary").inner_text() == "Arguments the model sent"
    assert json.loads(await original.locator("pre").inner_text()) == {"seconds": 1.5}
    assert "Slept 0.2 s" in await slow.inner_text()
    if SCREENSHOTS:
        await slow.screenshot(
            path=str(server.root / "docs" / "screenshots" / "breakpoint-edited.png"))
    await assert_equals_reload(page)
    assert errors == []
    assert await page.evaluate("window.__cspViolations") == []

    answer = await page.request.get(f"/api/runs/{run_id}", headers={
        "Authorization": f"Bearer {api_token(server, 'alice')}"})
    assert answer.status == 200
    calls = {c["name"]: c for c in (await answer.json())["rounds"][0]["tool_calls"]}
    assert json.loads(calls["slow_tool"]["arguments"]) == {"seconds": 1.5}
    assert calls["slow_tool"]["breakpoint_edit"]["arguments"] == {"seconds": 0.2}
    assert calls["slow_tool"]["breakpoint_edit"]["edited_by"] == "alice"
    assert calls["slow_tool"]["result"] == "Slept 0.2 s"
    assert calls["calculator"]["breakpoint_edit"] is None


async def test_a_message_added_before_a_round_reaches_the_timeline(
    open_page: Any, server: Server,
) -> None:
    page = await open_page(user="alice")
    await start_with_breakpoints(page, break_before_round="2")
    assert await page.locator("#paused[data-before=model]").count() == 1

    await page.fill("#paused textarea[name=message]", "Answer in <em>one</em> line")
    await page.locator("#paused button.continue").click()

    assert await wait_status(page, "succeeded") == "succeeded"
    added = page.locator("#round-1 .added-message")
    await added.wait_for()
    assert "Answer in <em>one</em> line" in await added.inner_text()
    assert await page.locator("#round-1 .added-message em").count() == 0
