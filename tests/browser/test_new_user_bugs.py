"""What a new user tripped on (issue 43), seen as a person sees it: a run written by
`seed_audit` opens from the runs list, and what an admin sets on a Python tool survives
`seed_demo` (which `make run` runs at every start)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from .support import Server

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

SEEDED_USER = "audit-user-01"


def manage(server: Server, *args: str) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=server.root,
                          env=server.env, check=True, capture_output=True, text=True,
                          timeout=120)
    return done.stdout


async def test_a_seeded_run_opens_from_the_runs_list(server: Server, open_page: Any) -> None:
    manage(server, "seed_audit", "--runs", "40", "--calls-per-run", "3", "--seed", "43")
    try:
        page = await open_page(user="alice")
        await page.goto(f"/runs/?user={SEEDED_USER}&tryit=any")
        link = page.locator("table a[href^='/runs/']").first
        href = await link.get_attribute("href")
        assert href is not None

        response = await page.goto(href)

        assert response is not None
        assert response.status == 200
        assert await page.locator("#run-header").count() == 1
        assert await page.locator("[id^='round-']").count() >= 1
    finally:
        manage(server, "seed_audit", "--clear")


async def admin_tool_form(page: Any, name: str) -> None:
    await page.goto(f"/admin/tools_app/toolregistration/?q={name}")
    await page.click(f"#result_list a:text-is('{name}')")


async def test_what_an_admin_sets_on_a_python_tool_survives_seed_demo(
    server: Server, open_page: Any,
) -> None:
    page = await open_page(user="alice")
    await admin_tool_form(page, "get_weather")
    was = {"approval": await page.is_checked("#id_requires_approval"),
           "timeout": await page.input_value("#id_timeout_seconds")}
    try:
        await page.check("#id_requires_approval")
        await page.fill("#id_timeout_seconds", "5")
        await page.click("input[name='_save']")
        await page.wait_for_selector(".messagelist .success")

        report = manage(server, "seed_demo")

        await admin_tool_form(page, "get_weather")
        assert await page.is_checked("#id_requires_approval")
        assert await page.input_value("#id_timeout_seconds") == "5.0"
        assert "kept as set in the admin" in report
    finally:
        await admin_tool_form(page, "get_weather")
        await page.set_checked("#id_requires_approval", was["approval"])
        await page.fill("#id_timeout_seconds", was["timeout"])
        await page.click("input[name='_save']")
        await page.wait_for_selector(".messagelist .success")
