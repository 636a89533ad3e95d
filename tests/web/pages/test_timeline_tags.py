"""`{% call_url %}` (web/pages/timeline_tags.py): the URL `{% url %}` gives for a call of a run,
from one reverse per run and URL name."""

from __future__ import annotations

import uuid

import pytest
from django.template import engines
from django.urls import NoReverseMatch, clear_script_prefix, reverse, set_script_prefix

from tools_app.runs.debugger.durations import format_ms
from tools_app.web.pages import timeline_tags
from tools_app.web.pages.timeline_tags import call_url

CALL_URLS = ("call_reexecute", "call_result", "call_check_arguments", "call_reexecute_check")


@pytest.mark.parametrize("name", CALL_URLS)
def test_it_is_the_reversed_url_for_every_call(name: str) -> None:
    runs = [uuid.uuid4(), uuid.uuid4()]
    for run in runs:
        for call in (1, 7, 42, 1_000_000, 2**31 - 1):
            assert call_url(name, run, call) == reverse(name, args=[run, call])


def test_it_follows_the_script_prefix() -> None:
    run = uuid.uuid4()
    set_script_prefix("/agentforge/")
    try:
        assert call_url("call_reexecute", run, 5) == f"/agentforge/runs/{run}/calls/5/reexecute/"
        assert call_url("call_reexecute", run, 5) == reverse("call_reexecute", args=[run, 5])
    finally:
        clear_script_prefix()
    assert call_url("call_reexecute", run, 5) == f"/runs/{run}/calls/5/reexecute/"


def test_in_a_template_it_writes_the_same_as_url() -> None:
    engine = engines["django"]
    context = {"run": uuid.uuid4(), "call": 12}
    ours = engine.from_string("{% load timeline %}{% call_url 'call_result' run call %}")
    django_s = engine.from_string("{% url 'call_result' run call %}")
    assert ours.render(context) == django_s.render(context)


def test_a_url_that_takes_no_call_is_refused() -> None:
    with pytest.raises(NoReverseMatch):
        call_url("run_fork", uuid.uuid4(), 3)


def test_a_url_whose_call_id_is_not_a_whole_segment_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(timeline_tags, "reverse",
                        lambda name, args: f"/runs/{args[0]}/call-{args[1]}.txt")
    with pytest.raises(ValueError, match="call id"):
        call_url("made_up", uuid.uuid4(), 3)


# -- {% memo %} ---------------------------------------------------------------------------

MEMO = "{% load timeline %}{% memo slot a %}{{ a }}/{{ b }}{% endmemo %}"


def test_memo_renders_its_block_again_only_when_an_input_changed() -> None:
    block = engines["django"].from_string(MEMO)

    assert block.render({"slot": 1, "a": "<one>", "b": "x"}) == "&lt;one&gt;/x"
    # b is not an input: an unchanged input gives the block's last rendering.
    assert block.render({"slot": 1, "a": "<one>", "b": "y"}) == "&lt;one&gt;/x"
    assert block.render({"slot": 1, "a": "two", "b": "y"}) == "two/y"


def test_memo_keeps_a_rendering_per_slot() -> None:
    block = engines["django"].from_string(MEMO)

    assert block.render({"slot": 1, "a": "same", "b": "first"}) == "same/first"
    assert block.render({"slot": 2, "a": "same", "b": "second"}) == "same/second"
    assert block.render({"slot": 1, "a": "same", "b": "third"}) == "same/first"


def test_memo_renders_again_in_another_time_zone_or_language() -> None:
    from datetime import UTC, datetime

    from django.utils import timezone, translation

    block = engines["django"].from_string(
        '{% load timeline %}{% memo slot at %}{{ at|date:"F H:i" }}{% endmemo %}')
    at = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    with timezone.override("UTC"), translation.override("en"):
        assert block.render({"slot": 1, "at": at}) == "January 12:00"
    with timezone.override("Asia/Tokyo"), translation.override("en"):
        assert block.render({"slot": 1, "at": at}) == "January 21:00"
    with timezone.override("UTC"), translation.override("fr"):
        assert block.render({"slot": 1, "at": at}) == "janvier 12:00"


@pytest.mark.parametrize(("value", "shown"), [
    (None, "-"), (0, "0 ms"), (0.004, "<0.01 ms"), (0.05, "0.05 ms"), (0.5, "0.50 ms"),
    (4.21, "4.2 ms"), (87.4, "87 ms"), (1250, "1.25 s"),
])
def test_durations_read_as_people_read_them(value: float | None, shown: str) -> None:
    assert format_ms(value) == shown
