"""Under ASGI a request crosses from the event loop to a thread once for its middleware
and view, not twice per middleware (agentforge_web/middleware.py), and the stack still
does its work there: sessions, CSRF, security headers, the login lockout."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref import sync
from django.contrib.auth.models import AbstractUser
from django.test import AsyncClient

pytestmark = pytest.mark.django_db(transaction=True)

MIDDLEWARE_METHODS = {"process_request", "process_view", "process_response",
                      "process_exception"}


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions each `sync_to_async` call ran in a thread."""
    seen: list[str] = []
    real = sync.SyncToAsync.__init__

    def recorded(self: Any, func: Any, *args: Any, **kwargs: Any) -> None:
        seen.append(getattr(func, "__name__", type(func).__name__))
        real(self, func, *args, **kwargs)

    monkeypatch.setattr(sync.SyncToAsync, "__init__", recorded)
    return seen


async def test_a_page_request_hops_to_a_thread_once_for_middleware_and_view(
    hops: list[str], bob: AbstractUser,
) -> None:
    client = AsyncClient()
    await client.aforce_login(bob)
    hops.clear()

    response = await client.get("/runs/")

    assert response.status_code == 200
    assert not MIDDLEWARE_METHODS & set(hops), hops
    assert len(hops) <= 8, hops  # Django's own (signals, body, close): 19 before
    # The stack did its work in that one hop.
    assert response.headers["X-Frame-Options"] == "DENY"
    assert "Content-Security-Policy" in response.headers
    assert response.headers["X-Content-Type-Options"] == "nosniff"


async def test_an_api_post_without_a_csrf_token_or_a_token_is_refused_under_asgi(
    hops: list[str],
) -> None:
    response = await AsyncClient(enforce_csrf_checks=True).post(
        "/api/runs", {"endpoint": "x"}, content_type="application/json")

    assert response.status_code == 401
    assert not MIDDLEWARE_METHODS & set(hops), hops


async def test_a_locked_out_login_is_refused_under_asgi(
    bob: AbstractUser, settings: Any,
) -> None:
    settings.AXES_FAILURE_LIMIT = 2
    client = AsyncClient(REMOTE_ADDR="10.0.0.7")
    answers = [(await client.post("/accounts/login/", {"username": "bob",
                                                      "password": f"guess {i}"})).status_code
               for i in range(3)]

    assert answers == [200, 429, 429]
