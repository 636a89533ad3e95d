"""The change history on a price's and a policy's admin page (admin/revisions.py): the
latest revisions newest first, a price's with its number first, who and what changed
escaped, and a link to all the owner's revisions."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.admin.support import form_errors, url
from tools_app.models import ErrorPolicy, ModelPrice, PolicyRevision, PriceRevision

pytestmark = pytest.mark.django_db

WHEN = datetime(2026, 1, 2, 15, 4, tzinfo=UTC)
WHEN_SHOWN = "Jan. 2, 2026, 3:04 p.m."  # DATETIME_FORMAT in the settings' UTC


def history(page: str) -> tuple[list[str], list[list[str]], list[tuple[str, str]]]:
    """The page's change history field: its headers, its rows' cells and its links."""
    field = page.split("field-revision_history", 1)[1].split("field-created_at", 1)[0]
    rows = re.findall(r"<tr><td>.*?</tr>", field)
    return (re.findall(r"<th>(.*?)</th>", field),
            [re.findall(r"<td>(.*?)</td>", row) for row in rows],
            re.findall(r'<a href="([^"]*)">([^<]*)</a>', field))


def test_a_prices_history_numbers_its_revisions(alice_client: Client, make_endpoint: Any) -> None:
    endpoint = make_endpoint([{"text": "done"}], name="paid")
    data = {"endpoint": str(endpoint.pk), "model": "<b>m</b>", "input_per_million": "2",
            "cached_input_per_million": "", "output_per_million": "10"}
    response = alice_client.post(url(ModelPrice, "add"), data)
    assert response.status_code == 302, form_errors(response)
    price = ModelPrice.objects.get()
    response = alice_client.post(url(ModelPrice, "change", price.pk),
                                 data | {"output_per_million": "12"})
    assert response.status_code == 302, form_errors(response)
    PriceRevision.objects.update(changed_at=WHEN)
    first, second = PriceRevision.objects.order_by("pk")

    headers, rows, links = history(
        alice_client.get(url(ModelPrice, "change", price.pk)).content.decode())
    assert headers == ["Revision", "When", "Who", "What changed"]
    assert rows[0] == [f"#{second.pk}", WHEN_SHOWN, "alice",
                       "output_per_million: &quot;10&quot; → &quot;12&quot;"]
    assert rows[1][:3] == [f"#{first.pk}", WHEN_SHOWN, "alice"]
    assert "model: null → &quot;&lt;b&gt;m&lt;/b&gt;&quot;" in rows[1][3]
    assert links == [(f"{url(PriceRevision, 'changelist')}?price__id__exact={price.pk}",
                      "All revisions of this price")]


def test_a_policys_history(alice_client: Client, alice: AbstractUser) -> None:
    policy = ErrorPolicy.objects.create(name="Default", is_default=True)
    PolicyRevision.objects.create(policy=policy, changed_by=alice,
                                  changes={"name": [None, "<i>Default</i>"]})
    PolicyRevision.objects.create(policy=policy, changed_by=None,
                                  changes={"max_round_trips": [100, 5]})
    PolicyRevision.objects.update(changed_at=WHEN)

    headers, rows, links = history(
        alice_client.get(url(ErrorPolicy, "change", policy.pk)).content.decode())
    assert headers == ["When", "Who", "What changed"]
    assert rows == [[WHEN_SHOWN, "—", "max_round_trips: 100 → 5"],
                    [WHEN_SHOWN, "alice", "name: null → &quot;&lt;i&gt;Default&lt;/i&gt;&quot;"]]
    assert links == [(f"{url(PolicyRevision, 'changelist')}?policy__id__exact={policy.pk}",
                      "All revisions of this policy")]


def test_an_owner_without_revisions_says_so(alice_client: Client) -> None:
    policy = ErrorPolicy.objects.create(name="Quiet")
    page = alice_client.get(url(ErrorPolicy, "change", policy.pk)).content.decode()
    assert "No changes recorded." in page.split("field-revision_history", 1)[1]
    page = alice_client.get(url(ModelPrice, "add")).content.decode()
    assert "Every save is recorded here." in page.split("field-revision_history", 1)[1]
