"""Helpers of the browser suite: the server handle, pages, the playground, the timeline."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking"]
VIEWPORT = {"width": 1400, "height": 1000}
WAIT_MS = 15_000  # the longest any single wait in the suite may take

RUN_URL = re.compile(r"/runs/([0-9a-f-]{36})/$")
TERMINAL = ("succeeded", "failed", "cancelled")

# What a page's state looks like, for "the live DOM equals a reload" comparisons.
SNAPSHOT_JS = """() => {
  const timeline = document.getElementById('timeline');
  const marker = document.getElementById('run-seq');
  return {
    header: document.getElementById('run-header').innerText,
    rounds: document.getElementById('rounds').innerText,
    ids: Array.from(timeline.querySelectorAll('[id]')).map(e => e.id).sort(),
    seq: marker ? marker.dataset.seq : null,
  };
}"""

# The top-level round blocks and every call's id, to prove nothing is doubled.
STRUCTURE_JS = """() => ({
  rounds: Array.from(document.querySelectorAll('#rounds > [id^="round-"]'))
    .map(e => [e.id, e.dataset.round]),
  calls: Array.from(document.querySelectorAll('#rounds article[id^="call-"]')).map(e => e.id),
  allIds: Array.from(document.querySelectorAll('[id]')).map(e => e.id),
})"""

# Installed before any page script: what every live socket message changed, and any
# CSP violation the page reports.
RECORDER_JS = """
window.__live = [];
window.__cspViolations = [];
window.__closes = [];
document.addEventListener('htmx:wsClose', (e) => { window.__closes.push(e.detail.event.code); });
document.addEventListener('securitypolicyviolation', (e) => {
  window.__cspViolations.push(e.violatedDirective + ' ' + e.blockedURI);
});
window.__socketStates = [];
document.addEventListener('DOMContentLoaded', () => {
  const banner = document.getElementById('live-state');
  if (!banner) { return; }
  new MutationObserver(() => {
    const last = window.__socketStates[window.__socketStates.length - 1];
    if (banner.dataset.state !== last) { window.__socketStates.push(banner.dataset.state); }
  }).observe(banner, {attributes: true, attributeFilter: ['data-state']});
});
window.__messages = [];
document.addEventListener('htmx:wsBeforeMessage', (e) => {
  window.__messages.push(e.detail.message);
});
document.addEventListener('htmx:wsAfterMessage', () => {
  const badge = document.querySelector('#run-header [data-status]');
  window.__live.push({
    status: badge ? badge.dataset.status : null,
    rounds: Array.from(document.querySelectorAll('#rounds > [id^="round-"]')).map(e => e.id),
    states: Array.from(document.querySelectorAll('#rounds article.lane'))
      .map(a => a.dataset.state),
  });
});
"""

# Close the page's live socket as a network drop would (the htmx ws extension keeps its
# wrapper in the element's internal data; see static/vendor/htmx-ext-ws.min.js).
CLOSE_SOCKET_JS = """() => {
  const wrapper = htmx.find('#timeline')['htmx-internal-data'].webSocket;
  wrapper.socket.close();
  return true;
}"""

# Open a socket from the page's origin (so its cookies go along) and report the close.
SOCKET_CLOSE_CODE_JS = """(url) => new Promise((resolve) => {
  const socket = new WebSocket(url);
  let opened = false;
  socket.onopen = () => { opened = true; };
  socket.onclose = (e) => resolve({code: e.code, opened: opened});
  setTimeout(() => resolve({code: null, opened: opened}), 5000);
})"""
ABNORMAL_CLOSE = 1006


async def socket_close(page: Any, url: str) -> dict[str, Any]:
    """How the server ends a WebSocket to `url` opened from `page`: {code, opened}.

    Once more on 1006: the server sends its close frame, then drops the connection if
    the browser has not answered within the close handshake timeout (1 s); a browser
    starved of CPU (the whole suite runs on 2 cores) may not have read the frame by then,
    and the reset discards it. The page itself would simply reconnect."""
    result: dict[str, Any] = await page.evaluate(SOCKET_CLOSE_CODE_JS, url)
    if result.get("code") == ABNORMAL_CLOSE:
        result = await page.evaluate(SOCKET_CLOSE_CODE_JS, url)
    return result


@dataclass
class Server:
    base_url: str
    env: dict[str, str]
    root: Path
    log: Path
    passwords: dict[str, str] = field(default_factory=dict)
    sessions: dict[str, Any] = field(default_factory=dict)  # username -> storage state

    @property
    def ws_base(self) -> str:
        return "ws://" + urlsplit(self.base_url).netloc

    def world(self, command: str, *args: str) -> None:
        """Run a `tests/browser/world.py` step against this server's database."""
        subprocess.run([sys.executable, "-m", "tests.browser.world", command, *args],
                       cwd=self.root, env=self.env, check=True, capture_output=True,
                       timeout=60)

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]


async def new_page(browser: Any, server: Server, *, record: bool = False,
                   user: str | None = None) -> Any:
    """A page in a fresh context; `user`: logged in (through the login form the first
    time, then with that session's cookies: password hashing is slow on purpose)."""
    state = server.sessions.get(user) if user else None
    context = await browser.new_context(base_url=server.base_url, viewport=VIEWPORT,
                                        storage_state=state)
    context.set_default_timeout(WAIT_MS)
    if record:
        await context.add_init_script(RECORDER_JS)
    page = await context.new_page()
    if user and state is None:
        await log_in(page, server, user)
    return page


async def log_in(page: Any, server: Server, username: str) -> None:
    await page.goto("/accounts/login/")
    await page.fill("input[name=username]", username)
    await page.fill("input[name=password]", server.passwords[username])
    await page.click("form button[type=submit]")
    await page.wait_for_url("**/playground/")
    server.sessions[username] = await page.context.storage_state()


def tool_box(page: Any, name: str) -> Any:
    """The playground's checkbox of one tool (its label holds name and description)."""
    label = page.locator("label.tool-choice").filter(
        has=page.locator("code", has_text=re.compile(rf"^{re.escape(name)}$")))
    return label.locator("input[type=checkbox]")


async def fill_playground(page: Any, *, endpoint: str, tools: list[str],
                          message: str | None = None, system_prompt: str | None = None,
                          policy: str | None = None, tool_choice: str | None = None,
                          parallel: bool | None = None, max_rounds: str | None = None) -> None:
    await page.goto("/playground/")
    await page.select_option("select[name=endpoint]", label=endpoint)
    if policy is not None:
        await page.select_option("select[name=policy]", label=policy)
    for box in await page.locator("input[name=tools]").all():
        await box.uncheck()
    for name in tools:
        await tool_box(page, name).check()
    if message is not None or system_prompt is not None:
        # The playground remembers a pasted conversation's mode: back to the simple one.
        await page.check("input[name=input_mode][value=simple]")
    if message is not None:
        await page.fill("textarea[name=user_message]", message)
    if system_prompt is not None:
        await page.fill("textarea[name=system_prompt]", system_prompt)
    if tool_choice is not None:
        await page.select_option("select[name=tool_choice]", value=tool_choice)
    if parallel is not None:
        await page.locator("input[name=parallel]").set_checked(parallel)
    if max_rounds is not None:
        await page.fill("input[name=max_round_trips]", max_rounds)


async def submit_run(page: Any) -> str:
    """Start the filled-in run; returns its id once the run page has loaded."""
    await page.click("#start-run")
    await page.wait_for_url(RUN_URL)
    match = RUN_URL.search(page.url)
    assert match, page.url
    return match.group(1)


async def start_run(page: Any, **playground: Any) -> str:
    await fill_playground(page, **playground)
    return await submit_run(page)


async def status(page: Any) -> str:
    return str(await page.locator("#run-header [data-status]").get_attribute("data-status"))


async def wait_status(page: Any, *wanted: str) -> str:
    selector = ", ".join(f'#run-header [data-status="{s}"]' for s in wanted or TERMINAL)
    await page.wait_for_selector(selector, state="attached")
    return await status(page)


async def wait_round(page: Any, index: int) -> None:
    await page.wait_for_selector(f"#rounds > #round-{index}", state="attached")


async def next_round(page: Any) -> int:
    """Wait for the round after those on the page now; returns its index."""
    index = await page.locator('#rounds > [id^="round-"]').count()
    await wait_round(page, index)
    return int(index)


async def eventually(condition: Callable[[], bool], timeout: float = WAIT_MS / 1000) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def until_live(page: Any, condition_js: str, timeout: float = WAIT_MS / 1000) -> None:
    """Wait until one of the live updates the page recorded (`window.__live`, each as
    `e`) satisfies the JavaScript `condition_js`."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await page.evaluate(f"window.__live.some(e => {condition_js})"):
        if asyncio.get_running_loop().time() >= deadline:
            seen = await page.evaluate("window.__live")
            raise AssertionError(f"no live update where {condition_js}: {seen}")
        await asyncio.sleep(0.05)


async def release_naps(server: Any, key: str) -> None:
    """Let the `watched_nap` calls of `key` go (tests/browser/gate_tools.py)."""
    from .gate_tools import release_file

    release_file(server.env["DATA_DIR"], key).write_text("seen")


async def snapshot(page: Any) -> dict[str, Any]:
    return dict(await page.evaluate(SNAPSHOT_JS))


async def wait_caught_up(page: Any) -> None:
    """Wait until the live page has applied the run's last event.

    The header can show the final status one message before the last seq arrives (it is
    rendered from the current rows); the next message follows within milliseconds.
    """
    html = await (await page.request.get(page.url)).text()
    match = re.search(r'id="run-seq" data-seq="(\d+)"', html)
    assert match, "the page has no run-seq marker"
    await page.wait_for_function(
        "seq => (document.getElementById('run-seq') || {dataset: {}}).dataset.seq === seq",
        arg=match.group(1), timeout=WAIT_MS,
    )


async def assert_equals_reload(page: Any) -> dict[str, Any]:
    """The live page's timeline is exactly what a fresh render of the run shows."""
    await wait_caught_up(page)
    live = await snapshot(page)
    await page.reload()
    reloaded = await snapshot(page)
    assert live["header"] == reloaded["header"]
    assert live["rounds"] == reloaded["rounds"]
    assert live["ids"] == reloaded["ids"]
    assert live["seq"] == reloaded["seq"]
    return reloaded


async def assert_each_round_once(page: Any, expected_rounds: int) -> None:
    structure = await page.evaluate(STRUCTURE_JS)
    rounds = structure["rounds"]
    assert [r[0] for r in rounds] == [f"round-{i}" for i in range(expected_rounds)]
    assert [r[1] for r in rounds] == [str(i) for i in range(expected_rounds)]
    assert len(structure["calls"]) == len(set(structure["calls"]))
    assert len(structure["allIds"]) == len(set(structure["allIds"])), "a duplicated id"
