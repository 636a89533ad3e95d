"""The playground in a real browser: a scripted endpoint says which tools its script
calls and ticks them when it is chosen (unticking those it ticked for the endpoint
before, never the person's own); "Named tool" is a list of the ticked tools; and a new
user's prefilled prompt asks what the default endpoint's script answers."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from .support import Server, log_in, submit_run, tool_box, wait_status

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

SCREENSHOTS = os.environ.get("AGENTFORGE_SCREENSHOTS") == "1"
WEATHER = "Scripted: weather in parallel"
FAILING_AND_SLOW = "Scripted: failing + slow tools"
HALLUCINATED = "Scripted: hallucinated tool"


async def ticked(page: Any) -> list[str]:
    names = []
    for label in await page.locator("label.tool-choice").all():
        if await label.locator("input[name=tools]").is_checked():
            names.append(await label.locator("code").inner_text())
    return names


async def named_options(page: Any) -> list[str]:
    select = page.locator("select[name=tool_choice_name]")
    return [await o.get_attribute("value") or ""
            for o in await select.locator("option").all()]


async def test_a_scripted_endpoint_ticks_the_tools_its_script_calls(
    open_page: Any, server: Server,
) -> None:
    page = await open_page(user="alice")
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    await page.goto("/playground/")
    for box in await page.locator("input[name=tools]").all():
        await box.uncheck()
    await tool_box(page, "calculator").check()  # the person's own choice

    await page.select_option("select[name=endpoint]", label=FAILING_AND_SLOW)
    assert await page.inner_text("#script-calls") == (
        "Its script calls always_fails, slow_tool, calculator: choosing it ticks those tools.")
    assert await ticked(page) == ["always_fails", "calculator", "slow_tool"]
    assert await named_options(page) == ["", "always_fails", "calculator", "slow_tool"]
    assert await page.locator("select[name=tool_choice_name] option").first.inner_text() \
        == "(a ticked tool)"
    if SCREENSHOTS:
        await page.locator("#playground-form").screenshot(
            path=str(server.root / "docs" / "screenshots" / "playground-script-tools.png"))

    await page.select_option("select[name=endpoint]", label=WEATHER)
    assert await page.inner_text("#script-calls") == (
        "Its script calls get_weather: choosing it ticks that tool.")
    assert await ticked(page) == ["calculator", "get_weather"]

    await page.select_option("select[name=endpoint]", label=HALLUCINATED)
    assert await page.inner_text("#script-calls") == (
        "Its script calls get_stock_price (not a tool you can tick here): choosing it "
        "ticks that tool.")
    assert await ticked(page) == ["calculator"]
    assert errors == []


async def test_named_tool_is_a_list_of_the_ticked_tools(open_page: Any, server: Server) -> None:
    page = await open_page(user="alice")
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    await page.goto("/playground/")
    await page.select_option("select[name=endpoint]", label=WEATHER)
    await page.check("input[name=input_mode][value=simple]")
    for box in await page.locator("input[name=tools]").all():
        await box.uncheck()
    named = page.locator("select[name=tool_choice_name]")
    assert await named_options(page) == [""]
    assert await named.locator("option").inner_text() == "(tick a tool first)"

    await tool_box(page, "get_weather").check()
    await tool_box(page, "calculator").check()
    assert await named_options(page) == ["", "calculator", "get_weather"]
    await page.select_option("select[name=tool_choice]", value="auto")
    await named.select_option("calculator")
    # Naming a tool means forcing it.
    assert await page.input_value("select[name=tool_choice]") == "named"
    await tool_box(page, "calculator").uncheck()  # no longer offered: no longer named
    assert await named_options(page) == ["", "get_weather"]
    assert await named.input_value() == ""
    assert await page.input_value("select[name=tool_choice]") == "auto"  # nor forced

    await named.select_option("get_weather")
    await page.fill("textarea[name=user_message]", "Weather, forced")
    run_id = await submit_run(page)
    assert await wait_status(page, "succeeded", "failed") == "succeeded"
    fixture = await (await page.request.get(f"/runs/{run_id}/export.json")).json()
    assert fixture["snapshot"]["parameters"]["tool_choice"] == {"name": "get_weather"}
    assert errors == []


def new_user(server: Server, username: str) -> None:
    """A user who never used the playground, made on the server's database."""
    password = f"{username}-browser-pw-5K"
    subprocess.run([sys.executable, "manage.py", "shell", "-c",
                    "from django.contrib.auth import get_user_model; "
                    f"get_user_model().objects.create_user({username!r}, password={password!r})"],
                   cwd=server.root, env=server.env, check=True, capture_output=True, timeout=60)
    server.passwords[username] = password


async def test_a_new_users_prefilled_prompt_matches_the_default_script(
    open_page: Any, server: Server,
) -> None:
    new_user(server, "dora")
    page = await open_page()
    await log_in(page, server, "dora")  # lands on the playground, prefilled

    assert await page.locator("select[name=endpoint] option:checked").inner_text() == WEATHER
    assert await page.input_value("textarea[name=user_message]") == (
        "What's the weather in Hangzhou and in London?")
    assert await ticked(page) == ["get_weather"]
    assert "get_weather" in await page.inner_text("#script-calls")
    await submit_run(page)
    assert await wait_status(page) == "succeeded"
    answer = await page.locator("#run-header .final .text").inner_text()
    assert "Hangzhou" in answer
    assert "London" in answer
