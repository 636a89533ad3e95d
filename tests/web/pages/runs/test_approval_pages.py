"""The timeline's decision form and the arguments check behind the editor: owner or
staff only, CSRF-protected, refusals shown as a message naming the problem."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tools_app.models import CallDecision, Run

pytestmark = pytest.mark.django_db


def pks(run: Run) -> list[int]:
    return list(run.tool_calls.order_by("call_index").values_list("pk", flat=True))


def test_the_page_shows_the_waiting_calls_with_their_buttons(
    bob_client: Client, waiting: Run,
) -> None:
    page = bob_client.get(f"/runs/{waiting.pk}/").content.decode()

    assert 'data-status="waiting"' in page
    assert f'id="decision-form" method="post" action="/runs/{waiting.pk}/decide/"' in page
    for pk in pks(waiting):
        assert f'value="approve:{pk}"' in page
        assert f'value="reject:{pk}"' in page
        assert f'value="edit:{pk}"' in page
        assert f'data-check-url="/runs/{waiting.pk}/calls/{pk}/check-arguments"' in page
    assert 'value="approve_round:0"' in page
    assert page.count("Awaiting approval") == 2


def test_deciding_from_the_page_and_a_refusal_as_a_message(
    bob_client: Client, waiting: Run,
) -> None:
    first, second = pks(waiting)
    url = f"/runs/{waiting.pk}/decide/"

    bad = bob_client.post(url, {"decide": f"edit:{first}", f"arguments-{first}": '{"city": 1}'},
                          follow=True)
    broken = bob_client.post(url, {"decide": f"edit:{first}", f"arguments-{first}": "{"},
                             follow=True)
    rejected = bob_client.post(url, {"decide": f"reject:{second}",
                                     f"message-{second}": "<no> thanks"})

    assert "Decision not recorded: The edited arguments do not fit the tool&#x27;s schema " \
           "(city: 1 is not of type &#x27;string&#x27;)" in bad.content.decode()
    assert broken.content.decode().count("not valid JSON") == 1
    assert (rejected.status_code, rejected["Location"]) == (302, f"/runs/{waiting.pk}/")
    decision = CallDecision.objects.get()
    assert (decision.tool_call_id, decision.decision, decision.message) == (
        second, "reject", "<no> thanks")
    page = bob_client.get(f"/runs/{waiting.pk}/").content.decode()
    assert "&lt;no&gt; thanks" in page
    assert "<no> thanks" not in page


def test_the_decision_form_needs_csrf_the_owner_and_a_well_formed_value(
    waiting: Run, bob: AbstractUser, charlie: AbstractUser,
) -> None:
    first = pks(waiting)[0]
    url = f"/runs/{waiting.pk}/decide/"
    owner = Client(enforce_csrf_checks=True)
    owner.force_login(bob)
    stranger = Client()
    stranger.force_login(charlie)

    assert owner.post(url, {"decide": f"approve:{first}"}).status_code == 403
    assert stranger.post(url, {"decide": f"approve:{first}"}).status_code == 404
    owner_plain = Client()
    owner_plain.force_login(bob)
    assert owner_plain.post(url, {"decide": "approve:x"}).status_code == 400
    assert owner_plain.post(url, {"decide": "approve:999999"}).status_code == 404
    assert not CallDecision.objects.exists()


def test_the_arguments_check_answers_problems_by_argument(
    bob_client: Client, charlie: AbstractUser, waiting: Run,
) -> None:
    url = f"/runs/{waiting.pk}/calls/{pks(waiting)[0]}/check-arguments"

    def check(text: str) -> dict[str, object]:
        response = bob_client.post(url, text, content_type="text/plain")
        assert response.status_code == 200
        return json.loads(response.content)  # type: ignore[no-any-return]

    assert check('{"city": "Oslo"}') == {"ok": True, "problems": {}}
    assert list(check('{"city": []}')["problems"]) == ["city"]  # type: ignore[arg-type]
    assert list(check("{}")["problems"]) == ["city"]  # type: ignore[arg-type]
    assert list(check("[1]")["problems"]) == [""]  # type: ignore[arg-type]
    assert "not valid JSON" in str(check("{nope"))
    stranger = Client()
    stranger.force_login(charlie)
    assert stranger.post(url, "{}", content_type="text/plain").status_code == 404


def test_the_runs_page_filters_waiting_runs(bob_client: Client, waiting: Run) -> None:
    listed = bob_client.get("/runs/?status=waiting").content.decode()
    running = bob_client.get("/runs/?status=running").content.decode()

    assert f"/runs/{waiting.pk}/" in listed
    assert 'class="badge status-waiting"' in listed
    assert f"/runs/{waiting.pk}/" not in running
