"""The capability probe in a real browser: asked for on the endpoints page, it shows as
under way, and its report replaces that without a reload; an error every check met is
shown once. The endpoint is a loopback server of this test that answers each request
late with the same error."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from tests.runs.support import http_server

from .support import Server

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

SCREENSHOTS = os.environ.get("AGENTFORGE_SCREENSHOTS") == "1"
RESTING = "Browser: resting model"
ANSWER_AFTER_SECONDS = 0.3  # long enough for the page to see the probe under way


class Resting(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that answers every request, late, with a 503."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        time.sleep(ANSWER_AFTER_SECONDS)
        body = b'{"error": {"message": "the model is resting"}}'
        self.send_response(503)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def resting_url() -> Iterator[str]:
    with http_server(Resting) as url:
        yield url


def endpoint_at(server: Server, name: str, base_url: str) -> None:
    """An OpenAI-compatible endpoint at `base_url`, on the server's database."""
    subprocess.run([sys.executable, "manage.py", "shell", "-c",
                    "from tools_app.models import ModelEndpoint; "
                    f"ModelEndpoint.objects.update_or_create(name={name!r}, defaults="
                    f"{{'kind': 'openai_compatible', 'base_url': {base_url!r}, 'model': 'm'}})"],
                   cwd=server.root, env=server.env, check=True, capture_output=True, timeout=60)


async def test_the_probe_shows_under_way_then_its_report_with_a_repeated_error_once(
    open_page: Any, server: Server, resting_url: str,
) -> None:
    endpoint_at(server, RESTING, resting_url)
    page = await open_page(user="alice")
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    await page.goto("/endpoints/")
    endpoint = page.locator("article.endpoint").filter(has=page.locator("h2", has_text=RESTING))
    report = endpoint.locator(".probe-report")
    assert await report.inner_text() == "Not probed yet."

    await endpoint.get_by_role("button", name="Run capability probe").click()
    await page.wait_for_url("**/endpoints/")
    assert "its report shows here as soon as the probe ends" in await page.inner_text(
        ".messages")
    probing = await report.locator("p.probing").inner_text()
    assert probing.startswith("Probing asked by alice at ")
    assert probing.endswith(": the report appears here when the probe ends.")
    await page.evaluate("window.__sameDocument = true")  # gone if the page reloads
    if SCREENSHOTS:
        await endpoint.screenshot(
            path=str(server.root / "docs" / "screenshots" / "endpoint-probing.png"))

    await endpoint.locator(".probe-report:not([data-probing]) table.probe").wait_for()
    assert await page.evaluate("window.__sameDocument") is True
    assert await report.locator("p.probing").count() == 0
    details = [await cell.inner_text()
               for cell in await report.locator("tbody td:nth-child(3)").all()]
    assert len(details) == 5
    assert details[0].startswith("provider error (HTTP 503)")
    assert "the model is resting" in details[0]
    assert details[1:] == ["The same error as tool_calls."] * 4
    if SCREENSHOTS:
        await endpoint.screenshot(
            path=str(server.root / "docs" / "screenshots" / "endpoint-probe.png"))
    assert errors == []
