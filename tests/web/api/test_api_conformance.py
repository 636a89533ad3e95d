"""Schemathesis against the JSON API: every operation of `/api/openapi.json` is called
with generated requests (valid and invalid) on a real token, and every answer must be
one the document declares: its status, a JSON error body in the error shape, bodies
required only where a view needs one (issue 42, finding 13).

Every check runs but "schema-valid data is accepted": the filters' grammars (comma
lists, dates, cursors) and the bodies' rules between fields (an edit needs arguments)
are checked by the views and documented as strings and optional fields, so a request
the document allows can still get a declared 400 naming what is wrong
(docs/reliability.md).

Bounded: a few examples per operation, no shrinking of a failure's example (the failure
is reported as found), no per-example deadline (a loaded machine must not fail it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.contrib.auth.models import AbstractUser
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db

EXAMPLES = 8  # per operation: enough to reach each declared answer, in seconds


# Loaded once, at collection: the document is public and reads nothing stored.
schema = schemathesis.openapi.from_wsgi("/api/openapi.json", WSGIHandler())


@pytest.fixture(autouse=True)
def _kept_connection() -> Iterator[None]:
    """The test's database connection lives through the requests: the test runs in a
    transaction, which closing the connection at a request's start or end would break
    (Django's test client keeps it the same way)."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    try:
        yield
    finally:
        for signal in (request_started, request_finished):
            signal.connect(close_old_connections)


@pytest.fixture
def bearer(bob: AbstractUser) -> dict[str, str]:
    return {"Authorization": f"Bearer {create_token(bob, 'conformance')[1]}"}


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=list(HealthCheck))
def test_every_answer_conforms_to_the_document(case: Any, bearer: dict[str, str]) -> None:
    case.call_and_validate(headers=bearer, excluded_checks=[positive_data_acceptance])


@pytest.fixture
def staff_bearer(alice: AbstractUser) -> dict[str, str]:
    return {"Authorization": f"Bearer {create_token(alice, 'conformance')[1]}"}


# A plain token's valid writes to the registry end in a 403; staff reach its forms'
# answers too. Not the MCP sync, which could start a generated command.
@schema.include(tag="registry").exclude(path_regex=r"/sync$").parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=list(HealthCheck))
def test_the_registrys_answers_to_staff_conform_to_the_document(
        case: Any, staff_bearer: dict[str, str]) -> None:
    case.call_and_validate(headers=staff_bearer, excluded_checks=[positive_data_acceptance])


@pytest.mark.parametrize("path", ["/api/runs/a%0Ab/fork", "/api/%0A", "/api/runs/export.xml"])
def test_a_path_no_route_matches_is_a_json_404(path: str, bearer: dict[str, str]) -> None:
    """What schemathesis found: a newline in a path left it to Django's HTML 404."""
    from django.test import Client

    response = Client().post(path, headers=bearer)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
