"""The timeline read as a debugger, in a real browser (issue #16): a round's calls on one
time axis, a running call's elapsed time ticking, header counts that agree with the
lanes at every live moment, cancelling a streaming run, and the raw event stream."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tools_app.fake_llm import BackgroundServer
from tools_app.fake_llm.app import FakeLLMApp
from tools_app.fake_llm.script import ScriptSet

from .support import (
    Server,
    assert_equals_reload,
    release_naps,
    start_run,
    status,
    wait_status,
)
from .world import LONG_ENDPOINT, STREAMING_ENDPOINTS, watched_endpoint

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

FAILING_AND_SLOW = "Scripted: failing + slow tools"
SLOW_STREAM, QUICK_STREAM, HELD_NAP, MAIL_TO_APPROVE = STREAMING_ENDPOINTS
LONG_TEXT = "This answer streams in slowly, a few characters at a time. " * 60
SCRIPTS = {"scripts": {
    # 8 characters per event, 40 ms apart: over ten seconds of stream, cancelled first.
    "slow-text": {"steps": [{"text": LONG_TEXT}], "chunk_delay_ms": 40},
    "quick": {"steps": [{"text": "Streamed <b>whole</b>."}], "chunk_size": 6},
    "held-nap": {"steps": [
        {"tool_calls": [{"name": "watched_nap", "arguments": {"seconds": 0, "key": "wire"}}]},
        {"text": "Napped: {last_result}"}]},
    "mail-to-approve": {"steps": [
        {"tool_calls": [{"name": "send_email",
                         "arguments": {"to": "ann@example.com", "subject": "Hello"}}]},
        {"text": "Done: {last_result}"}]},
}}
# The playground's settings left as they come: the runs below differ in endpoint, tools
# and message only.
AS_THEY_COME = {"system_prompt": "", "policy": "Default", "tool_choice": "auto",
                "parallel": True, "max_rounds": ""}
ERROR_RED = "rgb(180, 35, 24)"  # --err in static/css/app.css
SHOTS = os.environ.get("AGENTFORGE_TIMELINE_SHOTS")  # a folder: save screenshots there

# Every live message: the header's tool-call count and the lanes on the page.
COUNTS_JS = """
window.__counts = [];
document.addEventListener('htmx:wsAfterMessage', () => {
  const total = document.querySelector('#run-header [data-total="tool_calls"]');
  window.__counts.push([total ? parseInt(total.textContent, 10) : null,
                        document.querySelectorAll('#rounds article.lane').length]);
});
"""


async def shot(page: Any, name: str, selector: str | None = None) -> None:
    if not SHOTS:
        return
    path = str(Path(SHOTS) / name)
    if selector is None:
        await page.screenshot(path=path, full_page=True)
    else:
        await page.locator(selector).screenshot(path=path)


@pytest.fixture(scope="module")
def fake_provider(server: Server) -> Iterator[BackgroundServer]:
    provider = BackgroundServer(FakeLLMApp(ScriptSet.model_validate(SCRIPTS))).start()
    try:
        server.world("streaming", provider.base_urls()["openai"])
        yield provider
    finally:
        provider.stop()


async def test_a_rounds_calls_share_a_time_axis_and_a_running_call_ticks(
    open_page: Any, server: Server,
) -> None:
    page = await open_page(user="alice", record=True)
    await page.context.add_init_script(COUNTS_JS)
    await start_run(page, endpoint=watched_endpoint("axis"),
                    tools=["always_fails", "watched_nap", "calculator"], message="Go",
                    system_prompt="", policy="Default", tool_choice="auto", parallel=True,
                    max_rounds="")

    # The nap is held until released below: its elapsed time ticks on between live
    # updates. The three calls may start in one live update, so the nap's lane is found
    # by its tool's name, not by being the one running lane.
    nap = page.locator('#round-0 article.lane[data-state="started"]').filter(
        has=page.locator("code.tool-name", has_text=re.compile(r"^watched_nap$")))
    ticking = nap.locator(".elapsed[data-ticking]")
    await ticking.wait_for()
    first = await ticking.inner_text()
    await page.wait_for_function(
        """first => {
          const lane = [...document.querySelectorAll(
            '#round-0 article.lane[data-state="started"]')].find(
            l => l.querySelector('code.tool-name').textContent === 'watched_nap');
          const el = lane && lane.querySelector('.elapsed[data-ticking]');
          return el && el.textContent !== first;
        }""", arg=first)
    await shot(page, "timeline-running.png", "#round-0")
    await release_naps(server, "axis")

    assert await wait_status(page, "succeeded") == "succeeded"
    await assert_equals_reload(page)
    axis = page.locator("#round-0-axis")
    assert await axis.locator(".wf-ticks span").count() == 5
    assert (await axis.locator(".wf-ticks span").last.inner_text()).endswith(" s")
    rows = axis.locator(".wf-row:not(.wf-scale)")
    assert await rows.count() == 3
    names = [await rows.nth(i).locator("code").inner_text() for i in range(3)]
    assert names == ["always_fails", "watched_nap", "calculator"]
    widths = [int(await rows.nth(i).locator("rect").get_attribute("width") or "0")
              for i in range(3)]
    assert widths[1] == max(widths)
    assert widths[1] > 900  # the nap spans the round
    starts = [int(await rows.nth(i).locator("rect").get_attribute("x") or "-1")
              for i in range(3)]
    assert all(0 <= x < 100 for x in starts), starts  # parallel: they started together
    failed_fill = await rows.nth(0).locator("rect").evaluate("r => getComputedStyle(r).fill")
    assert failed_fill == ERROR_RED
    # A row links to its lane.
    await rows.nth(0).locator("a").click()
    first_lane = await page.locator("#round-0 article.lane").first.get_attribute("id")
    assert page.url.endswith(f"#{first_lane}")
    await shot(page, "timeline-axis.png", "#round-0")


async def test_header_counts_agree_with_the_lanes_at_every_live_moment(
    open_page: Any, server: Server,
) -> None:
    page = await open_page(user="alice", record=True)
    await page.context.add_init_script(COUNTS_JS)
    await start_run(page, endpoint=watched_endpoint("counts"),
                    tools=["always_fails", "watched_nap", "calculator"], message="Go",
                    system_prompt="", policy="Default", tool_choice="auto", parallel=True,
                    max_rounds="")
    # The nap holds the run until the page's socket is live (round 0's other calls may
    # all be stored before it connects): what the run does next reaches the page live.
    await page.wait_for_selector('#live-state[data-state="live"]')
    await release_naps(server, "counts")
    assert await wait_status(page, "succeeded") == "succeeded"

    counts = await page.evaluate("window.__counts")
    assert counts, "no live message arrived"
    assert [c for c in counts if c[0] != c[1]] == []
    assert counts[-1] == [3, 3]
    # The error is shown once, in its lane; the final answer once, in the header.
    assert await page.locator("#round-0 .error-box").count() == 1
    assert await page.locator("#run-error").count() == 0
    assert await page.locator("text=One tool failed, the others answered").count() == 1


async def test_a_hallucinated_call_is_an_error_the_header_links_to(open_page: Any) -> None:
    page = await open_page(user="alice")
    await start_run(page, endpoint="Scripted: hallucinated tool", tools=["calculator"],
                    message="Go", system_prompt="", policy="Default", tool_choice="auto",
                    parallel=True, max_rounds="")
    assert await wait_status(page, "failed") == "failed"
    lane = page.locator('#round-0 article.lane[data-state="hallucinated"]')
    assert await lane.locator(".badge").first.evaluate("b => getComputedStyle(b).color") \
        == ERROR_RED
    link = page.locator("#run-error a")
    assert await link.get_attribute("href") == f"#{await lane.get_attribute('id')}"
    assert "get_stock_price" in await link.inner_text()
    assert await page.locator("#run-error pre").count() == 0  # not repeated there
    await shot(page, "timeline-hallucinated.png", "#timeline")


async def test_cancelling_a_streaming_run_keeps_what_it_streamed(
    open_page: Any, fake_provider: BackgroundServer,
) -> None:
    page = await open_page(user="alice", record=True)
    await start_run(page, endpoint=SLOW_STREAM, tools=[], message="Stream please",
                    system_prompt="", policy="Default", tool_choice="auto", parallel=True,
                    max_rounds="")
    await page.wait_for_function(
        "() => (document.getElementById('round-0-stext') || {textContent: ''})"
        ".textContent.length > 40")
    assert await status(page) == "running"
    streamed = await page.locator("#round-0-stext").inner_text()

    run_url = page.url
    async with page.expect_navigation():
        await page.click("#run-header .cancel-form button")
    assert page.url == run_url
    assert await wait_status(page, "cancelled") == "cancelled"
    # The confirmation is on the run page, where the user pressed the button ("Cancel
    # requested", then, once the run has ended, how).
    assert await page.locator(".messages").inner_text() == "Run cancelled."

    await page.wait_for_selector('#round-0 [data-round-ended="cancelled"]')
    assert await page.locator("#round-0 .round-head .badge").first.inner_text() == "cancelled"
    assert await page.locator("#round-0-stream").count() == 0
    kept = await page.locator("#round-0 .ai-text.partial").inner_text()
    # The page joined the stream after it began (fragments are broadcast, not stored):
    # what it saw live is part of what was kept, which starts at the answer's start.
    assert streamed[:40] in kept
    assert kept.startswith("This answer streams in slowly")
    assert len(kept) < len(LONG_TEXT)
    await shot(page, "timeline-cancelled-stream.png", "#timeline")
    await page.goto("/playground/")
    assert await page.locator(".messages").count() == 0  # not carried to the next page


async def quick_run(open_page: Any) -> Any:
    """A page on a finished run of the quick stream: one streamed round, no tools."""
    page = await open_page(user="alice")
    await start_run(page, endpoint=QUICK_STREAM, tools=[], message="Go", **AS_THEY_COME)
    assert await wait_status(page, "succeeded") == "succeeded"
    return page


async def test_the_raw_view_shows_the_event_stream_beside_the_response(
    open_page: Any, fake_provider: BackgroundServer,
) -> None:
    page = await quick_run(open_page)

    # The bodies are not in the page: opening the panel loads them.
    assert await page.locator("#round-0-sse").count() == 0
    assert await page.locator("#round-0 [data-wire-status]").text_content() == "Loading…"
    await page.click("#round-0 details.wire > summary")
    stream = page.locator("#round-0-sse pre")
    await stream.wait_for()
    assert await page.locator("#round-0 [data-wire-status]").count() == 0
    text = await stream.inner_text()
    lines = [line for line in text.splitlines() if line]
    assert lines[0].startswith("data: {")
    assert lines[-1] == "data: [DONE]"
    assert "<b>" in text  # escaped, shown as text
    assert await page.locator("#round-0-sse b").count() == 0
    response = page.locator("#round-0 .wire-grid > div").nth(1)
    assert "Streamed <b>whole</b>." in await response.inner_text()
    await shot(page, "timeline-raw-stream.png", "#round-0")


async def test_the_wire_panel_of_a_round_that_arrived_live_loads_when_opened(
    open_page: Any, server: Server, fake_provider: BackgroundServer,
) -> None:
    page = await open_page(user="alice")
    await start_run(page, endpoint=HELD_NAP, tools=["watched_nap"], message="Nap",
                    **AS_THEY_COME)
    await page.wait_for_selector('#live-state[data-state="live"]')
    await page.wait_for_selector('#round-0 article.lane[data-state="started"]')
    # The nap is held: the next round can only reach this page over its socket.
    assert await page.locator("#round-1").count() == 0
    await release_naps(server, "wire")
    assert await wait_status(page, "succeeded") == "succeeded"
    await page.click("#round-1 details.wire > summary")
    request = page.locator("#round-1 .wire-grid[hx-disable] pre").first
    await request.wait_for()
    assert '"content": "Slept 0 s"' in await request.inner_text()


async def test_an_open_wire_panel_stays_open_when_its_round_is_shown_again(
    open_page: Any, fake_provider: BackgroundServer,
) -> None:
    deciding = await open_page(user="alice")
    run_id = await start_run(deciding, endpoint=MAIL_TO_APPROVE, tools=["send_email"],
                             message="Email ann", **AS_THEY_COME)
    assert await wait_status(deciding, "waiting") == "waiting"
    watching = await open_page(user="alice")
    await watching.goto(f"/runs/{run_id}/")
    await watching.wait_for_selector('#live-state[data-state="live"]')
    await watching.click("#round-0 details.wire > summary")
    await watching.locator("#round-0 .wire-grid[hx-disable] pre").first.wait_for()
    await watching.evaluate("document.getElementById('round-0').dataset.shown = 'before'")

    # The decision, made on another page, shows round 0 again on this one (live).
    await deciding.locator("#round-0 article.lane button.approve").click()
    await watching.wait_for_function(
        "() => { const round = document.getElementById('round-0');"
        " return round && !round.dataset.shown && round.querySelector("
        "'details.wire[open] > .wire-grid[hx-disable] pre'); }")
    assert await watching.locator("#round-0 [data-wire-status]").count() == 0
    response = watching.locator("#round-0 .wire-grid > div").nth(1).locator("pre").first
    assert "ann@example.com" in await response.inner_text()  # loaded again


async def test_a_wire_panel_that_cannot_load_says_so_and_keeps_its_downloads(
    open_page: Any, fake_provider: BackgroundServer,
) -> None:
    page = await quick_run(open_page)
    await page.route("**/rounds/0/wire/", lambda route: route.fulfill(
        status=500, body="<b>not shown</b>", content_type="text/html"))
    await page.click("#round-0 details.wire > summary")
    status = page.locator("#round-0 [data-wire-status]")
    await page.wait_for_function(
        "() => document.querySelector('#round-0 [data-wire-status]')"
        ".dataset.wireStatus === 'failed'")
    assert await status.inner_text() == "Could not load the bodies (HTTP 500); open again to retry"
    assert await page.locator("#round-0 .wire-grid b").count() == 0
    links = page.locator("#round-0 .wire-grid a[download]")
    assert [await link.inner_text() for link in await links.all()] == ["request", "response"]
    await shot(page, "timeline-wire-not-loaded.png", "#round-0")

    # Closed and opened again, once the server answers: the bodies come.
    await page.unroute("**/rounds/0/wire/")
    await page.click("#round-0 details.wire > summary")
    await page.click("#round-0 details.wire > summary")
    await page.locator("#round-0 .wire-grid[hx-disable] pre").first.wait_for()
    assert await page.locator("#round-0 [data-wire-status]").count() == 0
    assert '"content": "Go"' in await page.locator("#round-0 .wire-grid pre").first.inner_text()


async def test_the_playground_notes_scripted_endpoints_and_keeps_its_draft_over_a_probe(
    open_page: Any, fake_provider: BackgroundServer,
) -> None:
    page = await open_page(user="alice")
    await page.goto("/playground/")
    note = page.locator("#scripted-note")
    await page.select_option("select[name=endpoint]", label=SLOW_STREAM)
    assert await note.is_hidden()
    await page.select_option("select[name=endpoint]", label=FAILING_AND_SLOW)
    assert await note.is_visible()
    assert "ignores your messages" in await note.inner_text()

    await page.check("input[name=input_mode][value=simple]")
    await page.fill("textarea[name=user_message]", "A draft <i>not</i> to lose")
    await page.locator("input[name=parallel]").set_checked(False)
    probe = page.locator("table.probe-summary tr", has_text=FAILING_AND_SLOW).locator(
        "button")
    async with page.expect_navigation():
        await probe.click()
    assert page.url.endswith("/playground/")
    assert "Probing" in await page.locator(".messages").inner_text()
    assert await page.input_value("textarea[name=user_message]") == "A draft <i>not</i> to lose"
    assert await page.locator("input[name=parallel]").is_checked() is False
    selected = await page.eval_on_selector("select[name=endpoint]",
                                           "s => s.options[s.selectedIndex].text")
    assert selected == FAILING_AND_SLOW
    assert await note.is_visible()


async def test_a_run_stopped_by_its_round_cap_shows_the_calls_it_never_ran_live(
    open_page: Any,
) -> None:
    page = await open_page(user="alice", record=True)
    await page.context.add_init_script(COUNTS_JS)
    await start_run(page, endpoint=LONG_ENDPOINT, tools=["slow_tool"], message="Go",
                    system_prompt="", policy="Default", tool_choice="auto", parallel=False,
                    max_rounds="1")
    assert await wait_status(page, "failed") == "failed"

    unexecuted = page.locator('#round-1 article.lane[data-state="not_executed"]')
    await unexecuted.wait_for()  # brought by the batch that ended the run
    assert await unexecuted.locator(".badge").inner_text() == "Not executed"
    settings = page.locator("#run-settings")
    assert await settings.locator('[data-setting="Max rounds"] dd').inner_text() \
        == "1 (this run)"
    assert await settings.locator('[data-setting="Parallel calls"] dd').inner_text() \
        == "off (this run)"
    counts = await page.evaluate("window.__counts")
    assert [c for c in counts if c[0] != c[1]] == []
    assert counts[-1] == [2, 2]
    await shot(page, "timeline-not-executed.png", "#timeline")
    await assert_equals_reload(page)
