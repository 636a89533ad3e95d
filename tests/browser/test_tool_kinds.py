"""Mock and HTTP tools in a real browser (#12): imported on the admin's import page,
run from the playground, results and refusals on the timeline, hostile HTTP output
shown as text."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.runs.support import http_server, json_service

from .checks import INJECTED, SCREENSHOTS, Watch, screenshot_path
from .support import Server, fill_playground, submit_run, wait_status
from .tool_forms import import_tools
from .world import KINDS_ENDPOINT, KINDS_TOOLS

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

HOSTILE = "<img src=x onerror=alert(1)>"


# A service whose answers carry markup, as a hostile one's would.
_Lookup = json_service(lambda request: (200, {"record": {"path": request.path,
                                                          "note": HOSTILE}}))


@pytest.fixture
def lookup_url() -> Iterator[str]:
    with http_server(_Lookup, path="") as url:
        yield url


def definitions(lookup_url: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(mock tools, HTTP tools) as an Anthropic and an MCP export would hold them."""
    city = {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}
    ident = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
    mock = [{"name": KINDS_TOOLS[0], "description": "Forecast", "input_schema": city}]
    http = [{"name": KINDS_TOOLS[1], "description": "Lookup", "inputSchema": ident,
             "x-agentforge-config": {"url": lookup_url + "/records/{id}",
                                     "response": "/record"}},
            {"name": KINDS_TOOLS[2], "description": "Metadata", "inputSchema": {
                "type": "object", "properties": {}},
             "x-agentforge-config": {"url": "http://169.254.169.254/latest/meta-data/"}}]
    return mock, http


async def test_mock_and_http_tools_run_from_the_playground(
        open_page: Any, server: Server, lookup_url: str) -> None:
    page = await open_page(user="alice")
    mock, http = definitions(lookup_url)

    # A bad import is refused as a whole, with the tool's problem shown.
    await page.goto("/admin/tools_app/toolregistration/import/")
    await page.fill("textarea[name=definitions]", json.dumps(
        [*mock, {"name": "bad name", "input_schema": {"type": "string"}}]))
    await page.click("#import-form input[type=submit]")
    problems = await page.inner_text("#import-problems")
    assert "tool 2 ('bad name')" in problems
    assert "not an object schema" in problems
    if SCREENSHOTS:
        await page.screenshot(path=screenshot_path(server, "tool_import.png"), full_page=True)

    await import_tools(page, mock, "mock",
                       '{"template": true, "result": "Sunny in {city}"}')
    await import_tools(page, http, "http")

    watch = Watch(page, server)
    await fill_playground(page, endpoint=KINDS_ENDPOINT, tools=list(KINDS_TOOLS))
    await submit_run(page)
    assert await wait_status(page) == "succeeded"

    lanes = page.locator("#round-0 article.lane")
    assert await lanes.locator("code.tool-name").all_inner_texts() == list(KINDS_TOOLS)
    states = [await lanes.nth(i).get_attribute("data-state") for i in range(3)]
    assert states == ["succeeded", "succeeded", "execution_error"]
    timeline = await page.inner_text("#timeline")
    assert "Sunny in Oslo" in timeline
    assert '"path": "/records/42"' in timeline
    assert HOSTILE in timeline  # shown as text...
    assert await page.eval_on_selector_all(INJECTED, "els => els.length") == 0  # ...only
    assert "refused to connect to 169.254.169.254 (link-local" in timeline
    watch.assert_clean()

    if SCREENSHOTS:
        await page.screenshot(path=screenshot_path(server, "tool_kinds.png"), full_page=True)
