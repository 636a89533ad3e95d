"""Security in a real browser: hostile model and tool output stays text; access checks."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from .checks import HALLUCINATED_NAME, INJECTED, Watch
from .support import (
    CLOSE_SOCKET_JS,
    Server,
    assert_equals_reload,
    fill_playground,
    socket_close,
    start_run,
    status,
    submit_run,
    wait_round,
    wait_status,
)
from .world import SLOW_ENDPOINT, XSS_ENDPOINT, XSS_FAILING_ENDPOINT, XSS_POLICY
from .xss_tools import ALL_PAYLOADS, PAYLOADS

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]


async def assert_payloads_are_text(page: Any) -> None:
    injected = await page.eval_on_selector_all(INJECTED, "els => els.map(e => e.outerHTML)")
    assert injected == []
    text = await page.inner_text("#timeline")
    for payload in PAYLOADS:
        assert payload in text, payload


async def test_hostile_model_and_tool_output_is_shown_as_text(
    open_page: Any, server: Server
) -> None:
    await asyncio.to_thread(server.world, "enable-xss")
    page = await open_page(user="alice", record=True)
    watch = Watch(page, server)

    await fill_playground(page, endpoint=XSS_ENDPOINT, policy=XSS_POLICY,
                          tools=["slow_tool", "xss_echo", "xss_fails"],
                          message=f"User says {ALL_PAYLOADS}", system_prompt=ALL_PAYLOADS)
    assert await page.eval_on_selector_all(INJECTED, "els => els.length") == 0
    await submit_run(page)
    assert await page.locator("#timeline[ws-connect]").count() == 1  # the rest comes live
    assert await wait_status(page) == "succeeded"
    assert (await page.evaluate("window.__live"))[-1]["status"] == "succeeded"

    await assert_payloads_are_text(page)
    assert ALL_PAYLOADS in await page.inner_text("#run-header h1")
    assert XSS_ENDPOINT in await page.inner_text("#run-header")
    assert XSS_POLICY in await page.inner_text("#run-header")
    lanes = page.locator("#round-0 article.lane")
    names = await lanes.locator("code.tool-name").all_inner_texts()
    assert names == ["slow_tool", "xss_echo", "xss_fails", HALLUCINATED_NAME, "xss_echo"]
    states = [await lanes.nth(i).get_attribute("data-state") for i in range(5)]
    assert states == ["succeeded", "succeeded", "execution_error", "hallucinated",
                      "arguments_error"]
    assert ALL_PAYLOADS in await lanes.nth(2).locator(".error-box").inner_text()
    # The last round's text is the final answer: shown once, in the header.
    assert "{{7*7}}" in await page.inner_text("#final-answer")
    assert await page.locator("#round-1 .ai-text").count() == 0
    assert await page.evaluate("window.__cspViolations") == []

    await assert_equals_reload(page)
    await assert_payloads_are_text(page)

    # A run stopped by a hostile tool name: the name is in the run's error message.
    await start_run(page, endpoint=XSS_FAILING_ENDPOINT, policy="Default", tools=["xss_echo"],
                    message="stop")
    assert await wait_status(page) == "failed"
    assert HALLUCINATED_NAME in await page.inner_text("#run-header .error-box")
    assert await page.eval_on_selector_all(INJECTED, "els => els.length") == 0
    watch.assert_clean()


async def test_other_users_cannot_open_or_watch_a_run(open_page: Any, server: Server) -> None:
    alice = await open_page(user="alice")
    sockets: list[str] = []
    alice.on("websocket", lambda socket: sockets.append(socket.url))
    run_id = await start_run(alice, endpoint=SLOW_ENDPOINT, tools=["slow_tool"])
    await wait_round(alice, 0)
    url = f"{server.ws_base}/ws/runs/{run_id}/"

    bob = await open_page(user="bob")
    response = await bob.goto(f"/runs/{run_id}/")
    assert response is not None
    assert response.status == 404
    await bob.goto("/runs/")
    assert run_id not in await bob.content()
    assert await socket_close(bob, url) == {"code": 4403, "opened": True}

    anonymous = await open_page()
    await anonymous.goto("/accounts/login/")
    assert await socket_close(anonymous, url) == {"code": 4401, "opened": True}

    # alice's session ends while she watches: the page stops reconnecting on 4401.
    if await status(alice) == "running":
        await alice.context.clear_cookies()
        before = len(sockets)
        await alice.evaluate(CLOSE_SOCKET_JS)
        await alice.wait_for_selector("#timeline[data-socket=refused]", state="attached")
        assert len(sockets) == before + 1
        await asyncio.sleep(1.2)  # the ws extension would retry a 1006 within a second
        assert len(sockets) == before + 1
