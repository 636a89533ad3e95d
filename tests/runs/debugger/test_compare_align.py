"""Aligning two rounds' calls (runs/debugger/compare.py): same tool and arguments first,
in order, then the rest of a tool with other arguments, then the calls only one run
made; and a run's lineage and replay modes read from its stored snapshot."""

from __future__ import annotations

from typing import Any

import pytest

from tools_app.runs.debugger import lineage as lineage_marks
from tools_app.runs.debugger.compare import CallRow, align_calls, lineage, relation, replay_modes


def call(index: int, tool: str, arguments: str, result: str = "ok",
         is_error: bool = False) -> CallRow:
    return CallRow(round_id=1, id=100 + index, call_index=index, tool_name=tool,
                   arguments_raw=arguments, state="succeeded", result_text=result,
                   is_error=is_error, error_type="", error_message="", duration_ms=1.0)


def shape(pairs: list[tuple[CallRow | None, CallRow | None, str]],
          ) -> list[tuple[int | None, int | None, str]]:
    return [(a.call_index if a else None, b.call_index if b else None, status)
            for a, b, status in pairs]


def test_calls_pair_by_tool_and_arguments_whatever_their_order_and_spacing() -> None:
    a = [call(0, "w", '{"city": "Paris"}'), call(1, "w", '{"city": "Oslo"}')]
    b = [call(0, "w", '{"city":"Oslo"}'), call(1, "w", '{ "city" : "Paris" }', result="rain")]

    assert shape(align_calls(a, b)) == [(0, 1, "results_differ"), (1, 0, "same")]


def test_repeated_calls_pair_in_order_then_by_tool_then_alone() -> None:
    same = '{"x": 1}'
    a = [call(0, "t", same), call(1, "t", same), call(2, "t", '{"x": 2}'),
         call(3, "u", '{"y": 1}')]
    b = [call(0, "t", same), call(1, "t", '{"x": 3}'), call(2, "t", same),
         call(3, "v", "{}"), call(4, "t", '{"x": 4}')]

    assert shape(align_calls(a, b)) == [
        (0, 0, "same"), (1, 2, "same"),  # the two same calls, in B's order
        (2, 1, "arguments_differ"),  # what is left of tool t, first come
        (3, None, "only_a"),  # no u left in B
        (None, 3, "only_b"), (None, 4, "only_b"),  # B's leftovers, in B's order
    ]


def test_an_error_flag_alone_makes_results_differ() -> None:
    a = [call(0, "t", "{}", result="boom", is_error=False)]
    b = [call(0, "t", "{}", result="boom", is_error=True)]
    assert shape(align_calls(a, b)) == [(0, 0, "results_differ")]


def test_text_that_is_not_json_compares_as_it_is() -> None:
    a = [call(0, "t", "not json"), call(1, "t", "{broken")]
    b = [call(0, "t", "{broken"), call(1, "t", "not json ")]
    assert shape(align_calls(a, b)) == [(1, 0, "same"), (0, 1, "arguments_differ")]


def test_a_thousand_calls_align_in_one_pass() -> None:
    """Every call differs in a round of 1,000: the old alignment compared each with
    every other (a million key computations); one pass pairs them by tool."""
    a = [call(i, "t", f'{{"i": {i}}}') for i in range(1000)]
    b = [call(i, "t", f'{{"i": {i + 5000}}}') for i in range(1000)]
    pairs = align_calls(a, b)
    assert [(x.call_index, y.call_index) for x, y, _ in pairs if x and y] == \
        [(i, i) for i in range(1000)]
    assert {status for _, _, status in pairs} == {"arguments_differ"}


RUN_ID = "6b0cbd1c-7b47-4a38-93ea-1a2f0e2d2f41"


def test_lineage_and_replay_modes_come_from_the_stored_sections() -> None:
    replaying = {"rerun": {"of": RUN_ID, "mode": "as_it_was",
                           "replay": {"model": "recorded", "tools": "mock",
                                      "on_divergence": "live"}},
                 "replay": {"model": "recorded", "tools": "mock", "rounds": [{}] * 3}}
    assert lineage(replaying) == {"kind": "replay", "of": RUN_ID,
                                  "text": "a replaying rerun (as it was)"}
    assert replay_modes(replaying) == {"model": "recorded", "tools": "mock",
                                       "on_divergence": "live"}
    fork = {"rerun": {"of": RUN_ID, "fork_round": 2}, "fork": {"of": RUN_ID, "round": 2}}
    assert lineage(fork)["text"] == "a fork at round 2"
    assert replay_modes(fork) is None
    spliced = {"rerun": {"of": RUN_ID, "fork_round": 3},
               "splice": {"of": RUN_ID, "round": 2, "tool": "calc"}}
    assert lineage(spliced) == {"kind": "splice", "of": RUN_ID, "text": (
        "a splice of a re-executed result (round 2, calc)")}
    # a fork of that splice keeps the splice section, which names its grandparent
    other = "0c1d2e3f-0000-4000-8000-000000000000"
    forked_splice = {"rerun": {"of": other, "fork_round": 1}, "splice": spliced["splice"]}
    assert lineage(forked_splice) == {"kind": "fork", "of": other,
                                      "text": "a fork at round 1"}
    live = {"rerun": {"of": RUN_ID, "replay": {"model": "live", "tools": "live"}}}
    assert (lineage(live)["kind"], replay_modes(live)) == ("rerun", None)
    assert lineage({"tryit": {"tool": "calc"}}) == {
        "kind": "tryit", "of": None, "text": "a try-it run of calc"}
    # an id that is no run id (a replayed file's name) links nowhere
    assert lineage({"replay": {"model": "recorded", "source": "fixture.json"}})["of"] is None
    assert lineage({}) == {"kind": "run", "of": None, "text": "started directly"}


# The kinds compare names, against the badges the runs list and the run page show.
LINEAGE_CASES = [
    {}, {"rerun": {"of": RUN_ID, "mode": "current"}},
    {"rerun": {"of": RUN_ID, "replay": {"model": "recorded", "tools": "live"}}},
    {"rerun": {"of": RUN_ID, "replay": {"model": "live", "tools": "live"}}},
    {"rerun": {"of": RUN_ID, "fork_round": 2}, "fork": {"of": RUN_ID, "round": 2}},
    {"rerun": {"of": RUN_ID, "fork_round": 3}, "splice": {"of": RUN_ID, "round": 2}},
    {"rerun": {"of": RUN_ID, "fork_round": 2}, "splice": {"of": "grandparent"}},
    {"rerun": {"of": RUN_ID}, "imported": {"from": "abc"}},
    {"rerun": {"of": RUN_ID, "replay": {"tools": "mock"}}, "tryit": {"tool": "t"}},
    {"imported": {"from": "abc", "imported_by": "ann"}}, {"tryit": {"tool": "calc"}},
    {"replay": {"model": "recorded", "source": RUN_ID}},
    {"rerun": "not a section", "tryit": ["nor this"]},
]


@pytest.mark.parametrize("stored", LINEAGE_CASES)
def test_compare_names_the_kind_of_the_runs_first_lineage_badge(stored: Any) -> None:
    badges = [badge.kind for badge in lineage_marks.badges(stored)]
    assert lineage(stored)["kind"] == (badges[0] if badges else "run")


def test_the_relation_of_two_runs() -> None:
    def summary(run_id: str, parent: str | None, stored: dict[str, object]) -> dict[str, object]:
        return {"id": run_id, "parent": parent, "lineage": lineage(stored)}

    parent = summary(RUN_ID, None, {})
    child = summary("c", RUN_ID, {"rerun": {"of": RUN_ID, "mode": "current"}})
    sibling = summary("s", RUN_ID, {"rerun": {"of": RUN_ID}})
    assert relation(parent, child) == {
        "kind": "child",
        "text": "B is a rerun (with the configuration of its day) of A."}
    assert relation(child, parent)["kind"] == "parent"
    assert relation(child, sibling) == {"kind": "siblings",
                                        "text": "A and B came from the same run."}
    assert relation(parent, summary("x", None, {}))["kind"] == "none"
