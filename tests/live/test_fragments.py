"""The timeline fragments: the same partials as the page, idempotent, and always escaped.

render_updates re-renders the header and each touched round from the current database
state, so applying every batch of a run to its first page gives a fresh render of the
final page, and applying a batch twice changes nothing. Everything that came from a
tool, a model or a user is escaped and sits inside an hx-disable region.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.contrib.auth.models import AbstractUser
from django.template.loader import render_to_string
from django.test import Client

from tests.web.support import (
    AXIS_RE,
    FORK_FORM_RE,
    HEADER_RE,
    LANE_RE,
    LANES_RE,
    OOB_TRUE,
    PAYLOAD,
    ROUND_RE,
    SEQ_RE,
    STATIC_SCRIPTS,
    Timeline,
    Tree,
    assert_inert,
    inside_hx_disable,
)
from tests.web.support import start_run as _start_run
from tools_app.live.fragments import render_updates
from tools_app.models import (
    ErrorPolicy,
    ModelEndpoint,
    Round,
    Run,
    RunEvent,
    ToolCall,
    ToolRegistration,
)
from tools_app.runs.store.selectors import EventMark, event_marks_after, events_after
from tools_app.runs.worker import recorder
from tools_app.runs.worker.runner import execute_run

pytestmark = pytest.mark.django_db


def marks(events: list[RunEvent]) -> list[EventMark]:
    return [EventMark(e.seq, e.payload.get("round_index"), e.kind, e.payload.get("call_id"))
            for e in events]


def page_of(client: Client, run: Run) -> str:
    response = client.get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def finished(run: Run) -> Run:
    async_to_sync(execute_run)(str(run.pk))
    run.refresh_from_db()
    return run


@pytest.fixture
def live_batches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What one live viewer is sent: a batch per notification, read by seq (like the
    consumer does), collected while the run executes."""
    batches: list[str] = []
    sent = {"seq": 0}

    def batch(run_id: str) -> None:
        events = events_after(run_id, sent["seq"])
        if events:
            batches.append(render_updates(run_id, marks(events)))
            sent["seq"] = events[-1].seq

    async def notify(run_id: str, message: dict[str, Any]) -> None:
        if "seq" in message:
            await sync_to_async(batch)(run_id)

    monkeypatch.setattr(recorder, "notify", notify)
    monkeypatch.setattr("tools_app.runs.worker.runner.notify", notify)
    return batches


# -- the fragments are the page's partials ---------------------------------------------


def test_a_batch_holds_the_same_header_and_rounds_as_a_fresh_page(
    bob: AbstractUser, bob_client: Client, weather_endpoint: ModelEndpoint,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    run = finished(_start_run(bob, weather_endpoint, [demo_tools["get_weather"]], policy))
    page = page_of(bob_client, run)

    batch = render_updates(run.pk, event_marks_after(run.pk, 0))

    header = HEADER_RE.search(batch)
    assert header is not None
    assert header.group(0).replace(OOB_TRUE, "", 1) == HEADER_RE.findall(page)[0]
    page_rounds = {m.group(1): m.group(0) for m in ROUND_RE.finditer(page)}
    batch_rounds = {m.group(1): m.group(0) for m in ROUND_RE.finditer(batch)}
    assert list(batch_rounds) == ["round-0", "round-1"]
    assert batch_rounds == page_rounds
    assert SEQ_RE.findall(batch)[0].replace(OOB_TRUE, "", 1) == SEQ_RE.findall(page)[0]
    assert f'data-seq="{run.last_seq}"' in SEQ_RE.findall(page)[0]


def test_the_rounds_are_appended_to_the_rounds_container_out_of_band(
    bob: AbstractUser, weather_endpoint: ModelEndpoint,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    run = finished(_start_run(bob, weather_endpoint, [demo_tools["get_weather"]], policy))
    tree = Tree(render_updates(run.pk, event_marks_after(run.pk, 0)))

    top = [e for e in tree.elements if e.parent is None]
    assert [(e.tag, e.attrs.get("id"), e.attrs.get("hx-swap-oob")) for e in top] == [
        ("section", "run-header", "true"),
        ("div", "fork-from-round", "true"),  # rounds started: the fork form needs them
        ("div", None, "beforeend:#rounds"),
        ("div", None, "beforeend:#rounds"),
        ("span", "run-seq", "true"),
    ]
    rounds = [e for e in tree.elements if e.parent in top[2:4]]
    assert [(e.attrs["id"], "data-upsert" in e.attrs) for e in rounds] == [
        ("round-0", True), ("round-1", True)]


def test_live_batches_applied_to_the_first_page_give_the_final_page(
    bob: AbstractUser, bob_client: Client, weather_endpoint: ModelEndpoint,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy, live_batches: list[str],
) -> None:
    run = _start_run(bob, weather_endpoint, [demo_tools["get_weather"]], policy)
    timeline = Timeline(page_of(bob_client, run))
    assert timeline.rounds == {}
    assert 'id="fork-form"' not in timeline.fork_form  # no round to fork from yet

    run = finished(run)
    # One per commit: at least the run's first events and its end (written with the
    # final answer), so the timeline goes through a state in between.
    assert len(live_batches) >= 2
    for batch in live_batches:
        timeline.apply(batch)

    assert timeline.state() == Timeline(page_of(bob_client, run)).state()
    assert 'max="2"' in timeline.fork_form  # came live, with the rounds


def test_the_fork_form_comes_only_with_a_batch_that_starts_a_round(
    bob: AbstractUser, weather_endpoint: ModelEndpoint,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    """A person may be typing in it while the run goes on: only a new round changes it."""
    run = finished(_start_run(bob, weather_endpoint, [demo_tools["get_weather"]], policy))
    events = event_marks_after(run.pk, 0)
    starts = [e for e in events if e.kind == "round_started"]
    rest = [e for e in events if e.kind != "round_started"]
    assert starts
    assert rest

    assert FORK_FORM_RE.findall(render_updates(run.pk, starts))
    assert FORK_FORM_RE.findall(render_updates(run.pk, rest)) == []


def test_lane_only_batches_applied_to_the_first_page_give_the_final_page(
    bob: AbstractUser, bob_client: Client, make_endpoint: Any,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy, live_batches: list[str],
) -> None:
    """calculator is not idempotent: its calls' starts are committed before they run, so
    their results come in a later batch, which carries round 0's lanes but not the round."""
    endpoint = make_endpoint([
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": e}}
                        for e in ("2 + 3", "6 * 7")]},
        {"text": "done"}], name="sums")
    run = _start_run(bob, endpoint, [demo_tools["calculator"]], policy)
    timeline = Timeline(page_of(bob_client, run))

    run = finished(run)
    lane_only = [batch for batch in live_batches if LANES_RE.search(ROUND_RE.sub("", batch))]
    assert lane_only
    assert all('id="round-0"' not in batch and 'id="round-0-axis"' in batch
               for batch in lane_only)
    for batch in live_batches:
        timeline.apply(batch)

    assert timeline.state() == Timeline(page_of(bob_client, run)).state()


def test_applying_batches_twice_changes_nothing(
    bob: AbstractUser, bob_client: Client, weather_endpoint: ModelEndpoint,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy, live_batches: list[str],
) -> None:
    run = _start_run(bob, weather_endpoint, [demo_tools["get_weather"]], policy)
    first_page = page_of(bob_client, run)
    run = finished(run)
    once, twice = Timeline(first_page), Timeline(first_page)
    for batch in live_batches:
        once.apply(batch)
        twice.apply(batch)
        twice.apply(batch)
    # and a late duplicate of every batch (a replay after a reconnect) on top
    for batch in live_batches:
        twice.apply(batch)
    twice.apply(live_batches[-1])

    assert once.state() == twice.state()
    assert [rid for rid, _ in twice.state()[1]] == ["round-0", "round-1"]


def test_the_same_events_render_the_same_markup(
    bob: AbstractUser, weather_endpoint: ModelEndpoint,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    run = finished(_start_run(bob, weather_endpoint, [demo_tools["get_weather"]], policy))
    events = events_after(run.pk, 0)
    first, second = render_updates(run.pk, marks(events)), render_updates(run.pk, marks(events))
    assert first == second
    ids = Tree(first).ids()
    assert len(ids) == len(set(ids)), "a DOM id appears twice in one batch"


def test_a_batch_renders_only_the_rounds_its_events_touched(
    bob: AbstractUser, weather_endpoint: ModelEndpoint,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    run = finished(_start_run(bob, weather_endpoint, [demo_tools["get_weather"]], policy))
    events = events_after(run.pk, 0)
    status_only = [e for e in events if e.kind == "run_status"][:-1]
    final_status = [e for e in events if e.kind == "run_status"][-1:]
    round_one = [e for e in events if e.payload.get("round_index") == 1
                 and e.kind != "run_status"]

    assert set(ROUND_RE.findall(render_updates(run.pk, marks(status_only)))) == set()
    # The run's end re-renders its last round: the final answer moves to the header.
    assert set(ROUND_RE.findall(render_updates(run.pk, marks(final_status)))) == {"round-1"}
    assert set(ROUND_RE.findall(render_updates(run.pk, marks(round_one)))) == {"round-1"}
    assert f'data-seq="{round_one[-1].seq}"' in render_updates(run.pk, marks(round_one))


def test_calls_progress_renders_their_lanes_and_the_rounds_axis_not_the_round(
    bob: AbstractUser, make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy,
) -> None:
    """A batch whose only news of a round is that calls started or finished: those
    lanes (upserted into the round's lanes) and the round's axis (replaced by id), the
    same markup as in the page's round; the round's model call is not rendered again."""
    weather = demo_tools["get_weather"]
    endpoint = make_endpoint([
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": c}}
                        for c in ("Paris", "Oslo", "Rome")]},
        {"text": "done"}], name="three")
    run = finished(_start_run(bob, endpoint, [weather], policy))
    events = events_after(run.pk, 0)
    finishes = [e for e in events if e.kind == "tool_call_finished"][:2]
    page_round = ROUND_RE.search(render_updates(run.pk, marks(events))).group(0)  # type: ignore[union-attr]

    batch = render_updates(run.pk, marks(finishes))

    assert ROUND_RE.findall(batch) == []
    [axis] = AXIS_RE.findall(batch)
    assert axis[0] == "round-0-axis"
    lanes = LANES_RE.findall(batch)
    assert [index for index, _ in lanes] == ["0"]
    sent = {m.group(1): m.group(0) for m in LANE_RE.finditer(lanes[0][1])}
    calls = dict(ToolCall.objects.filter(run=run).values_list("call_id", "pk"))
    assert set(sent) == {f"call-{calls[e.payload['call_id']]}" for e in finishes}
    in_round = {m.group(1): m.group(0) for m in LANE_RE.finditer(page_round)}
    assert all(sent[dom_id] == in_round[dom_id] for dom_id in sent)
    lone_axis = AXIS_RE.search(batch).group(0)  # type: ignore[union-attr]
    assert lone_axis.replace(OOB_TRUE, "", 1) == AXIS_RE.search(page_round).group(0)  # type: ignore[union-attr]
    assert f'data-seq="{finishes[-1].seq}"' in batch
    # Any other event of the round (here its model response) renders it whole.
    response = [e for e in events if e.kind == "model_response_received"][:1]
    assert ROUND_RE.findall(render_updates(run.pk, marks(finishes + response))) == ["round-0"]
    # So does a call id no stored call has (an event keeps the id the provider sent; the
    # row keeps it cut to its column): its lane could not be found.
    long_id = EventMark(finishes[-1].seq, 0, "tool_call_finished", "c" * 300)
    unmatched = render_updates(run.pk, [*marks(finishes), long_id])
    assert ROUND_RE.findall(unmatched) == ["round-0"]
    assert not LANES_RE.search(ROUND_RE.sub("", unmatched))


def test_a_round_with_one_started_call_has_a_hidden_axis_for_later_batches(
    bob: AbstractUser, make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy,
) -> None:
    """Below two started calls a round shows no axis, but its element is there (hidden),
    so a lane-only batch can replace it by id when the second call starts."""
    endpoint = make_endpoint([
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
        {"text": "done"}], name="one")
    run = finished(_start_run(bob, endpoint, [demo_tools["get_weather"]], policy))
    tree = Tree(render_updates(run.pk, event_marks_after(run.pk, 0)))
    axis = tree.by_id("round-0-axis")
    assert axis is not None
    assert "hidden" in axis.attrs
    assert not [e for e in tree.elements if e.parent is axis]


@pytest.mark.both
def test_event_marks_are_the_seqs_and_rounds_of_the_stored_events(
    bob: AbstractUser, weather_endpoint: ModelEndpoint,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    run = finished(_start_run(bob, weather_endpoint, [demo_tools["get_weather"]], policy))
    events = events_after(run.pk, 0)
    assert {type(e.payload.get("round_index")) for e in events} == {int, type(None)}
    assert event_marks_after(run.pk, 0) == marks(events)
    assert event_marks_after(run.pk, 3, limit=2) == marks(events[3:5])


def test_a_requested_round_has_the_stream_targets_inside_hx_disable(
    bob: AbstractUser, weather_endpoint: ModelEndpoint,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    """Streamed pieces are appended to #round-N-stream / -stext: both must be inert."""
    run = _start_run(bob, weather_endpoint, [demo_tools["get_weather"]], policy)
    Round.objects.create(run=run, index=0, status="requested")
    event = RunEvent(run=run, seq=run.last_seq, kind="round_started", payload={"round_index": 0})
    tree = Tree(render_updates(run.pk, marks([event])))
    assert inside_hx_disable(tree.by_id("round-0-stream"))
    assert inside_hx_disable(tree.by_id("round-0-stext"))
    Round.objects.filter(run=run, index=0).update(status="responded")
    assert "round-0-stream" not in render_updates(run.pk, marks([event]))


# -- untrusted text is escaped, and inert for htmx -------------------------------------

@pytest.fixture
def hostile_runs(
    bob: AbstractUser, make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy,
) -> list[Run]:
    """Two executed runs whose every stored text carries PAYLOAD."""
    tools = [demo_tools[n] for n in ("get_weather", "always_fails")]
    telling = ErrorPolicy.objects.create(name="tell", hallucinated_tool="tell_model")
    chatty = make_endpoint([
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": PAYLOAD}},
                        {"name": "always_fails", "arguments": {"reason": PAYLOAD}},
                        {"name": PAYLOAD, "arguments": {"q": PAYLOAD}}]},
        {"text": f"Model says {PAYLOAD}\n{{last_results}}"},
    ], name="chatty")
    ok = finished(_start_run(bob, chatty, tools, telling, text=PAYLOAD))
    assert ok.status == "succeeded"
    failing = make_endpoint([{"tool_calls": [{"name": PAYLOAD, "arguments": "{\"a\": 1"}]}],
                            name="failing")
    failed = finished(_start_run(bob, failing, tools, policy, text=PAYLOAD))
    assert failed.status == "failed"
    assert "alert(" in failed.error_message
    # What no scripted run stores: thinking, failed provider attempts, wire JSON,
    # validation details.
    Round.objects.filter(run=ok, index=0).update(
        thinking=PAYLOAD,
        attempts=[{"attempt": 1, "status": 500, "error": PAYLOAD, "wait_s": 0.5}],
        request_json={"messages": [{"content": PAYLOAD}]}, response_json={PAYLOAD: PAYLOAD},
    )
    ToolCall.objects.filter(run=ok, tool_name="get_weather").update(
        error_type="ToolArgumentsError", error_message=PAYLOAD, traceback=PAYLOAD,
        handled_by=PAYLOAD, error_details=[{"loc": [PAYLOAD], "msg": PAYLOAD}],
    )
    return [ok, failed]


def test_the_page_shows_hostile_values_escaped_and_inert(
    bob_client: Client, hostile_runs: list[Run],
) -> None:
    for run in hostile_runs:
        html = page_of(bob_client, run)
        assert_inert(html, scripts=STATIC_SCRIPTS)
        assert "{{ request.user }}" in Tree(html).texts_containing("{{ request.user }}")[0][0]
        assert "bob{%" not in html  # the template syntax was not evaluated


def test_the_fragments_show_hostile_values_escaped_and_inert(hostile_runs: list[Run]) -> None:
    for run in hostile_runs:
        html = render_updates(run.pk, event_marks_after(run.pk, 0))
        assert_inert(html, scripts=0)
        assert "csrfmiddlewaretoken" not in html
    progress = [m for m in event_marks_after(hostile_runs[0].pk, 0)
                if m.kind in ("tool_call_started", "tool_call_finished")]
    lanes_only = render_updates(hostile_runs[0].pk, progress)
    assert not ROUND_RE.search(lanes_only)
    sent = [lane for _, lanes in LANES_RE.findall(lanes_only) for lane in LANE_RE.findall(lanes)]
    assert len(sent) == len({m.call_id for m in progress})
    assert_inert(lanes_only, scripts=0)
    assert any(m in lanes_only for m in ("alert(", "&lt;script"))  # the payload is there


def test_the_wire_panel_shows_hostile_bodies_escaped_and_inert(
    bob_client: Client, hostile_runs: list[Run],
) -> None:
    """A round's wire bodies are not in the page or its live batches (loaded when their
    panel is opened): the panel is untrusted text like the rest."""
    ok = hostile_runs[0]
    for html in (page_of(bob_client, ok), render_updates(ok.pk, event_marks_after(ok.pk, 0))):
        assert "&quot;messages&quot;" not in html  # the request body
        assert f'hx-get="/runs/{ok.pk}/rounds/0/wire/"' in html  # its panel, to open
    panel = bob_client.get(f"/runs/{ok.pk}/rounds/0/wire/").content.decode()
    assert "&quot;messages&quot;" in panel
    assert_inert(panel, scripts=0)


def test_every_hostile_field_reaches_the_page(
    bob_client: Client, hostile_runs: list[Run],
) -> None:
    """The inertness checks above are only worth something if the values are shown."""
    ok, failed = hostile_runs
    texts = " ".join(t for t, _ in Tree(page_of(bob_client, ok)).texts)
    escaped = PAYLOAD  # the parser decodes entities: the text equals the raw payload
    assert texts.count(escaped) >= 10
    assert "No weather data for" in texts  # tool output
    assert "Model says" in texts  # model text
    assert "not one of the tools offered" in texts  # hallucinated tool name, told to the model
    assert "Traceback" in texts
    failed_texts = " ".join(t for t, _ in Tree(page_of(bob_client, failed)).texts)
    assert escaped in failed_texts


def test_a_stream_fragment_is_escaped() -> None:
    html = render_to_string("tools_app/_stream.html", {
        "kind": "call_start", "round_index": 0, "index": 0, "name": PAYLOAD})
    assert "<script" not in html
    assert "<img" not in html
    assert not re.search(r"<a\b", html)
