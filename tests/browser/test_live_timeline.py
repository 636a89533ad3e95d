"""The live timeline in a real browser: rounds arriving live, socket drops, the playground."""

from __future__ import annotations

from typing import Any

import pytest

from .checks import SCREENSHOTS, screenshot_path
from .support import (
    CLOSE_SOCKET_JS,
    Server,
    assert_each_round_once,
    assert_equals_reload,
    eventually,
    fill_playground,
    log_in,
    next_round,
    release_naps,
    start_run,
    status,
    submit_run,
    tool_box,
    wait_caught_up,
    wait_round,
    wait_status,
)
from .world import (
    FAST_STREAM_ENDPOINT,
    FAST_STREAM_ROUNDS,
    FORK_ENDPOINT,
    SLOW_ENDPOINT,
    SLOW_ROUNDS,
    watched_endpoint,
)

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

FAILING_AND_SLOW = "Scripted: failing + slow tools"


async def test_a_run_streams_live_and_ends_equal_to_a_reload(
    open_page: Any, server: Server
) -> None:
    page = await open_page(record=True)
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    await log_in(page, server, "alice")

    await fill_playground(page, endpoint=watched_endpoint("live"),
                          tools=["always_fails", "watched_nap", "calculator"],
                          message="Check the status service, take a short nap and work out "
                                  "(2 + 3) * 7, all at once.",
                          system_prompt="", policy="Default", tool_choice="auto",
                          parallel=True, max_rounds="")
    if SCREENSHOTS:
        await page.evaluate("document.activeElement.blur()")
        # The form only: this suite's world also holds hostile endpoint names (the XSS
        # tests), which the capabilities table below the form would list.
        await page.locator("section.playground").screenshot(
            path=screenshot_path(server, "playground.png"))
    async with page.expect_response(lambda r: "/runs/" in r.url) as landing:
        await submit_run(page)
    response = await landing.value
    csp = await response.header_value("content-security-policy")
    assert csp is not None
    assert "script-src 'self' 'nonce-" in csp
    assert "default-src 'self'" in csp

    # Live: the page was served while the run was going, and the socket brought the rest.
    assert await page.locator("#timeline[ws-connect]").count() == 1
    assert await status(page) in ("queued", "running")
    # The nap is held until the page shows its call running and its socket is live,
    # then let go. (Round 0's other calls and the nap's start may all be stored before
    # the socket connects: the page is then served showing them, and no live update
    # comes until the nap ends.) What the run does next reaches the page live.
    await page.wait_for_selector('#live-state[data-state="live"]')
    await page.wait_for_selector('#round-0 article.lane[data-state="started"]')
    await release_naps(server, "live")
    assert await wait_status(page, "succeeded") == "succeeded"
    live = await page.evaluate("window.__live")
    assert live, "no live update arrived"
    assert live[-1]["status"] == "succeeded"
    assert live[-1]["rounds"] == ["round-0", "round-1"]
    # The nap's end came as round 0's lane and axis, not round 0 again (its start was
    # stored before it ran: the tool is not idempotent).
    messages = await page.evaluate("window.__messages")
    assert any('hx-swap-oob="beforeend:#round-0-lanes"' in m and 'id="round-0"' not in m
               for m in messages)
    assert await page.locator("#run-header .badge").first.inner_text() == "Succeeded"

    # The parallel round: three lanes that started together.
    lanes = page.locator("#round-0 article.lane")
    assert await lanes.count() == 3
    failing, slow, calc = lanes.nth(0), lanes.nth(1), lanes.nth(2)
    assert await failing.locator("code.tool-name").inner_text() == "always_fails"
    assert await failing.get_attribute("data-state") == "execution_error"
    assert await failing.locator(".badge").first.inner_text() == "Execution error"
    assert "the demo service is down" in await failing.locator(".error-box").inner_text()
    handled = await failing.locator("p.muted").inner_text()
    assert "decided by execution_error_to_model" in handled
    assert "sent the text above to the model" in handled
    assert await slow.locator("code.tool-name").inner_text() == "watched_nap"
    assert await slow.get_attribute("data-state") == "succeeded"
    assert "Slept 1.5 s" in await slow.inner_text()
    assert await calc.locator("code.tool-name").inner_text() == "calculator"
    assert "35" in await calc.locator("pre").nth(1).inner_text()
    starts = [int(await lane.locator("svg.bar rect").get_attribute("x") or "-1")
              for lane in (failing, slow, calc)]
    # On the bar's 0..1000 scale: one after the other, calculator would start at the end.
    assert all(0 <= x < 500 for x in starts), starts
    assert "One tool failed, the others answered" in await page.inner_text("#run-header")

    csp_violations = await page.evaluate("window.__cspViolations")
    assert csp_violations == []
    assert not [m for m in console if "Content Security Policy" in m or "pageerror" in m]

    if SCREENSHOTS:
        await page.screenshot(path=screenshot_path(server, "timeline.png"), full_page=True)
    await assert_equals_reload(page)
    await assert_each_round_once(page, 2)


async def test_socket_closed_by_the_page_resumes_without_gaps_or_doubles(
    open_page: Any,
) -> None:
    page = await open_page(user="alice", record=True)
    sockets: list[Any] = []
    page.on("websocket", lambda ws: sockets.append(ws))
    await start_run(page, endpoint=SLOW_ENDPOINT, tools=["slow_tool"])

    await wait_round(page, 0)
    assert await status(page) == "running"
    await page.evaluate(CLOSE_SOCKET_JS)  # a clean close: timeline.js reconnects
    await eventually(lambda: len(sockets) == 2)
    await next_round(page)
    assert await status(page) == "running"
    # Then a replay of everything: every block arrives again and must replace, not add.
    await page.evaluate("document.getElementById('run-seq').dataset.seq = '0'")
    await page.evaluate(CLOSE_SOCKET_JS)
    await eventually(lambda: len(sockets) == 3)

    assert await wait_status(page, "succeeded") == "succeeded"
    assert len(await page.evaluate("window.__closes")) == 2
    await assert_each_round_once(page, SLOW_ROUNDS + 1)
    await assert_equals_reload(page)
    await assert_each_round_once(page, SLOW_ROUNDS + 1)


async def test_socket_dropped_on_the_server_side_resumes(open_page: Any) -> None:
    page = await open_page(user="alice", record=True)
    page_sides: list[Any] = []
    server_sides: list[Any] = []

    def route(ws: Any) -> None:
        page_sides.append(ws)
        server_sides.append(ws.connect_to_server())

    await page.route_web_socket("**/ws/runs/**", route)
    await start_run(page, endpoint=SLOW_ENDPOINT, tools=["slow_tool"])

    await wait_round(page, 0)
    assert await status(page) == "running"
    # An abnormal drop (1006): the htmx ws extension reconnects on its own.
    await page_sides[-1].close(code=1006, reason="network gone")
    await eventually(lambda: len(page_sides) == 2)
    await next_round(page)
    assert await status(page) == "running"
    # The server ends the connection (a restart, a proxy timeout): the real connection
    # closes and the page sees 1001, which the extension leaves to timeline.js.
    await server_sides[-1].close(code=1001, reason="going away")
    await page_sides[-1].close(code=1001, reason="going away")
    await eventually(lambda: len(page_sides) == 3)

    assert await wait_status(page, "succeeded") == "succeeded"
    assert await page.evaluate("window.__closes") == [1006, 1001]
    # The viewer was told: disconnected while it was, live again, then the end. (How
    # many times each shows depends on how fast each reconnect succeeds.)
    states = await page.evaluate("window.__socketStates")
    assert {"live", "reconnecting"} <= set(states)
    assert states[-1] == "ended"
    assert states.index("live") < len(states) - 1 - states[::-1].index("reconnecting")
    assert await page.locator("#live-state").inner_text() == (
        "Run finished: no more updates of this run")
    await assert_each_round_once(page, SLOW_ROUNDS + 1)
    await assert_equals_reload(page)


async def test_the_live_headers_cancel_button_cancels_the_run(open_page: Any) -> None:
    page = await open_page(user="alice", record=True)
    await start_run(page, endpoint=SLOW_ENDPOINT, tools=["slow_tool"])
    await next_round(page)  # the header has been replaced by a live fragment since
    assert await page.evaluate("window.__live.length") > 0
    assert await status(page) == "running"
    await page.click("#run-header .cancel-form button")  # submits the page's #cancel-form
    assert await wait_status(page, "cancelled") == "cancelled"
    assert await page.locator("#run-header .cancel-form").count() == 0
    # "Cancel requested: the run stops at its next step" says how it ended once it has.
    assert await page.locator(".messages").inner_text() == "Run cancelled."
    await assert_equals_reload(page)


# Installed before any page script: every out-of-band fragment htmx found no target for
# (it fires this event on the body, and logs it).
OOB_ERRORS_JS = """
window.__oobErrors = [];
document.addEventListener('htmx:oobErrorNoTarget', (e) => {
  const content = e.detail && e.detail.content;
  window.__oobErrors.push(content ? (content.getAttribute('hx-swap-oob') || content.id
                                     || content.outerHTML.slice(0, 120)) : '?');
});
"""


async def start_paused_before_round_1(page: Any, endpoint: str, tools: list[str]) -> str:
    """A run held before its first model call, its page connected live: everything the
    run does next reaches the page over the socket."""
    await fill_playground(page, endpoint=endpoint, tools=tools, message="Go on",
                          system_prompt="", policy="Default", tool_choice="auto",
                          max_rounds="")
    await page.locator("details.breakpoints summary").click()
    await page.fill("input[name=break_before_round]", "1")
    run_id = await submit_run(page)
    await wait_status(page, "waiting")
    await page.wait_for_selector('#live-state[data-state="live"]')
    return run_id


async def test_controls_that_need_rounds_arrive_live(open_page: Any, server: Server) -> None:
    """The page opened before round 1: the run's rounds arrive live, and so do the
    controls that need them (fork from a round, each answered round's fork link)."""
    page = await open_page(user="alice", record=True)
    run_id = await start_paused_before_round_1(page, FORK_ENDPOINT, ["convert_units"])
    assert await page.locator("#rounds > section.round").count() == 0
    assert await page.locator("#fork-form").count() == 0  # nothing to fork from yet
    assert await page.locator("#export-run").count() == 1

    await page.locator("#paused button.continue").click()
    assert await wait_status(page, "succeeded") == "succeeded"
    await wait_round(page, 1)

    # No reload: the fork form came with the rounds, for the rounds the run has.
    fork_form = page.locator("#run-actions details.fork-form")
    await fork_form.wait_for(state="attached")
    rounds = page.locator("#fork-form input[name=round]")
    assert await rounds.get_attribute("max") == "2"
    assert await rounds.get_attribute("value") == "2"
    assert await page.locator("#rounds a.fork-round").count() == 2
    assert await page.locator("#export-run").count() == 1
    assert await page.locator("#rerun-form").count() == 1
    live_actions = await page.inner_text("#run-actions")

    await fork_form.locator("summary").click()
    if SCREENSHOTS:
        await page.locator("#fork-form").screenshot(
            path=screenshot_path(server, "live-fork-form.png"))
    await page.fill("#fork-form input[name=round]", "2")
    await page.click("#fork-form button[type=submit]")
    await page.wait_for_url(f"**/runs/{run_id}/fork/?round=2")
    await page.go_back()
    await page.wait_for_url(f"**/runs/{run_id}/")
    # The browser may show the page as it was first served (from its cache, before the
    # rounds): it then catches up live, as it did the first time.
    await wait_caught_up(page)
    assert await page.inner_text("#run-actions") == live_actions  # as a fresh page shows it


async def test_a_fast_streaming_run_sends_no_fragment_before_its_target(
    open_page: Any,
) -> None:
    """Pieces of a streamed answer come faster than the batches that show each round:
    none may reach the page before its round's stream is there, or after it is gone."""
    page = await open_page(user="alice", record=True)
    await page.context.add_init_script(OOB_ERRORS_JS)
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    await start_paused_before_round_1(page, FAST_STREAM_ENDPOINT, ["calculator"])

    await page.locator("#paused button.continue").click()
    assert await wait_status(page, "succeeded") == "succeeded"
    await wait_caught_up(page)

    # The pieces did come live, many of them ...
    messages = await page.evaluate("window.__messages")
    pieces = [m for m in messages if "-stext" in m or "-scall-" in m]
    assert len(pieces) > FAST_STREAM_ROUNDS, len(pieces)
    # ... and none missed its target.
    assert await page.evaluate("window.__oobErrors") == []
    assert not [m for m in console if "oobErrorNoTarget" in m], console
    await assert_each_round_once(page, FAST_STREAM_ROUNDS + 1)
    await assert_equals_reload(page)


async def test_the_playground_remembers_the_last_inputs_per_user(
    open_page: Any,
) -> None:
    page = await open_page(user="bob")
    message = "Remember this one, bob: Hangzhou & Paris <3"
    await start_run(page, endpoint="Scripted: weather in parallel",
                    tools=["get_weather", "lookup_order"], message=message,
                    system_prompt="Be brief.", tool_choice="required", parallel=False,
                    max_rounds="7")
    await wait_status(page)

    await page.goto("/playground/")
    selected = await page.eval_on_selector("select[name=endpoint]",
                                           "s => s.options[s.selectedIndex].text")
    assert selected == "Scripted: weather in parallel"
    checked = await page.eval_on_selector_all(
        "input[name=tools]:checked",
        "boxes => boxes.map(b => b.closest('label').querySelector('code').textContent)")
    assert sorted(checked) == ["get_weather", "lookup_order"]
    assert await tool_box(page, "calculator").is_checked() is False
    assert await page.input_value("textarea[name=user_message]") == message
    assert await page.input_value("textarea[name=system_prompt]") == "Be brief."
    assert await page.input_value("select[name=tool_choice]") == "required"
    assert await page.locator("input[name=parallel]").is_checked() is False
    assert await page.input_value("input[name=max_round_trips]") == "7"

    # Per user: alice's playground does not show bob's inputs.
    other = await open_page(user="alice")
    await other.goto("/playground/")
    assert await other.input_value("textarea[name=user_message]") != message


@pytest.mark.both  # the runs list's filters on PostgreSQL too (the scale-out pass)
async def test_the_runs_page_filters_in_place_and_the_back_button_returns(
    open_page: Any,
) -> None:
    """The filters update the list without reloading the page, live in the URL, and the
    back button brings the previous filtering back."""
    page = await open_page(user="alice")
    await start_run(page, endpoint=FAILING_AND_SLOW,
                    tools=["always_fails", "slow_tool", "calculator"],
                    message="Filter me 7f3a: check the status service", system_prompt="",
                    policy="Default", tool_choice="auto", parallel=True, max_rounds="")
    assert await wait_status(page, "succeeded") == "succeeded"

    await page.goto("/runs/")
    await page.evaluate("window.__samePage = true")
    await page.fill("#run-filters input[name=q]", "Filter me 7f3a")
    await page.press("#run-filters input[name=q]", "Enter")
    await page.wait_for_url("**/runs/?q=Filter+me+7f3a")  # only the filters in use
    rows = page.locator("#run-results table.runs tbody tr")
    await page.wait_for_selector("#run-results >> text=Filter me 7f3a")
    assert await rows.count() == 1
    assert "Filter me 7f3a" in await rows.first.inner_text()

    await page.select_option("#run-filters select[name=status]", "failed")
    await page.wait_for_url("**/runs/?status=failed&q=Filter+me+7f3a")
    await page.wait_for_selector("#run-results >> text=No runs match these filters.")
    assert await page.evaluate("window.__samePage") is True  # never reloaded

    await page.go_back()
    await page.wait_for_url(lambda url: "status=failed" not in url and "q=Filter" in url)
    await page.wait_for_selector("#run-results >> text=Filter me 7f3a")

    # A filter the server refuses says why, in place.
    await page.fill("#run-filters input[name=q]", "x" * 201)
    await page.press("#run-filters input[name=q]", "Enter")
    await page.wait_for_selector("#run-results >> text=q must be 1 to 200 characters")
