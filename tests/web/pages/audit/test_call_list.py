"""The tool-call log page (`/calls/`): the API's filters in the URL and the form, htmx
updates that push only the filters in use, keyset pages, rows that open the run's
timeline at the call's lane, downloads, and each user's own calls only."""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.web import audit_world
from tests.web.support import PAYLOAD, Tree, assert_inert
from tools_app.models import ToolCall
from tools_app.web.pages.audit.calls import CELL_CHARS

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(alice: AbstractUser, bob: AbstractUser, charlie: AbstractUser) -> dict[str, Any]:
    return audit_world.build({"bob": bob, "charlie": charlie})


def shown(world: dict[str, Any], response: Any) -> list[str]:
    ids = re.findall(r'<tr id="call-row-(\d+)"', response.content.decode())
    return audit_world.labels(world, [int(i) for i in ids])


@pytest.mark.parametrize(("query", "expected"), [
    ("", ["c4", "c3", "c2", "c1", "b3", "b2", "b1", "a3", "a2", "a1"]),
    ("?state=timeout", ["b1"]),
    ("?state=&tool=&handler=&min_ms=&q=", ["c4", "c3", "c2", "c1", "b3", "b2", "b1", "a3",
                                           "a2", "a1"]),  # empty fields: no filter
    ("?tool=get_weather&min_ms=30&max_ms=200", ["c1", "b2", "a2"]),
    ("?handler=execution_error_to_model&status=failed", ["b2", "b1"]),
    ("?user=charlie&state=in_progress", ["c2"]),
    ("?endpoint=beta&q=ghost", ["b3"]),
    # The form's datetime-local values: no zone, read in the server's (UTC).
    ("?since=2026-11-30T12:00", ["c4", "c3", "c2", "c1", "b3", "b2", "b1"]),
    ("?since=2026-11-30T12:00&until=2026-11-30T13:00", ["b3", "b2", "b1"]),
])
def test_the_page_filters_like_the_api(alice_client: Client, world: dict[str, Any],
                                       query: str, expected: list[str]) -> None:
    response = alice_client.get(f"/calls/{query}")
    assert response.status_code == 200
    assert shown(world, response) == expected


def test_each_row_opens_the_timeline_at_the_calls_lane(alice_client: Client,
                                                       world: dict[str, Any]) -> None:
    html = alice_client.get("/calls/?state=timeout").content.decode()
    run, call = world["b"], world["b1"]
    assert f'href="/runs/{run.pk}/#call-{call.pk}" class="call-link"' in html
    # The lane's anchor on the timeline is that id.
    timeline = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert f'id="call-{call.pk}"' in timeline


def test_the_filters_stay_in_the_form_the_export_links_and_the_pushed_url(
    alice_client: Client, world: dict[str, Any],
) -> None:
    html = alice_client.get("/calls/?state=timeout&min_ms=5").content.decode()
    assert '<option value="timeout" selected>' in html
    assert 'name="min_ms" inputmode="decimal" value="5"' in html
    assert 'href="/calls/export.csv?state=timeout&amp;min_ms=5"' in html
    assert "<option>execution_error_to_model</option>" in html  # handlers seen
    response = alice_client.get("/calls/?state=timeout&tool=&q=", headers={"HX-Request": "true"})
    assert response["HX-Push-Url"] == "/calls/?state=timeout"


def test_keyset_pages(alice_client: Client, world: dict[str, Any],
                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tools_app.web.pages.audit.calls.CALLS_PAGE_SIZE", 4)
    first = alice_client.get("/calls/?tool=get_weather")
    older = re.search(r'<a href="\?([^"]+)" rel="next">', first.content.decode())
    assert older is not None
    second = alice_client.get("/calls/?" + older.group(1).replace("&amp;", "&"))
    assert shown(world, first) == ["c2", "c1", "b2", "b1"]
    assert shown(world, second) == ["a2", "a1"]
    assert 'rel="next"' not in second.content.decode()
    assert "OFFSET" not in str(ToolCall.objects.filter(pk__lt=1).order_by("-pk")[:5].query)


def test_a_bad_filter_says_so_and_lists_nothing(alice_client: Client,
                                                world: dict[str, Any]) -> None:
    response = alice_client.get("/calls/?state=exploded")
    page = response.content.decode()
    assert response.status_code == 400
    assert "state must be one or more of" in page
    assert "state: state" not in page
    assert shown(world, response) == []
    assert "No calls match" not in page
    assert "Nothing is listed until the filter above is fixed." in page
    assert "Download these" not in page
    assert alice_client.get("/calls/?colour=red").status_code == 400


def test_a_user_sees_and_exports_only_their_own_calls(bob_client: Client,
                                                      world: dict[str, Any]) -> None:
    html = bob_client.get("/calls/")
    assert shown(world, html) == ["b3", "b2", "b1", "a3", "a2", "a1"]
    assert 'name="user"' not in html.content.decode()  # staff only
    assert shown(world, bob_client.get("/calls/?user=charlie")) == []
    response = bob_client.get("/calls/export.csv?tool=get_weather")
    assert response["Content-Disposition"] == 'attachment; filename="calls.csv"'
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [r["call_id"] for r in rows] == ["call_b2", "call_b1", "call_a2", "call_a1"]
    assert bob_client.get("/calls/export.jsonl?since=yesterday").status_code == 400


def test_the_page_is_a_fixed_number_of_queries(alice_client: Client, world: dict[str, Any],
                                               django_assert_max_num_queries: Any) -> None:
    # session, user, the page of calls (runs, endpoints, users joined), endpoint names,
    # tool names, handlers, the navigation's waiting count (the totals: a request of
    # their own)
    with django_assert_max_num_queries(7):
        assert len(shown(world, alice_client.get("/calls/"))) == 10


def test_untrusted_call_text_is_inert(bob_client: Client, world: dict[str, Any]) -> None:
    ToolCall.objects.filter(pk=world["a2"].pk).update(
        tool_name=PAYLOAD[:200], arguments_raw=PAYLOAD, error_message=PAYLOAD,
        error_type=PAYLOAD[:200])
    html = bob_client.get("/calls/").content.decode()
    # The page's own htmx attributes are the filter form's and the totals' placeholder's;
    # the payload's are text.
    form = Tree(html).by_id("call-filters")
    placeholder = re.search(r'<span id="call-totals" hx-get="/calls/totals/"'
                            r' hx-trigger="load" hx-swap="outerHTML">', html)
    assert placeholder is not None
    assert_inert(html.replace(_opening_tag(html, form.attrs), "<form>").replace(
        placeholder.group(0), "<span>"), scripts=3)
    assert "call-row-" + str(world["a2"].pk) in Tree(html).ids()


def _opening_tag(html: str, attrs: dict[str, str | None]) -> str:
    match = re.search(r'<form id="call-filters"[^>]*>', html)
    assert match is not None
    assert attrs["hx-get"] == "/calls/"
    return match.group(0)


def test_the_pages_need_a_login(client: Client, world: dict[str, Any]) -> None:
    for path in ("/calls/", "/calls/export.csv", "/tools/", "/tools/get_weather/"):
        assert client.get(path).status_code == 302, path


# -- one line per call, totals, sorting --------------------------------------------------


def totals_of(client: Client, query: str) -> str:
    """The totals line as the page shows it once its totals came: the page's order
    after the fragment the page asks for (its hx-get)."""
    page = Tree(client.get(f"/calls/{query}").content.decode())
    placeholder = page.by_id("call-totals")
    assert (placeholder.attrs["hx-trigger"], placeholder.attrs["hx-swap"]) == (
        "load", "outerHTML")
    response = client.get(str(placeholder.attrs["hx-get"]))
    assert response.status_code == 200
    fragment = Tree(response.content.decode())
    assert "hx-disable" in fragment.by_id("call-totals").attrs
    order = next(t for t, e in page.texts if e is not None
                 and e.attrs.get("data-total") == "order")
    return "".join(t for t, _ in fragment.texts).strip() + " · " + order


def test_the_totals_count_the_selection_not_the_page(
        alice_client: Client, bob_client: Client, world: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tools_app.web.pages.audit.calls.CALLS_PAGE_SIZE", 3)
    assert totals_of(alice_client, "") == "10 calls · 7 errors (70 %) · newest first"
    assert totals_of(alice_client, "?tool=get_weather&sort=-duration") == (
        "6 calls · 3 errors (50 %) · duration, longest first")
    assert totals_of(bob_client, "?state=ok") == "1 call · 0 errors (0 %) · newest first"
    monkeypatch.setattr("tools_app.audit.call_totals.CAP", 4)
    assert totals_of(bob_client, "") == (
        "More than 4 calls · more than 4 errors · newest first")
    # its own request: the filters only (no sort, page or size), refused as the list's
    assert 'hx-get="/calls/totals/?tool=get_weather"' in alice_client.get(
        "/calls/?tool=get_weather&sort=tool&limit=5").content.decode()
    assert alice_client.get("/calls/totals/?state=exploded").status_code == 400
    assert Client().get("/calls/totals/").status_code == 302  # login first


def test_the_totals_are_a_fixed_number_of_queries(
        alice_client: Client, bob_client: Client, world: dict[str, Any],
        django_assert_max_num_queries: Any) -> None:
    # session, user, the per-tool counts (staff, no filter); a user's: one count
    # (capped: then the errors too), the navigation's waiting count
    with django_assert_max_num_queries(4):
        assert alice_client.get("/calls/totals/").status_code == 200
    with django_assert_max_num_queries(5):
        assert bob_client.get("/calls/totals/?state=ok&q=paris").status_code == 200


def test_totals_that_take_too_long_are_not_counted_and_the_rows_still_show(
        bob_client: Client, world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tools_app.audit.call_totals.BUDGET", 0.0)
    monkeypatch.setattr("tools_app.audit.deadline.CHECK_EVERY", 1)
    assert totals_of(bob_client, "?sort=tool").startswith(
        "Not counted: too many calls to count quickly")
    assert shown(world, bob_client.get("/calls/?sort=tool")) == [
        "a3", "b2", "b1", "a2", "a1", "b3"]


def test_the_column_heads_sort_and_keep_the_filters(alice_client: Client,
                                                    world: dict[str, Any]) -> None:
    html = alice_client.get("/calls/?tool=get_weather&cursor=abc&q=").content.decode()
    # (a bad cursor is refused, but the heads are drawn all the same)
    tree = Tree(html)
    heads = {e.attrs["class"]: e for e in tree.elements if e.tag == "th"
             and (e.attrs.get("class") or "").startswith("c-")}
    links = {name: next(a.attrs["href"] for a in tree.elements if a.tag == "a"
                        and heads[name] in a.ancestors_or_self())
             for name in ("c-tool", "c-duration", "c-started")}
    assert links == {"c-tool": "?tool=get_weather&sort=tool",
                     "c-duration": "?tool=get_weather&sort=-duration",
                     "c-started": "?tool=get_weather&sort=started"}
    assert not any("aria-sort" in head.attrs for head in heads.values())

    html = alice_client.get("/calls/?tool=get_weather&sort=-duration").content.decode()
    assert shown(world, alice_client.get("/calls/?tool=get_weather&sort=-duration")) == [
        "b1", "a2", "b2", "c1", "a1", "c2"]
    tree = Tree(html)
    head = next(e for e in tree.elements if e.tag == "th" and e.attrs.get("class") == "c-duration")
    assert head.attrs["aria-sort"] == "descending"
    assert 'href="?tool=get_weather&amp;sort=duration" title="Sort: duration, shortest first"' \
        in html  # a second click turns it around
    # the filter form sends the sort with it; the downloads are newest first, unsorted
    assert '<input type="hidden" name="sort" value="-duration" form="call-filters">' in html
    assert 'href="/calls/export.csv?tool=get_weather"' in html


def test_sorted_pages_follow_their_cursor_back_to_the_first(
        alice_client: Client, world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tools_app.web.pages.audit.calls.CALLS_PAGE_SIZE", 4)
    seen: list[str] = []
    query = "sort=duration"
    for _ in range(5):
        response = alice_client.get(f"/calls/?{query}")
        seen += shown(world, response)
        html = response.content.decode()
        older = re.search(r'<a href="\?([^"]+)" rel="next">', html)
        if older is None:
            break
        query = older.group(1).replace("&amp;", "&")
        assert "sort=duration" in query
    assert seen == ["c3", "a3", "a1", "c1", "b2", "a2", "b1", "b3", "c2", "c4"]
    assert 'href="?sort=duration">← First page</a>' in html
    assert alice_client.get("/calls/?sort=size").status_code == 400


def test_long_values_end_in_an_ellipsis_and_expand_to_the_whole(
        bob_client: Client, world: dict[str, Any]) -> None:
    long_arguments = '{"text": "' + "x" * 9000 + '"}'
    ToolCall.objects.filter(pk=world["a1"].pk).update(arguments_raw=long_arguments)
    ToolCall.objects.filter(pk=world["a2"].pk).update(error_message="boom " * 30)
    html = bob_client.get("/calls/").content.decode()
    tree = Tree(html)
    row = tree.by_id(f"call-row-{world['a1'].pk}")
    [expander] = [e for e in tree.elements if e.tag == "details"
                  and row in e.ancestors_or_self() and e.attrs.get("data-cell") == "arguments"]
    summary = next(text for text, e in tree.texts if e is not None and e.tag == "code"
                   and expander in e.ancestors_or_self())
    assert len(summary) == 200
    assert summary.endswith("…")
    whole = next(text for text, e in tree.texts if e is not None and e.tag == "pre"
                 and expander in e.ancestors_or_self())
    assert whole == long_arguments[:CELL_CHARS - 1] + "…"
    assert "all of it on the run's page" in html
    a2 = tree.by_id(f"call-row-{world['a2'].pk}")
    [cell] = [e for e in tree.elements if e.tag == "details" and a2 in e.ancestors_or_self()
              and e.attrs.get("data-cell") == "error"]
    error = next(text for text, e in tree.texts if e is not None and e.tag == "pre"
                 and cell in e.ancestors_or_self())
    assert error == "ToolExecutionError: " + "boom " * 30
    # the other long cells keep their whole value in a title
    assert f'<td title="{world["a"].title}">' in html
