"""The admin's tool import page and a tool page's Try it form, driven by the browser
tests: import definitions of a kind, a field and its control by JSON pointer, submit and
wait for the run."""

from __future__ import annotations

import json
from typing import Any


def field(page: Any, pointer: str) -> Any:
    return page.locator(f'#tryit-fields .tf[data-pointer="{pointer}"]')


def control(page: Any, pointer: str) -> Any:
    return field(page, pointer).locator(":scope > input, :scope > select").first


async def run_and_wait(page: Any, status: str = "succeeded") -> str:
    await page.click("#tryit-submit")
    run = page.locator(f'#tryit-run[data-status="{status}"]')
    await run.wait_for()
    return str(await run.get_attribute("data-run"))


async def import_tools(page: Any, tools: list[dict[str, Any]], kind: str,
                       config: str = "{}") -> None:
    await page.goto("/admin/tools_app/toolregistration/import/")
    await page.fill("textarea[name=definitions]", json.dumps(tools))
    await page.select_option("select[name=kind]", value=kind)
    await page.fill("textarea[name=config]", config)
    await page.click("#import-form input[type=submit]")
    await page.wait_for_selector("ul.messagelist li.success")
