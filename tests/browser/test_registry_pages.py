"""The registry outside the admin in a real browser (issue 43): staff add an HTTP tool
(a literal credential refused on its field first), edit a mock tool from its page, add
the real time server as an MCP server and sync it (its tools and the JSON-RPC log on
the page), and import a tools JSON file (a file with problems imports nothing and
names each). A plain user gets no link and a 403. Screenshots: docs/screenshots/
registry-*.png (AGENTFORGE_SCREENSHOTS=1)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from .checks import SCREENSHOTS, no_dialogs, screenshot_path
from .support import Server

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
HOSTILE = "<img src=x onerror=alert(1)>"


async def fill_tool(page: Any, *, name: str, kind: str, description: str,
                    config: dict[str, Any]) -> None:
    await page.fill("input[name=name]", name)
    await page.select_option("select[name=kind]", value=kind)
    await page.fill("textarea[name=description]", description)
    await page.fill("textarea[name=json_schema]", json.dumps(CITY))
    await page.fill("textarea[name=config]", json.dumps(config))


async def shot(page: Any, server: Server, name: str) -> None:
    if SCREENSHOTS:
        await page.screenshot(path=screenshot_path(server, name), full_page=True)


async def test_staff_add_an_http_tool_and_edit_a_mock_tool(server: Server,
                                                           open_page: Any) -> None:
    page = await open_page(user="alice")
    dialogs = no_dialogs(page)
    await page.goto("/tools/")
    await page.click("#registry-links >> text=Add an HTTP or mock tool")

    http = {"method": "GET", "url": "https://api.example.com/weather/{city}",
            "headers": {"Authorization": "Bearer pasted-secret"}}
    await fill_tool(page, name="registry_weather", kind="http",
                    description=f"Weather {HOSTILE}", config=http)
    await page.click("#tool-form button[type=submit]")
    problem = page.locator("[data-field=config] .errorlist")
    assert "headers.Authorization: it carries a credential" in await problem.inner_text()
    assert "1 field to correct" in await page.inner_text("#form-problems")
    await shot(page, server, "registry-tool-refused.png")

    http["headers"] = {"Authorization": "env:WEATHER_API_TOKEN"}
    await page.fill("textarea[name=config]", json.dumps(http))
    await page.click("#tool-form button[type=submit]")
    await page.wait_for_url("**/tools/registry_weather/")
    assert "Registered the HTTP endpoint tool registry_weather." in await page.inner_text(
        ".messages")
    assert await page.inner_text(".tool-head p >> nth=0") == f"Weather {HOSTILE}"

    # A mock tool, added, then edited from its page's Edit link.
    await page.goto("/registry/tools/new/")
    await fill_tool(page, name="registry_sky", kind="mock", description="The sky.",
                    config={"template": True, "result": "Sunny in {city}"})
    await page.click("#tool-form button[type=submit]")
    await page.wait_for_url("**/tools/registry_sky/")
    await page.click("#edit-tool")
    await page.fill("textarea[name=description]", "The sky, edited.")
    await page.fill("textarea[name=config]",
                    json.dumps({"template": True, "result": "Rain in {town}"}))
    await page.click("#tool-form button[type=submit]")
    assert "town" in await page.inner_text("[data-field=config] .errorlist")
    await shot(page, server, "registry-tool-edit.png")
    await page.fill("textarea[name=config]",
                    json.dumps({"template": True, "result": "Rain in {city}"}))
    await page.check("input[name=requires_approval]")
    await page.click("#tool-form button[type=submit]")
    await page.wait_for_url("**/tools/registry_sky/")
    assert await page.inner_text(".tool-head p >> nth=0") == "The sky, edited."
    assert "Saved the tool registry_sky." in await page.inner_text(".messages")
    await page.goto("/tools/")
    row = page.locator("tr[data-tool=registry_sky]")
    assert await row.locator("[data-badge=approval]").count() == 1
    assert dialogs == []


async def test_staff_add_the_time_server_and_sync_it(server: Server, open_page: Any) -> None:
    page = await open_page(user="alice")
    dialogs = no_dialogs(page)
    await page.goto("/registry/")
    await page.click("text=Add an MCP server")
    await page.fill("input[name=name]", "clock")
    await page.select_option("select[name=transport]", value="stdio")
    await page.fill("input[name=command]", sys.executable)
    await page.fill("textarea[name=args]",
                    json.dumps(["-m", "mcp_server_time", "--local-timezone", "UTC"]))
    await page.fill("input[name=tool_prefix]", "clock_")
    await page.click("#mcp-form button[type=submit]")
    await page.wait_for_url("**/registry/mcp/*/")
    assert "Never synced." in await page.inner_text("#last-sync")

    await page.click("#sync-form button")
    await page.wait_for_selector(".messages .success")
    assert "clock: created 2, updated 0" in await page.inner_text(".messages")
    tools = page.locator("#server-tools tbody tr")
    assert sorted(await tools.evaluate_all("rows => rows.map(r => r.dataset.tool)")) == [
        "clock_convert_time", "clock_get_current_time"]
    assert "ok" in await page.inner_text("#sync-status")
    assert "mcp-time" in await page.inner_text("#sync-status")
    log = page.locator("#wire-log li")
    summaries = await log.locator("summary code").all_inner_texts()
    listed = summaries.index("tools/list")
    assert summaries[listed + 1].startswith("answer to #")
    directions = await log.evaluate_all("items => items.map(i => i.dataset.direction)")
    assert directions[listed:listed + 2] == ["sent", "received"]
    answer = log.nth(listed + 1)
    await answer.locator("summary").click()
    assert "get_current_time" in await answer.locator("pre").inner_text()
    await shot(page, server, "registry-mcp-sync.png")

    # The registered tool is the server's, reached from the registry's list.
    await page.goto("/registry/")
    row = page.locator("#mcp-servers tr[data-server=clock]")
    assert await row.locator("td.num").inner_text() == "2"
    assert "ok" in await row.inner_text()
    await shot(page, server, "registry-home.png")
    assert dialogs == []


async def test_a_servers_resources_and_prompts_are_shown_as_text(server: Server,
                                                                open_page: Any) -> None:
    """The tests' misbehaving server (synced by the world's mcp step) offers a resource
    whose title carries markup and a prompt with an argument."""
    server.world("mcp")
    page = await open_page(user="bob")
    dialogs = no_dialogs(page)
    await page.goto("/registry/")
    await page.click("#mcp-servers tr[data-server=bad] a")
    resource = page.locator("#server-resources tbody tr").first
    cells = await resource.locator("td").all_inner_texts()
    assert cells == ["notes://readme", "Read <b>me</b>", "The server's notes.", "text/plain"]
    assert await page.locator("#server-resources b").count() == 0
    prompt = page.locator("#server-prompts tbody tr").first
    assert await prompt.locator("td").nth(2).inner_text() == "who (required)"
    assert await page.locator("#server-tools tr[data-tool=bad_echo]").count() == 1
    assert await page.locator("#sync-form").count() == 0  # bob may look, not sync
    await shot(page, server, "registry-mcp-resources.png")
    assert dialogs == []


async def test_staff_import_a_tools_json_file(server: Server, open_page: Any,
                                              tmp_path: Path) -> None:
    page = await open_page(user="alice")
    dialogs = no_dialogs(page)

    def tool(name: str, **extra: Any) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "parameters": CITY,
                                                 "description": f"{name} {HOSTILE}"},
                **extra}

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([
        tool("imported_fine"),
        tool("imported_wrong", **{"x-agentforge-config": {"template": True,
                                                          "result": "{nope}"}}),
        {"type": "function", "function": {"name": "bad name!", "parameters": CITY}}]))
    await page.goto("/tools/")
    await page.click("#registry-links >> text=Import tools from JSON")
    await page.set_input_files("input[name=file]", str(bad))
    await page.select_option("select[name=kind]", value="mock")
    await page.fill("textarea[name=config]", json.dumps({"result": "ok"}))
    await page.click("#import-form button[type=submit]")
    problems = await page.inner_text("#import-problems")
    assert "Nothing was imported: 2 problems." in problems
    assert "imported_wrong" in problems
    assert "bad name!" in problems
    await shot(page, server, "registry-import-problems.png")

    good = tmp_path / "good.json"
    good.write_text(json.dumps([tool("imported_first"), tool("imported_second")]))
    await page.set_input_files("input[name=file]", str(good))
    await page.fill("textarea[name=config]", json.dumps({"result": "ok"}))
    await page.click("#import-form button[type=submit]")
    await page.wait_for_url("**/tools/")
    assert "Imported 2 tools: imported_first, imported_second" in await page.inner_text(
        ".messages")
    for name in ("imported_first", "imported_second"):
        assert await page.locator(f"tr[data-tool={name}]").count() == 1
    assert await page.locator("tr[data-tool=imported_fine]").count() == 0
    assert dialogs == []


async def test_a_plain_user_gets_no_registry_link_and_a_403(server: Server,
                                                           open_page: Any) -> None:
    page = await open_page(user="bob")
    await page.goto("/tools/")
    assert await page.locator("nav a", has_text="Registry").count() == 0
    assert await page.locator("#registry-links").count() == 0
    response = await page.goto("/registry/tools/new/")
    assert response.status == 403
