"""The handlers filter's choices for staff come from a loose index scan (one seek per
distinct name): the same names, sorted and each once, as a DISTINCT over every call."""

from __future__ import annotations

import pytest

from tools_app.audit.selectors import handler_names
from tools_app.models import Round, Run, ToolCall

pytestmark = [pytest.mark.django_db, pytest.mark.both]


def test_every_distinct_handler_once_in_order() -> None:
    run = Run.objects.create(title="t", snapshot={})
    round_ = Round.objects.create(run=run, index=0)
    handlers = ["policy_b", "", "policy_a", "policy_b", "zeta", "", "policy_a", "Ärger"]
    ToolCall.objects.bulk_create(
        ToolCall(run=run, round=round_, call_index=i, call_id=f"c{i}", tool_name="t",
                 handled_by=name) for i, name in enumerate(handlers))
    distinct = list(ToolCall.objects.exclude(handled_by="").order_by("handled_by")
                    .values_list("handled_by", flat=True).distinct())
    assert handler_names(ToolCall.objects.all(), every_call=True) == distinct
    assert handler_names(ToolCall.objects.all()) == distinct
    assert set(distinct) == {"policy_a", "policy_b", "zeta", "Ärger"}
    assert len(distinct) == 4


def test_no_handler_at_all() -> None:
    assert handler_names(ToolCall.objects.all(), every_call=True) == []


def test_a_viewer_who_sees_some_calls_gets_the_names_their_calls_used() -> None:
    mine, theirs = (Run.objects.create(title=t, snapshot={}) for t in ("mine", "theirs"))
    for run, names in ((mine, ["policy_a", ""]), (theirs, ["policy_b", "policy_a"])):
        round_ = Round.objects.create(run=run, index=0)
        ToolCall.objects.bulk_create(
            ToolCall(run=run, round=round_, call_index=i, call_id=f"c{i}", tool_name="t",
                     handled_by=name) for i, name in enumerate(names))
    assert handler_names(ToolCall.objects.filter(run=mine)) == ["policy_a"]
    assert handler_names(ToolCall.objects.filter(run=theirs)) == ["policy_a", "policy_b"]
    assert handler_names(ToolCall.objects.all(), every_call=True) == ["policy_a", "policy_b"]
