"""The debug loop in a real browser: starting from a pasted conversation, exporting a
run as a fixture, rerunning it with replay modes, and comparing it with its parent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .checks import SCREENSHOTS, no_dialogs, screenshot_path
from .support import (
    RUN_URL,
    Server,
    assert_equals_reload,
    fill_playground,
    submit_run,
    wait_status,
)
from .world import SLOW_ENDPOINT, TAMPERED_RESULT

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

WEATHER = "Scripted: weather in parallel"
HOSTILE = "<img src=x onerror=alert(1)>"
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "earlier-1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "earlier-1", "content": f"Paris: 18 C {HOSTILE}"},
    {"role": "user", "content": "Now Hangzhou and London, please."},
]


async def run_weather(page: Any) -> str:
    await fill_playground(page, endpoint=WEATHER, tools=["get_weather"],
                          message="Weather in Hangzhou and London?", system_prompt="",
                          policy="Default", tool_choice="auto", parallel=True, max_rounds="")
    run_id = await submit_run(page)
    assert await wait_status(page) == "succeeded"
    return run_id


async def test_a_run_starts_from_a_pasted_conversation(open_page: Any, server: Server) -> None:
    page = await open_page(user="bob")
    dialogs = no_dialogs(page)
    await fill_playground(page, endpoint=WEATHER, tools=["get_weather"], policy="Default")
    assert await page.locator("textarea[name=conversation_json]").is_hidden()

    await page.check("input[name=input_mode][value=conversation]")

    assert await page.locator("textarea[name=user_message]").is_hidden()
    await page.fill("textarea[name=conversation_json]",
                    json.dumps([*CONVERSATION[:3], {"role": "tool", "tool_call_id": "x",
                                                    "content": "?"}], indent=1))
    await page.click("#start-run")
    error = await page.locator("#conversation-error").inner_text()
    assert "messages[3]: tool_call_id 'x' answers no earlier tool call" in error
    # The form comes back in conversation mode with the pasted text kept.
    assert await page.locator("textarea[name=user_message]").is_hidden()

    await page.fill("textarea[name=conversation_json]", json.dumps(CONVERSATION, indent=1))
    if SCREENSHOTS:
        await page.evaluate("document.activeElement.blur()")
        await page.locator("section.playground").screenshot(
            path=screenshot_path(server, "playground-conversation.png"))
    await submit_run(page)

    assert await wait_status(page) == "succeeded"
    roles = await page.locator("#start-conversation li").evaluate_all(
        "items => items.map(i => i.dataset.role)")
    assert roles == ["system", "user", "assistant", "tool", "user"]
    shown = await page.locator("#start-conversation").inner_text()
    assert f"Paris: 18 C {HOSTILE}" in shown  # as text, never as markup
    assert await page.locator("#start-conversation img").count() == 0
    assert "Here is the weather" in await page.locator("#run-header").inner_text()
    if SCREENSHOTS:
        await page.locator("#start-conversation").screenshot(
            path=screenshot_path(server, "run-starting-conversation.png"))
    assert dialogs == []


async def test_a_run_exports_as_a_fixture(open_page: Any, server: Server,
                                          tmp_path: Path) -> None:
    page = await open_page(user="bob")
    run_id = await run_weather(page)

    async with page.expect_download() as download_info:
        await page.click("#export-run")
    download = await download_info.value
    saved = tmp_path / download.suggested_filename
    await download.save_as(saved)

    assert download.suggested_filename == f"run-{run_id}.agentforge.json"
    fixture = json.loads(saved.read_text(encoding="utf-8"))
    assert (fixture["format"], fixture["version"], fixture["run"]["id"]) == (
        "agentforge-run", 1, run_id)
    assert [c["tool_name"] for c in fixture["rounds"][0]["calls"]] == ["get_weather"] * 2


async def test_a_replaying_rerun_compared_with_its_parent(open_page: Any,
                                                          server: Server) -> None:
    page = await open_page(user="bob")
    dialogs = no_dialogs(page)
    parent_id = await run_weather(page)

    await page.click("#rerun-action summary")  # the action bar's Rerun opens its options
    await page.select_option("#rerun-model", "recorded")
    await page.select_option("#rerun-tools", "recorded")
    await page.select_option("#rerun-on-divergence", "stop")
    if SCREENSHOTS:
        await page.locator("#rerun-form").screenshot(
            path=screenshot_path(server, "rerun-replay-modes.png"))
    await page.click("#rerun-form button[value=as_it_was]")
    await page.wait_for_url(lambda url: RUN_URL.search(url) is not None
                            and parent_id not in url)

    assert await wait_status(page) == "succeeded"
    await page.reload()  # the lineage section is rendered once, not live
    modes = await page.locator("#replay-modes").inner_text()
    assert "model recorded, tools recorded" in modes
    assert "stop" in modes

    await page.click("#compare-parent")
    await page.wait_for_url("**/runs/compare?*")
    verdict = await page.locator("#compare-verdict").inner_text()
    assert verdict == "Same tool calls, results and texts in every round."
    assert await page.locator("[data-diverges=true]").count() == 0
    # rounds that are the same come folded: opening one loads its calls
    assert await page.locator("tr.call").count() == 0
    await page.click("#cmp-round-0 details.round-fold summary")
    await page.locator("#cmp-round-0 tr.call").first.wait_for()
    calls = await page.locator("tr.call").evaluate_all("rows => rows.map(r => r.dataset.status)")
    assert calls == ["same", "same"]
    assert "replaying rerun (as it was) of A" in await page.inner_text("#compare-relation")
    if SCREENSHOTS:
        await page.screenshot(path=screenshot_path(server, "compare-runs.png"), full_page=True)
    assert dialogs == []


# Set on the page once it has loaded: a reload would lose it. A socket message that left
# the divergence in the (live) run header is noted.
WATCH_DIVERGENCE_JS = """() => {
  window.__sameDocument = true;
  window.__divergenceByLive = false;
  document.addEventListener('htmx:wsAfterMessage', () => {
    if (document.querySelector('#run-header #replay-divergence')) {
      window.__divergenceByLive = true;
    }
  });
}"""


async def test_a_replay_going_live_shows_where_it_diverged_as_it_happens(
        open_page: Any, server: Server) -> None:
    page = await open_page(user="bob")
    dialogs = no_dialogs(page)
    await fill_playground(page, endpoint=SLOW_ENDPOINT, tools=["slow_tool"], message="Nap",
                          system_prompt="", policy="Default", tool_choice="auto",
                          parallel=True, max_rounds="")
    parent_id = await submit_run(page)
    assert await wait_status(page) == "succeeded"
    server.world("tamper", parent_id)  # round 1's live result will differ from it
    await page.reload()

    await page.click("#rerun-action summary")
    await page.select_option("#rerun-model", "recorded")
    await page.select_option("#rerun-tools", "live")
    await page.select_option("#rerun-on-divergence", "live")
    await page.click("#rerun-form button[value=as_it_was]")
    await page.wait_for_url(lambda url: RUN_URL.search(url) is not None
                            and parent_id not in url)
    await page.evaluate(WATCH_DIVERGENCE_JS)

    box = page.locator("#run-header #replay-divergence")
    await box.wait_for(state="visible")
    text = await box.inner_text()
    assert "at round 1, call 1 (slow_tool): the result differs" in text
    assert TAMPERED_RESULT in text  # the recorded result, shown as text
    assert await wait_status(page) == "succeeded"
    assert await page.evaluate("window.__sameDocument === true")  # never reloaded
    assert await page.evaluate("window.__divergenceByLive")
    await assert_equals_reload(page)
    assert await page.locator("#replay-divergence").count() == 1
    assert dialogs == []
