"""What a fork's (or a splice's) run page says of each message it starts from, and the
titles of runs: a run's last user message, a fork's own request if it has one."""

from __future__ import annotations

from typing import Any

import pytest

from tools_app.engine import AiMessage, SystemMessage, ToolExecutionResultMessage, UserMessage
from tools_app.runs.debugger.fork import conversation_labels
from tools_app.runs.snapshot.frozen import run_title
from tools_app.runs.snapshot.model import ForkSection, SpliceSection

CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": "Add"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
    {"role": "tool", "tool_call_id": "c1", "content": "2"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
    {"role": "tool", "tool_call_id": "c1", "content": "5"},
    {"role": "user", "content": "Go on"},
]


def fork(**fields: Any) -> ForkSection:
    return ForkSection.model_validate({"of": "x", "round": 3, "inherited": 5,
                                       "inherited_rounds": 2} | fields)


def splice(call_id: str = "c1") -> SpliceSection:
    return SpliceSection(of="x", call=1, call_id=call_id, tool="calculator", round=2,
                         execution=1)


def test_each_message_has_its_mark_and_the_counts_agree() -> None:
    labels = conversation_labels(
        fork(marks=["inherited", "edited", "added", "inherited", "edited"]), None,
        CONVERSATION)

    assert labels.marks == ["inherited", "edited", "added", "inherited", "edited", "added"]
    assert labels.counts == [(2, "inherited unchanged"), (2, "edited in the fork"),
                             (2, "added in the fork")]


def test_a_fork_recorded_without_marks_inherited_its_prefix_unchanged() -> None:
    labels = conversation_labels(fork(), None, CONVERSATION)

    assert labels.marks == ["inherited"] * 5 + ["added"]
    assert labels.counts == [(5, "inherited unchanged"), (1, "added in the fork")]


def test_a_splice_marks_its_spliced_result() -> None:
    marks = ["inherited"] * 4 + ["spliced"]
    labels = conversation_labels(fork(marks=marks), splice(), CONVERSATION[:5])

    assert labels.marks == marks
    assert labels.counts == [(4, "inherited unchanged"), (1, "spliced result")]


def test_a_splice_recorded_without_marks_finds_the_last_answer_to_its_call() -> None:
    """Call ids repeat across rounds (a scripted model's do): the spliced round is the
    last one inherited."""
    labels = conversation_labels(fork(), splice(), CONVERSATION[:5])

    assert labels.marks == ["inherited"] * 4 + ["spliced"]


def test_marks_and_messages_of_different_lengths_still_label_every_message() -> None:
    labels = conversation_labels(fork(inherited=2, marks=["edited", "?", "inherited"]),
                                 None, CONVERSATION[:3])

    assert labels.marks == ["edited", "inherited", "added"]


@pytest.mark.parametrize(("messages", "title"), [
    ([UserMessage(text="Weather in Paris?")], "Weather in Paris?"),
    # A pasted conversation goes on from its latest request.
    ([SystemMessage(text="Be brief."), UserMessage(text="Weather in Paris?"),
      AiMessage(text="18 C."), UserMessage(text="And in\n  Oslo?"),
      ToolExecutionResultMessage(id="c", tool_name="t", text="?")], "And in Oslo?"),
    ([UserMessage(text="x" * 300)], "x" * 197 + "..."),
    ([UserMessage(text="nul\x00here")], "nul\\u0000here"),
    ([SystemMessage(text="no request")], ""),
])
def test_a_runs_title_is_its_last_user_message(messages: list[Any], title: str) -> None:
    assert run_title(messages) == title
