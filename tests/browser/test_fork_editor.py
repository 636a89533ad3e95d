"""Fork from round N (#16) in a real browser: the run page's "Fork from a round" opens
the editor with the conversation before that round's model call as editable blocks;
a tool result edited there (markup in it) drives the new run's round, and the new run's
page marks that message as edited, the others as inherited unchanged, and counts them
the same, all shown as text; a fork whose user message was edited is titled by it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .checks import Problems, screenshot_path
from .support import Server, start_run, wait_status
from .world import FORK_ENDPOINT

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

EDITED = "<b>edited</b> 5 m"


def block(page: Any, index: int) -> Any:
    return page.locator(f'#fork-blocks .fork-message[data-index="{index}"]')


async def tags(page: Any) -> list[str]:
    """What the run page's starting conversation says each message is."""
    return [await tag.inner_text() for tag in
            await page.locator('#start-conversation li.message small[class*="fork-"]').all()]


async def test_a_fork_with_an_edited_tool_result_goes_on_from_it(
        open_page: Any, server: Server) -> None:
    page = await open_page(user="bob")
    problems = Problems(page)
    original = await start_run(page, endpoint=FORK_ENDPOINT, tools=["convert_units"],
                               message="Convert 1 km")
    assert await wait_status(page) == "succeeded"
    assert "1000" in await page.inner_text("#final-answer .text")

    await page.click("#run-actions details.fork-form summary")
    await page.fill("#fork-form input[name=round]", "2")
    await page.click("#fork-form button[type=submit]")
    await page.wait_for_url(f"**/runs/{original}/fork/?round=2")

    # The blocks: the user message, the model's call (name and JSON arguments), its result.
    assert await page.is_hidden("#fork-messages")
    assert await page.locator("#fork-blocks .fork-message").count() == 3
    assert [await b.get_attribute("data-role")
            for b in await page.locator("#fork-blocks .fork-message").all()] == [
        "user", "assistant", "tool"]
    assert await block(page, 1).locator("input.call-name").input_value() == "convert_units"
    assert json.loads(await block(page, 1).locator("textarea.call-arguments").input_value()) == {
        "value": 1, "from_unit": "km", "to_unit": "m"}
    assert "1000" in await block(page, 2).locator("textarea.message-content").input_value()
    # Arguments that are not JSON are said to be so while typed (and forked as typed).
    arguments = block(page, 1).locator("textarea.call-arguments")
    warning = block(page, 1).locator(".arguments-warning")
    assert await warning.is_hidden()
    typed = await arguments.input_value()
    await arguments.fill("{value: 1")
    await warning.wait_for(state="visible")
    assert "Not valid JSON" in await warning.inner_text()
    assert await arguments.get_attribute("aria-invalid") == "true"
    await arguments.fill(typed)
    await warning.wait_for(state="hidden")

    await block(page, 2).locator("textarea.message-content").fill(EDITED)
    await block(page, 2).locator("input.is-error").check()
    # The raw JSON is the same conversation, edited.
    await page.check("#fork-raw-toggle")
    raw = json.loads(await page.input_value("#fork-messages"))
    assert raw[2] | {"tool_call_id": "?"} == {"role": "tool", "tool_call_id": "?",
                                              "content": EDITED, "is_error": True}
    await page.uncheck("#fork-raw-toggle")
    assert await block(page, 2).locator("textarea.message-content").input_value() == EDITED
    await page.locator(".fork-editor").screenshot(path=screenshot_path(server, "fork_editor.png"))

    await page.click("#fork-submit")
    await page.wait_for_url("**/runs/*/")
    assert f"/runs/{original}/" not in page.url
    assert await wait_status(page) == "succeeded"

    # The new round answered with the edited result; the page shows it as text.
    assert await page.inner_text("#final-answer .text") == f"Final: {EDITED}"
    marks = page.locator("#start-conversation li.message")
    assert [await m.get_attribute("data-fork-mark") for m in await marks.all()] == [
        "inherited", "inherited", "edited"]
    edited = marks.nth(2)
    # Open by itself: the conversation holds the model's turns.
    assert await page.get_attribute("#start-conversation details", "open") is not None
    assert await edited.locator("pre").inner_text() == EDITED
    assert "edited in the fork" in await edited.inner_text()
    assert "error result" in await edited.inner_text()
    assert await tags(page) == ["inherited unchanged", "inherited unchanged",
                                "edited in the fork"]
    summary = await page.inner_text("#fork-inherited")
    assert "not executed again" in summary
    assert "Of the 3 messages this run starts from: 2 inherited unchanged, 1 edited in the " \
           "fork." in summary
    assert await page.inner_text("#run-header h1") == "Convert 1 km"  # no request of its own
    assert await page.locator("#start-conversation b, #final-answer b").count() == 0
    # Only the new round was executed: round 2 of the script, no tool call.
    assert await page.locator("#rounds article.lane").count() == 0
    assert problems.seen == []
    await page.screenshot(path=screenshot_path(server, "fork_edited.png"), full_page=True)


async def test_a_refused_fork_keeps_the_edits_and_says_where(
        open_page: Any, server: Server) -> None:
    page = await open_page(user="bob")
    original = await start_run(page, endpoint=FORK_ENDPOINT, tools=["convert_units"],
                               message="Convert 1 km")
    assert await wait_status(page) == "succeeded"
    await page.goto(f"/runs/{original}/fork/?round=2")

    await block(page, 2).locator("input.tool-call-id").fill("nobody")
    await block(page, 2).locator("textarea.message-content").fill(EDITED)
    await page.click("#fork-submit")

    error = block(page, 2).locator("p.error")
    assert "messages[2]: tool_call_id 'nobody' answers no earlier tool call" in (
        await error.inner_text())
    assert await block(page, 2).locator("textarea.message-content").input_value() == EDITED
    assert await block(page, 2).locator("input.tool-call-id").input_value() == "nobody"


async def test_a_fork_whose_user_message_was_edited_is_titled_by_it(
        open_page: Any, server: Server) -> None:
    page = await open_page(user="bob")
    problems = Problems(page)
    original = await start_run(page, endpoint=FORK_ENDPOINT, tools=["convert_units"],
                               message="Convert 1 km")
    assert await wait_status(page) == "succeeded"
    await page.goto(f"/runs/{original}/fork/?round=1")

    await block(page, 0).locator("textarea.message-content").fill("Convert <i>2</i> km")
    await page.click("#fork-submit")
    await page.wait_for_url("**/runs/*/")
    assert f"/runs/{original}/" not in page.url
    assert await wait_status(page) == "succeeded"

    assert await page.inner_text("#run-header h1") == "Convert <i>2</i> km"
    assert await page.title() == "Run Convert <i>2</i> km · AgentForge"
    await page.click("#start-conversation summary")  # closed: no model turn in it
    assert await tags(page) == ["edited in the fork"]
    assert "1 edited in the fork." in await page.inner_text("#fork-inherited")
    assert await page.locator("#run-header h1 i, #start-conversation i").count() == 0
    assert problems.seen == []
    await page.goto("/runs/")
    assert await page.locator("#run-results").get_by_text("Convert <i>2</i> km").count() == 1
