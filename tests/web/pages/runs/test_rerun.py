"""Rerun from the run page and the API; the pages link parent and children."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.web.support import Api, error_of
from tools_app.models import ModelEndpoint, Run, ToolRegistration
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db


def test_rerun_from_the_page_lands_on_the_new_run_linked_both_ways(
    bob_client: Client, finished: Run, enqueued: list[str],
    django_capture_on_commit_callbacks: Any,
) -> None:
    page = bob_client.get(f"/runs/{finished.pk}/").content.decode()
    assert f'action="/runs/{finished.pk}/rerun/"' in page

    with django_capture_on_commit_callbacks(execute=True):
        response = bob_client.post(f"/runs/{finished.pk}/rerun/", {"mode": "current"})

    new = Run.objects.get(parent=finished)
    assert response["Location"] == f"/runs/{new.pk}/"
    assert enqueued[-1] == str(new.pk)
    child_page = bob_client.get(f"/runs/{new.pk}/").content.decode()
    assert f'href="/runs/{finished.pk}/"' in child_page
    assert "Same endpoint, tools and policy as the original." in child_page
    parent_page = bob_client.get(f"/runs/{finished.pk}/").content.decode()
    assert f'href="/runs/{new.pk}/"' in parent_page


def test_the_differences_are_shown_escaped(
    bob_client: Client, finished: Run, weather_endpoint: ModelEndpoint,
) -> None:
    ModelEndpoint.objects.filter(pk=weather_endpoint.pk).update(model="<script>x</script>")
    bob_client.post(f"/runs/{finished.pk}/rerun/", {"mode": "current"})
    new = Run.objects.get(parent=finished)

    page = bob_client.get(f"/runs/{new.pk}/").content.decode()

    assert "endpoint model:" in page
    assert "<script>x</script>" not in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page


def test_a_rerun_that_cannot_be_made_says_why_on_the_page(
    bob_client: Client, finished: Run,
) -> None:
    ToolRegistration.objects.filter(name="get_weather").update(enabled=False)

    response = bob_client.post(f"/runs/{finished.pk}/rerun/", {"mode": "current"}, follow=True)

    assert "Cannot rerun: tools disabled: get_weather" in response.content.decode()
    assert not Run.objects.filter(parent=finished).exists()


def test_only_those_who_may_see_a_run_may_rerun_it(
    finished: Run, charlie: AbstractUser,
) -> None:
    other = Client()
    other.force_login(charlie)
    assert other.post(f"/runs/{finished.pk}/rerun/", {"mode": "as_it_was"}).status_code == 404
    api = Api(create_token(charlie, "ci")[1])
    assert error_of(api.post(f"/api/runs/{finished.pk}/rerun", {}), 404)["code"] == "not_found"
    assert not Run.objects.filter(parent=finished).exists()


def test_the_api_reruns_and_refuses_clearly(
    bob: AbstractUser, finished: Run,
) -> None:
    api = Api(create_token(bob, "ci")[1])

    made = api.post(f"/api/runs/{finished.pk}/rerun", {"mode": "as_it_was"})

    assert made.status_code == 201
    body = made.json()
    assert (body["parent"], body["differences"]) == (str(finished.pk), [])
    assert api.get(f"/api/runs/{body['id']}").json()["parent"] == str(finished.pk)
    error = error_of(api.post(f"/api/runs/{finished.pk}/rerun", {"mode": "later"}), 400)
    assert (error["code"], error["field"]) == ("invalid_field", "mode")
    ToolRegistration.objects.filter(name="get_weather").delete()
    error = error_of(api.post(f"/api/runs/{finished.pk}/rerun", {"mode": "current"}), 409)
    assert error["code"] == "cannot_rerun"
    assert "no longer registered: get_weather" in error["message"]


def test_an_api_rerun_needs_no_body(bob: AbstractUser, finished: Run) -> None:
    api = Api(create_token(bob, "ci")[1])
    response = api.client.post(f"/api/runs/{finished.pk}/rerun", "",
                               content_type="application/json", headers=api.headers)
    assert response.status_code == 201


