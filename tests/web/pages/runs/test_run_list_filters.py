"""The runs page filters (before, /runs/?status=failed silently listed everything): the
same filters as the API, in the URL, with started-by and error columns."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tools_app.models import Run

pytestmark = pytest.mark.django_db


def titles(response: Any) -> list[str]:
    return re.findall(r'<a href="/runs/[0-9a-f-]{36}/">([^<]+)</a>', response.content.decode())


@pytest.mark.parametrize(("query", "expected"), [
    ("", ["Later", "Divide by zero", "Weather in Paris, please"]),
    ("?status=failed", ["Divide by zero"]),
    ("?status=&endpoint=failing&tool=&q=", ["Later", "Divide by zero"]),  # empty = no filter
    ("?tool=get_weather", ["Weather in Paris, please"]),
    ("?user=charlie", ["Later"]),
    ("?q=division", ["Divide by zero"]),
])
def test_the_page_filters_like_the_api(alice_client: Client, filter_world: dict[str, Run],
                                       query: str, expected: list[str]) -> None:
    response = alice_client.get(f"/runs/{query}")
    assert response.status_code == 200
    assert titles(response) == expected


def test_the_filters_stay_in_the_form_and_the_export_links(
    alice_client: Client, filter_world: dict[str, Run],
) -> None:
    html = alice_client.get("/runs/?status=failed&q=zero").content.decode()
    assert '<option value="failed" selected>' in html
    assert 'name="q" value="zero"' in html
    # the export lists what the page lists: try-it runs left out by default
    assert 'href="/runs/export.csv?status=failed&amp;q=zero&amp;tryit=false"' in html


def test_the_started_by_and_error_columns(alice_client: Client,
                                          filter_world: dict[str, Run]) -> None:
    html = alice_client.get("/runs/?status=failed").content.decode()
    assert "<td>bob</td>" in html
    failed = filter_world["broken"]
    assert failed.error_type
    assert f'class="error-summary" hx-disable>{failed.error_type}: ' in html


def test_a_bad_filter_says_so_and_lists_nothing(alice_client: Client,
                                                filter_world: dict[str, Run]) -> None:
    response = alice_client.get("/runs/?since=yesterday")
    page = response.content.decode()
    assert response.status_code == 400
    assert "since must be an ISO 8601" in page
    assert "since: since" not in page
    assert titles(response) == []
    # The list is empty because of the filter, not because nothing matched; there is
    # nothing to download.
    assert "No runs match" not in page
    assert "Nothing is listed until the filter above is fixed." in page
    assert "Download these" not in page


def test_a_user_filters_only_their_own_runs(bob: AbstractUser, bob_client: Client,
                                            filter_world: dict[str, Run]) -> None:
    assert titles(bob_client.get("/runs/?endpoint=failing")) == ["Divide by zero"]
    assert 'name="user"' not in bob_client.get("/runs/").content.decode()  # staff only
