"""The run page read as a debugger (issue #16): calls never executed, the run's
effective settings, header counts taken from the lanes, one error shown once, the final
answer shown once, the calls on one time axis, and everything untrusted escaped."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.utils import timezone

from tests.web.support import PAYLOAD, STATIC_SCRIPTS, Tree, assert_inert, inside_hx_disable
from tools_app.live.fragments import render_updates
from tools_app.models import ErrorPolicy, Round, Run, ToolCall, ToolRegistration
from tools_app.runs import services
from tools_app.runs.store.selectors import EventMark
from tools_app.runs.worker.runner import execute_run

pytestmark = pytest.mark.django_db


def run_to_end(user: AbstractUser, endpoint: Any, tools: list[ToolRegistration],
               policy: ErrorPolicy, **kwargs: Any) -> Run:
    run = services.run_create(user=user, endpoint=endpoint, tools=tools, policy=policy,
                              messages=services.conversation(user_message="Go"), **kwargs)
    async_to_sync(execute_run)(str(run.pk))
    run.refresh_from_db()
    return run


def page_of(client: Client, run: Run) -> Tree:
    response = client.get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    return Tree(response.content.decode())


def text_of(tree: Tree, element: Any) -> str:
    """The text inside `element`, whitespace-trimmed piece by piece."""
    return " ".join(t.strip() for t, e in tree.texts
                    if e is not None and element in e.ancestors_or_self()).replace(
        "  ", " ")


def lanes(tree: Tree) -> list[Any]:
    return [e for e in tree.elements if e.tag == "article" and "lane" in e.attrs["class"]]


def test_calls_a_capped_run_never_executed_are_shown_as_not_executed(
    bob: AbstractUser, bob_client: Client, make_endpoint: Any,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    script = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]},
              {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+2"}},
                              {"name": "calculator", "arguments": {"expression": PAYLOAD}}]},
              {"text": "never reached"}]
    run = run_to_end(bob, make_endpoint(script), [demo_tools["calculator"]], policy,
                     policy_overrides={"max_round_trips": 1})
    assert run.status == "failed"
    assert ToolCall.objects.filter(run=run).count() == 1  # the second round's never ran

    page = bob_client.get(f"/runs/{run.pk}/").content.decode()
    tree = Tree(page)
    shown = [(e.attrs["id"], e.attrs["data-state"]) for e in lanes(tree)]
    assert shown[1:] == [("round-1-unexecuted-0", "not_executed"),
                         ("round-1-unexecuted-1", "not_executed")]
    assert page.count(">Not executed<") == 2
    assert "2 calls not executed" in page  # on the round's head
    assert "2+2" in page
    assert_inert(page, scripts=STATIC_SCRIPTS)
    header = render_updates(run.pk, [EventMark(run.last_seq, None, "run_status")])
    assert 'data-total="tool_calls">3 ' in header
    assert "(2 not executed)" in header


def test_the_header_shows_the_settings_the_run_actually_used(
    bob: AbstractUser, bob_client: Client, weather_endpoint: Any,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    assert (policy.parallel, policy.max_round_trips) == (True, 100)
    run = run_to_end(bob, weather_endpoint, [demo_tools["get_weather"]], policy,
                     policy_overrides={"parallel": False, "max_round_trips": 3})

    tree = page_of(bob_client, run)
    settings = {e.attrs["data-setting"]: e for e in tree.elements
                if e.attrs.get("data-setting")}
    assert text_of(tree, settings["Parallel calls"]) == "Parallel calls off (this run)"
    assert text_of(tree, settings["Max rounds"]) == "Max rounds 3 (this run)"
    assert "changed" not in (settings["Tool errors"].attrs.get("class") or "")
    # the error modes in the admin's words (the policy's choices), not the stored values
    assert text_of(tree, settings["Tool errors"]) == "Tool errors send a message to the model"
    assert text_of(tree, settings["Arguments errors"]) == "Arguments errors stop the run"
    assert text_of(tree, settings["Unknown tools"]) == "Unknown tools stop the run"


def test_a_call_that_stopped_the_run_shows_its_error_once_and_the_header_links_to_it(
    bob: AbstractUser, bob_client: Client, make_endpoint: Any,
    demo_tools: dict[str, ToolRegistration],
) -> None:
    stopping = ErrorPolicy.objects.create(name="Stop", execution_error="rethrow")
    script = [{"tool_calls": [{"name": "always_fails", "arguments": {"reason": PAYLOAD}}]}]
    run = run_to_end(bob, make_endpoint(script), [demo_tools["always_fails"]], stopping)
    assert run.status == "failed"
    call = ToolCall.objects.get(run=run)

    page = bob_client.get(f"/runs/{run.pk}/").content.decode()
    assert page.count("&lt;script&gt;alert(&quot;s&quot;)") == 2  # its arguments, its error
    tree = Tree(page)
    header = tree.by_id("run-header")
    [link] = [e for e in tree.elements if e.tag == "a" and header in e.ancestors_or_self()
              and e.attrs.get("href") == f"#call-{call.pk}"]
    assert inside_hx_disable(link)
    assert "always_fails in round 1" in text_of(tree, link)
    assert_inert(page, scripts=STATIC_SCRIPTS)


def test_the_final_answer_is_shown_once(
    bob: AbstractUser, bob_client: Client, weather_endpoint: Any,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    run = run_to_end(bob, weather_endpoint, [demo_tools["get_weather"]], policy)
    assert run.final_text

    page = bob_client.get(f"/runs/{run.pk}/").content.decode()
    assert page.count("Here you go:") == 1
    assert 'href="#final-answer"' in page


def test_header_counts_are_the_lanes_shown_while_calls_run(
    bob: AbstractUser, bob_client: Client, weather_endpoint: Any,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    """Mid-run: one call finished with an error, one still running. The run row's
    totals count finished calls only; the header counts what the lanes show."""
    run = services.run_create(user=bob, endpoint=weather_endpoint,
                              tools=[demo_tools["get_weather"]], policy=policy,
                              messages=services.conversation(user_message="Go"))
    round_ = Round.objects.create(run=run, index=0, status="responded")
    now = timezone.now()
    ToolCall.objects.create(run=run, round=round_, call_index=0, call_id="a",
                            tool_name="get_weather", state="execution_error", is_error=True,
                            started_at=now - timedelta(seconds=2),
                            finished_at=now - timedelta(seconds=1), duration_ms=1000)
    ToolCall.objects.create(run=run, round=round_, call_index=1, call_id="b",
                            tool_name="get_weather", state="started",
                            started_at=now - timedelta(seconds=1))
    Run.objects.filter(pk=run.pk).update(status="running", rounds_count=1)
    run.refresh_from_db()

    tree = page_of(bob_client, run)
    totals = {e.attrs["data-total"]: text_of(tree, e) for e in tree.elements
              if e.attrs.get("data-total")}
    assert totals["tool_calls"] == "2 (1 running)"
    assert totals["errors"] == "1"
    assert len(lanes(tree)) == 2
    # The running call's elapsed time is there for the page's script to tick on.
    ticking = [e for e in tree.elements if "data-elapsed-ms" in e.attrs]
    assert len(ticking) == 2  # on the time axis and in its lane
    assert all(int(e.attrs["data-elapsed-ms"] or "0") >= 1000 for e in ticking)


def test_a_rounds_calls_share_one_time_axis(
    bob: AbstractUser, bob_client: Client, weather_endpoint: Any,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    """Bars are placed by their offset from the round's first call on a 0..1000 scale
    whose labels go from 0 to the span."""
    run = services.run_create(user=bob, endpoint=weather_endpoint,
                              tools=[demo_tools["get_weather"]], policy=policy,
                              messages=services.conversation(user_message="Go"))
    round_ = Round.objects.create(run=run, index=0, status="responded")
    origin = timezone.now() - timedelta(seconds=10)
    spans = [(0, 4), (2, 4), (3, 1)]  # seconds: start offset, length
    for n, (start, length) in enumerate(spans):
        ToolCall.objects.create(
            run=run, round=round_, call_index=n, call_id=f"c{n}", tool_name="get_weather",
            state="hallucinated" if n == 2 else "succeeded", is_error=n == 2,
            started_at=origin + timedelta(seconds=start),
            finished_at=origin + timedelta(seconds=start + length),
            duration_ms=length * 1000)
    Run.objects.filter(pk=run.pk).update(status="succeeded", rounds_count=1)
    run.refresh_from_db()

    tree = page_of(bob_client, run)
    [axis] = [e for e in tree.elements if e.attrs.get("id") == "round-0-axis"]
    rows = [e for e in tree.elements if e.parent is axis and "wf-row" in e.attrs["class"]]
    ticks = [e for e in tree.elements if e.parent is not None
             and "wf-ticks" in (e.parent.attrs.get("class") or "")]
    assert [text_of(tree, t) for t in ticks] == ["0 ms", "1.50 s", "3.00 s", "4.50 s",
                                               "6.00 s"]
    bars = [[e for e in tree.elements if e.tag == "rect" and row in e.ancestors_or_self()]
            for row in rows[1:]]
    placed = [(int(b[0].attrs["x"] or 0), int(b[0].attrs["width"] or 0)) for b in bars]
    assert placed == [(0, 666), (333, 666), (500, 166)]
    assert rows[3].attrs["data-state"] == "hallucinated"  # coloured as an error (CSS)
