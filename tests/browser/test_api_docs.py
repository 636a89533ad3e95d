"""The JSON API's docs page (/api/docs, django-ninja's Swagger UI) in a real browser: a
logged-in user sees every operation rendered, and the page loads everything from the
app's own server (its static files and /api/openapi.json); requests to any other host
are blocked and recorded, and there must be none."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from .support import Server

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

SCREENSHOT = "/tmp/api_docs.png"
NETWORK_SCHEMES = ("http", "https", "ws", "wss")


async def test_the_api_docs_render_from_the_server_alone(open_page: Any,
                                                         server: Server) -> None:
    page = await open_page(user="alice", record=True)
    own_host = urlsplit(server.base_url).netloc
    elsewhere: list[str] = []

    async def only_own_host(route: Any) -> None:
        url = urlsplit(route.request.url)
        if url.scheme in NETWORK_SCHEMES and url.netloc != own_host:
            elsewhere.append(route.request.url)
            await route.abort()
        else:
            await route.continue_()

    await page.context.route("**/*", only_own_host)
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))

    await page.goto("/api/docs")
    await page.locator(".opblock").first.wait_for()
    paths = await page.locator(".opblock-summary-path").all_inner_texts()
    await page.screenshot(path=SCREENSHOT, full_page=True)

    assert {"/api/runs", "/api/runs/{run_id}", "/api/runs/{run_id}/decisions",
            "/api/runs/{run_id}/calls/{call_id}/execute", "/api/tools/{name}/try",
            "/api/calls/export.{fmt}"} <= {p.replace("\u200b", "") for p in paths}
    assert await page.get_by_text("AgentForge Web API").first.is_visible()
    assert elsewhere == []
    assert f"{server.base_url}/api/openapi.json" in requested
    assert any("/static/ninja/swagger-ui-bundle.js" in url for url in requested)
    assert await page.evaluate("window.__cspViolations") == []


async def test_the_api_docs_ask_for_a_login(open_page: Any) -> None:
    page = await open_page()
    await page.goto("/api/docs")
    assert urlsplit(page.url).path == "/accounts/login/"
