"""The database's absence is a 503, never a bare 500 (issue 42, finding 3;
agentforge_web/middleware.py): JSON `database_unavailable` under /api/, a plain page
elsewhere, whether the view raised the error or answered it as its own 500. The checks
of pooled connections are tests/scaleout/test_database_outage.py's."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.core.handlers.exception import convert_exception_to_response
from django.db import OperationalError, connection
from django.http import HttpRequest, HttpResponse
from django.test import Client

from agentforge_web import middleware
from agentforge_web.middleware import DatabaseUnavailableMiddleware
from tools_app.runs.store.outage import Outage
from tools_app.web.api import runs as api_runs
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN_HEADER = {"Authorization": "Bearer afw_not-a-real-token"}


@pytest.fixture
def database_gone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No connection can be opened (as when the server refuses them, or the pool gives
    up waiting); the test's own is closed first."""
    monkeypatch.setattr(middleware, "_outage", Outage(middleware.logger, "web requests"))

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise sqlite3.OperationalError("unable to open database file")

    connection.close()
    monkeypatch.setattr(connection, "get_new_connection", refuse)
    yield
    monkeypatch.undo()
    connection.close()


def test_a_page_is_a_plain_503(database_gone: None) -> None:
    client = Client()
    client.cookies.load({"sessionid": "a-session-the-database-would-be-asked-about"})

    response = client.get("/runs/")

    assert response.status_code == 503
    assert response["Content-Type"].startswith("text/html")
    assert b"Service unavailable" in response.content
    assert response["Retry-After"]


def test_the_api_is_a_json_503_database_unavailable(database_gone: None) -> None:
    # The API's handlers let the database's errors through to the middleware.
    response = Client().get("/api/runs", headers=TOKEN_HEADER)

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "database_unavailable"


def test_the_outage_is_logged_once_and_its_end_once(
        bob: AbstractUser, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    client = Client()
    client.force_login(bob)
    with caplog.at_level(logging.INFO, logger="agentforge_web.middleware"):
        with monkeypatch.context() as gone:
            gone.setattr(middleware, "_outage", outage := Outage(middleware.logger, "web"))
            connection.close()
            gone.setattr(connection, "get_new_connection", _refuse)
            statuses = [client.get("/runs/").status_code for _ in range(3)]
        connection.close()
        monkeypatch.setattr(middleware, "_outage", outage)
        statuses.append(client.get("/runs/").status_code)
    assert statuses == [503, 503, 503, 200]
    levels = [r.levelno for r in caplog.records if r.name == "agentforge_web.middleware"]
    assert levels == [logging.WARNING, logging.INFO]


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise sqlite3.OperationalError("unable to open database file")


def test_an_api_query_failing_mid_request_is_a_503_not_the_apis_500(
        bob: AbstractUser, monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection opened, then a query of the view failed: the API's catch-all
    would make it its JSON 500; the database's absence is a 503 instead."""
    monkeypatch.setattr(middleware, "_outage", Outage(middleware.logger, "web requests"))
    token = create_token(bob, "outage")[1]

    def lost(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(api_runs, "filtered_runs", lost)
    response = Client().get("/api/runs", headers={"Authorization": f"Bearer {token}"})

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "database_unavailable"
    assert response["Retry-After"]


def test_a_middleware_below_failing_on_the_database_is_a_503(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An error raised by a middleware under this one (a session saved after the view,
    say) never reaches `process_exception`: Django answers it with a 500, and the
    middleware tells the database's absence from a bug by the exception behind it."""
    monkeypatch.setattr(middleware, "_outage", Outage(middleware.logger, "web requests"))

    def session_save(request: HttpRequest) -> HttpResponse:
        raise OperationalError("database is locked")

    def a_bug(request: HttpRequest) -> HttpResponse:
        raise ValueError("a bug")

    request = HttpRequest()
    request.path = "/runs/"
    gone = DatabaseUnavailableMiddleware(convert_exception_to_response(session_save))(request)
    bug = DatabaseUnavailableMiddleware(convert_exception_to_response(a_bug))(HttpRequest())

    assert gone.status_code == 503
    assert b"Service unavailable" in gone.content
    assert bug.status_code == 500


def test_other_500s_stay_500s() -> None:
    request = HttpRequest()
    request.path = "/runs/"
    response = DatabaseUnavailableMiddleware(
        lambda request: HttpResponse("a bug", status=500))(request)
    assert response.status_code == 500
    assert DatabaseUnavailableMiddleware(lambda r: HttpResponse()).process_exception(
        request, ValueError("a bug")) is None
