"""A run's lineage in words (runs/debugger/lineage.py): a badge per kind read from the
stored sections, the line saying how a run was made from its parent, and the parent's
list of the runs made from it, read in one query."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from tests.runs.support import execute, start
from tools_app.models import ErrorPolicy, Run, ToolRegistration
from tools_app.runs.debugger import lineage
from tools_app.runs.debugger.fork import run_fork
from tools_app.runs.debugger.rerun import ReplayOptions, run_rerun
from tools_app.runs.debugger.run_header import header_view
from tools_app.runs.snapshot.model import snapshot_of

pytestmark = pytest.mark.both

SCRIPT = [{"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}]},
          {"text": "model saw: {last_result}"}]
REPLAY = {"model": "recorded", "tools": "live", "on_divergence": "stop"}


def kinds(stored: Any) -> list[str]:
    return [badge.kind for badge in lineage.badges(stored)]


# -- badges, from stored sections alone ---------------------------------------------------

@pytest.mark.parametrize(("stored", "expected"), [
    ({}, []),
    ({"endpoint": {"name": "e"}, "messages": []}, []),
    ({"rerun": {"of": "p", "mode": "as_it_was"}}, ["rerun"]),
    ({"rerun": {"of": "p", "mode": "current"}}, ["rerun"]),
    ({"rerun": {"of": "p", "replay": REPLAY}}, ["replay"]),
    # replay options that answer nothing from the recording: a plain rerun
    ({"rerun": {"of": "p", "replay": {"model": "live", "tools": "live"}}}, ["rerun"]),
    ({"rerun": {"of": "p", "fork_round": 2}, "fork": {"of": "p", "round": 2}}, ["fork"]),
    ({"rerun": {"of": "p", "fork_round": 3}, "fork": {"of": "p", "round": 3},
      "splice": {"of": "p", "round": 2, "tool": "t"}}, ["splice"]),
    # a fork of a spliced run keeps the splice section, which names the grandparent
    ({"rerun": {"of": "p", "fork_round": 2}, "splice": {"of": "gp"}}, ["fork"]),
    # a rerun of a fork or a splice keeps their sections, without a fork round
    ({"rerun": {"of": "p"}, "fork": {"of": "gp", "round": 2}, "splice": {"of": "gp"}},
     ["rerun"]),
    ({"imported": {"from": "abc", "via": "manage.py import_run"}}, ["import"]),
    ({"tryit": {"tool": "calculator", "arguments": {}}}, ["tryit"]),
    # the marks of a file's or a tool's conversation stay on their reruns
    ({"rerun": {"of": "p"}, "imported": {"from": "abc"}}, ["rerun", "import"]),
    ({"rerun": {"of": "p", "replay": REPLAY}, "tryit": {"tool": "t"}}, ["replay", "tryit"]),
    # not a snapshot, or sections of the wrong shape: nothing to say
    (None, []), ([], []), ({"rerun": "p", "tryit": ["t"]}, []),
])
def test_a_badge_per_lineage_kind(stored: Any, expected: list[str]) -> None:
    assert kinds(stored) == expected


def test_badges_are_labelled_and_say_what_they_mean() -> None:
    [tryit] = lineage.badges({"tryit": {"tool": "t"}})
    assert (tryit.kind, tryit.label) == ("tryit", "try-it")
    assert tryit.title == "A try-it run: one call of a tool from its page"
    rerun, imported = lineage.badges({"rerun": {"of": "p"}, "imported": {}})
    assert rerun.title == "A rerun of another run (as it was)"
    assert imported.title == "A rerun of a run imported from a run file"
    [replay] = lineage.badges({"rerun": {"of": "p", "replay": REPLAY}})
    assert replay.title == ("A rerun answering from a recording: model recorded, tools "
                            "live, stops where it diverges")
    [fork] = lineage.badges({"rerun": {"of": "p", "fork_round": 4}})
    assert fork.title == "A fork of another run from its round 4"


@pytest.mark.parametrize(("status", "errors", "note", "words"), [
    ("succeeded", 2, "with 2 errors", "Succeeded with 2 errors"),
    ("succeeded", 1, "with 1 error", "Succeeded with 1 error"),
    ("succeeded", 0, "", "Succeeded"),
    ("failed", 3, "", "Failed"),  # a failure says more than its count of errors
    ("running", 1, "", "Running"),
])
def test_a_run_that_succeeded_with_errors_says_so(status: str, errors: int, note: str,
                                                  words: str) -> None:
    assert lineage.status_note(status, errors) == note
    assert lineage.status_words(status, errors) == words


# -- runs made from another ---------------------------------------------------------------

@pytest.fixture
def original(make_endpoint: Any, tools: dict[str, ToolRegistration],
             policy: ErrorPolicy) -> Run:
    run = start(make_endpoint(SCRIPT), [tools["lookup"]], policy, "Look k up")
    assert execute(run) == "succeeded"
    return run


def _at(run: Run, moment: datetime.datetime) -> Run:
    Run.objects.filter(pk=run.pk).update(created_at=moment)
    run.refresh_from_db()
    return run


def test_the_parent_lists_its_children_with_their_mode_status_and_time(
    original: Run, django_assert_num_queries: Any,
) -> None:
    base = timezone.localtime(original.created_at).replace(hour=18, minute=56, second=0)
    _at(original, base)
    plain = run_rerun(run=original, user=None, mode="as_it_was")
    assert execute(plain) == "succeeded"
    replay = run_rerun(run=original, user=None, mode="as_it_was",
                       replay=ReplayOptions(model="recorded", tools="live"))
    assert execute(replay) == "succeeded"
    current = run_rerun(run=original, user=None, mode="current")
    fork = run_fork(run=original, user=None, round_number=2, append=[
        {"role": "user", "content": "And k2?"}])
    for seconds, run in enumerate((plain, replay, current, fork), start=1):
        _at(run, base + datetime.timedelta(seconds=seconds * 7))

    with django_assert_num_queries(1):  # the children and their sections, in one
        found = lineage.run_lineage(original, Run.objects.all())

    assert found.origin is None
    assert found.more_children == 0
    assert [(c.pk, c.kind, c.text) for c in found.children] == [
        (fork.pk, "fork", "Fork · from round 2 · as it was · “And k2?” · queued · 18:56:28"),
        (current.pk, "rerun", "Rerun · current configuration · queued · 18:56:21"),
        (replay.pk, "replay", "Replay · as it was · replay model recorded, tools live, "
                              "stops where it diverges · succeeded · 18:56:14"),
        (plain.pk, "rerun", "Rerun · as it was · succeeded · 18:56:07"),
    ]
    assert [[b.kind for b in c.badges] for c in found.children] == [
        ["fork"], ["rerun"], ["replay"], ["rerun"]]
    assert [c.status for c in found.children] == ["queued", "queued", "succeeded",
                                                  "succeeded"]


def test_the_mark_of_the_children_changes_with_what_their_list_says(original: Run) -> None:
    """The run page's live socket sends the list again only when its mark changed."""
    def mark() -> str:
        return lineage.run_lineage(original, Run.objects.all()).children_mark()

    none = mark()
    child = run_rerun(run=original, user=None, mode="as_it_was")
    one = mark()
    assert one != none
    assert mark() == one  # read again, nothing new
    Run.objects.filter(pk=child.pk).update(status="succeeded")
    assert mark() not in (none, one)  # its status moved on
    assert lineage.run_lineage(original, Run.objects.exclude(pk=child.pk)
                               ).children_mark() == none  # a viewer who may not see it


def test_a_child_of_another_day_shows_its_date_and_a_child_s_errors_show(
    original: Run,
) -> None:
    child = run_rerun(run=original, user=None, mode="as_it_was")
    Run.objects.filter(pk=child.pk).update(status="succeeded", errors_count=2)
    later = _at(child, original.created_at + datetime.timedelta(days=1, seconds=1))

    [line] = lineage.run_lineage(original, Run.objects.all()).children

    stamp = timezone.localtime(later.created_at).strftime("%Y-%m-%d %H:%M:%S")
    assert line.text == f"Rerun · as it was · succeeded with 2 errors · {stamp}"


def test_a_splice_names_the_call_whose_result_it_replaced(original: Run) -> None:
    child = run_rerun(run=original, user=None, mode="as_it_was")
    stored = child.snapshot | {
        "rerun": child.snapshot["rerun"] | {"fork_round": 2},
        "fork": {"of": str(original.pk), "round": 2, "inherited": 3},
        "splice": {"of": str(original.pk), "call": 1, "call_id": "c1", "tool": "lookup",
                   "round": 1, "execution": 1, "by": "bob",
                   "spliced": {"text": "a long result " * 1000}}}
    Run.objects.filter(pk=child.pk).update(snapshot=stored)
    child.refresh_from_db()

    [line] = lineage.run_lineage(original, Run.objects.all()).children
    origin = lineage.run_lineage(child, Run.objects.all()).origin

    assert (line.kind, line.text.split(" · ")[:2]) == ("splice", ["Splice",
                                                                 "round 1's call lookup"])
    assert origin is not None
    assert (origin.kind, origin.words, origin.details) == (
        "splice", "Splice", ["round 1's call lookup"])
    assert origin.parent == original


def test_a_child_says_how_it_was_made_from_its_parent(original: Run,
                                                      django_assert_num_queries: Any) -> None:
    current = run_rerun(run=original, user=None, mode="current")
    replay = run_rerun(run=original, user=None, mode="as_it_was",
                       replay=ReplayOptions(model="recorded", tools="recorded"))
    fork = run_fork(run=original, user=None, round_number=1)

    current = Run.objects.get(pk=current.pk)  # as the page reads it: no parent loaded
    with django_assert_num_queries(2):  # the parent, and the (no) children
        made = lineage.run_lineage(current, Run.objects.all())
    when = timezone.localtime(current.created_at).strftime("%Y-%m-%d %H:%M")
    assert made.origin == lineage.Origin("rerun", "Rerun", [
        f"with the configuration of {when}"], original)
    assert made.children == []
    # the replay options have a line of their own on the page
    assert lineage.run_lineage(replay, Run.objects.all()).origin == lineage.Origin(
        "replay", "Replay", ["as it was"], original)
    assert lineage.run_lineage(fork, Run.objects.all()).origin == lineage.Origin(
        "fork", "Fork", ["from round 1", "as it was"], original)


def test_a_child_whose_parent_is_gone_still_says_what_it_is(original: Run) -> None:
    child = run_rerun(run=original, user=None, mode="as_it_was")
    original.delete()
    child.refresh_from_db()

    origin = lineage.run_lineage(child, Run.objects.all()).origin

    assert origin == lineage.Origin("rerun", "Rerun", ["as it was"], None)


def test_only_the_children_the_viewer_may_see_are_listed(original: Run) -> None:
    bob = get_user_model().objects.create_user("bob-lineage")
    mine = run_rerun(run=original, user=bob, mode="as_it_was")
    run_rerun(run=original, user=None, mode="as_it_was")

    children = lineage.run_lineage(original, Run.objects.filter(created_by=bob)).children

    assert [c.pk for c in children] == [mine.pk]


def test_a_parent_with_many_children_lists_the_newest_and_counts_the_rest(
    original: Run, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lineage, "CHILDREN_SHOWN", 2)
    made = [run_rerun(run=original, user=None, mode="as_it_was") for _ in range(5)]
    for seconds, run in enumerate(made):
        _at(run, original.created_at + datetime.timedelta(seconds=seconds))

    found = lineage.run_lineage(original, Run.objects.all())

    assert [c.pk for c in found.children] == [made[4].pk, made[3].pk]
    assert found.more_children == 3


# -- the header ---------------------------------------------------------------------------

def test_the_header_says_a_run_succeeded_with_errors_and_shows_its_badges(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    run = start(make_endpoint([
        {"tool_calls": [{"name": "always_fails", "arguments": {"reason": "down"}},
                        {"name": "always_fails", "arguments": {"reason": "still down"}}]},
        {"text": "done anyway"}]), [tools["always_fails"]], policy, "Try twice")
    assert execute(run) == "succeeded"

    header = header_view(run)

    assert header["counts"]["errors"] == 2
    assert header["status_note"] == "with 2 errors"
    assert header["badges"] == []
    again = run_rerun(run=run, user=None, mode="as_it_was",
                      replay=ReplayOptions(model="recorded", tools="recorded"))
    assert snapshot_of(again).rerun is not None
    queued = header_view(again)
    assert [b.kind for b in queued["badges"]] == ["replay"]
    assert queued["status_note"] == ""  # not succeeded (yet)
    assert execute(again) == "succeeded"
    assert header_view(again)["status_note"] == "with 2 errors"
