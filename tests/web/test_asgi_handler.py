"""Under ASGI a request crosses from the event loop to a thread once for its middleware
and view, not once per middleware method (agentforge_web/handler.py), and the stack
still does its work there: sessions, CSRF, security headers, the login lockout."""

from __future__ import annotations

import re
from typing import Any

import pytest
from asgiref import sync
from channels.testing import HttpCommunicator
from django.contrib.auth.models import AbstractUser
from django.test import Client

from agentforge_web.handler import OneHopASGIHandler

pytestmark = pytest.mark.django_db(transaction=True)

MIDDLEWARE_METHODS = {"process_request", "process_view", "process_response",
                      "process_exception", "process_template_response"}


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions `sync_to_async` ran in a thread, in order."""
    seen: list[str] = []
    real = sync.SyncToAsync.__call__

    async def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(getattr(self.func, "__name__", type(self.func).__name__))
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(sync.SyncToAsync, "__call__", recorded)
    return seen


def session_cookie(user: AbstractUser) -> str:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


async def asgi_request(method: str, path: str, *, cookie: str = "", body: bytes = b"",
                       headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    all_headers = [(b"host", b"testserver"), *(headers or [])]
    if cookie:
        all_headers.append((b"cookie", cookie.encode()))
    communicator = HttpCommunicator(OneHopASGIHandler(), method, path, body=body,
                                    headers=all_headers)
    response: dict[str, Any] = await communicator.get_response(timeout=10)
    response["headers"] = {k.decode().lower(): v.decode() for k, v in response["headers"]}
    return response


async def test_a_page_request_hops_to_a_thread_once_for_its_middleware_and_view(
    hops: list[str], bob: AbstractUser,
) -> None:
    cookie = await sync.sync_to_async(session_cookie)(bob)
    hops.clear()

    response = await asgi_request("GET", "/runs/", cookie=cookie)

    assert response["status"] == 200
    assert b"<html" in response["body"]
    assert not MIDDLEWARE_METHODS & set(hops), hops
    # The chain (middleware and view: `inner`, Django's exception wrapper) once, and
    # Django's own request-started signal. With Django's async chain: 19.
    assert hops.count("inner") == 1, hops
    assert len(hops) <= 3, hops
    # The stack did its work in that one hop: the security headers are there.
    assert response["headers"]["x-frame-options"] == "DENY"
    assert "content-security-policy" in response["headers"]
    assert response["headers"]["x-content-type-options"] == "nosniff"


async def test_an_anonymous_page_request_is_sent_to_log_in() -> None:
    response = await asgi_request("GET", "/runs/")

    assert response["status"] == 302
    assert response["headers"]["location"].startswith("/accounts/login/")


async def test_a_form_post_without_its_csrf_token_is_refused(bob: AbstractUser) -> None:
    cookie = await sync.sync_to_async(session_cookie)(bob)

    response = await asgi_request("POST", "/accounts/logout/", cookie=cookie,
                                  headers=[(b"content-type",
                                            b"application/x-www-form-urlencoded")])

    assert response["status"] == 403


async def test_a_locked_out_login_is_refused(bob: AbstractUser, settings: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 2
    form = await asgi_request("GET", "/accounts/login/")
    csrf_cookie = form["headers"]["set-cookie"].split(";")[0]  # csrftoken=...
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', form["body"])
    assert token is not None
    statuses = []
    for attempt in range(3):
        body = f"csrfmiddlewaretoken={token[1].decode()}&username=bob&password=guess{attempt}"
        response = await asgi_request(
            "POST", "/accounts/login/", cookie=csrf_cookie, body=body.encode(),
            headers=[(b"content-type", b"application/x-www-form-urlencoded")])
        statuses.append(response["status"])

    # The form again with its error, until the failure that reaches the limit.
    assert statuses == [200, 429, 429]
