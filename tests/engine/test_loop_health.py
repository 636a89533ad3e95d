"""Loop health (engine/loop/health.py): repeated identical calls, ping-pong between two
sets of calls and no progress, each with its thresholds and its three actions (a note
in the record, a note told to the model in a result's text, stopping the run); and
nothing flagged for calls that differ, under the thresholds, or without a policy."""

from typing import Any

import pytest

from tools_app.engine import (
    AiMessage,
    ChatResponse,
    FinishReason,
    LoopDetectedError,
    LoopHealth,
    LoopRule,
    ResumeState,
    ScriptedChatModel,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolService,
    tell_model_available_tools,
    tool,
)
from tools_app.engine.loop.health import (
    NOTE_MARK,
    LoopWatch,
    with_note,
    without_note,
)

from .support import EventLog, RecordingModel, call, calls, final, scripted, user


class Tools:
    def __init__(self) -> None:
        self.ran: list[str] = []

    @tool
    def get_weather(self, city: str) -> str:
        self.ran.append(f"get_weather {city}")
        return f"Sunny in {city}"

    @tool
    def search(self, query: str) -> str:
        self.ran.append(f"search {query}")
        return "No results"

    @tool
    def open_page(self, url: str) -> str:
        self.ran.append(f"open_page {url}")
        return f"Page {url}"


def service(tools: Tools, **rules: LoopRule) -> ToolService:
    return ToolService(loop_health=LoopHealth(**rules)).tools(tools)


def weather(city: str = "Paris") -> Any:
    return calls(call("get_weather", {"city": city}))


async def chat(tools: Tools, model: RecordingModel, **rules: LoopRule) -> EventLog:
    log = EventLog()
    await service(tools, **rules).chat(model, [user()], observers=[log])
    return log


def results_seen(model: RecordingModel) -> list[str]:
    """The text of each tool result as the model read it, in order (the last request
    holds them all)."""
    return [m.text for m in model.tool_results(model.calls - 1)]


def flagged(log: EventLog) -> list[tuple[int, str, str, int]]:
    return [(e.round_index, e.detector, e.action, e.count)
            for e in log.of_kind("loop_detected")]


# -- repeated identical calls ----------------------------------------------------------

REPEAT = LoopRule(at=3, action="tell_model", stop_at=5)


async def test_the_third_identical_call_tells_the_model_and_the_fifth_stops_the_run() -> None:
    tools = Tools()
    model = scripted(*[weather()] * 6, final())
    log = EventLog()

    with pytest.raises(LoopDetectedError) as stopped:
        await service(tools, repeated_call=REPEAT).chat(model, [user()], observers=[log])

    assert flagged(log) == [(2, "repeated_call", "tell_model", 3),
                            (3, "repeated_call", "tell_model", 4),
                            (4, "repeated_call", "stop", 5)]
    # The fifth call never ran: the run stopped before its round's calls.
    assert tools.ran == ["get_weather Paris"] * 4
    seen = results_seen(model)
    assert seen[:2] == ["Sunny in Paris"] * 2
    assert seen[2] == with_note("Sunny in Paris", log.of_kind("loop_detected")[0].told)
    assert seen[2].startswith("Sunny in Paris" + NOTE_MARK + "This is call 3 of get_weather "
                              "with these same arguments")
    assert "use the results you already have" in seen[2]
    assert "This is call 4 of get_weather" in seen[3]
    assert stopped.value.detector == "repeated_call"
    assert stopped.value.count == 5
    assert stopped.value.round_index == 4
    assert str(stopped.value) == ("Loop detected in round 5: call 5 of get_weather with the "
                                  "same arguments (the policy stops the run at 5)")
    [failed] = log.of_kind("chat_failed")
    assert failed.error_type == "LoopDetectedError"
    assert "tool_call_proposed" not in [e.kind for e in log.events
                                        if e.round_index == 4]


async def test_a_note_only_flags_the_round_and_changes_nothing_the_model_reads() -> None:
    tools = Tools()
    model = scripted(*[weather()] * 4, final())

    log = await chat(tools, model, repeated_call=LoopRule(at=3, action="note"))

    assert flagged(log) == [(2, "repeated_call", "note", 3), (3, "repeated_call", "note", 4)]
    assert all(e.told is None for e in log.of_kind("loop_detected"))
    assert results_seen(model) == ["Sunny in Paris"] * 4
    assert log.of_kind("chat_finished")


async def test_the_stop_action_stops_at_the_threshold_itself() -> None:
    tools = Tools()
    model = scripted(*[weather()] * 4, final())

    with pytest.raises(LoopDetectedError, match="call 3 of get_weather"):
        await chat(tools, model, repeated_call=LoopRule(at=3, action="stop"))
    assert len(tools.ran) == 2


async def test_identical_calls_in_one_round_count_and_the_last_one_is_told() -> None:
    tools = Tools()
    model = scripted(calls(*[call("get_weather", {"city": "Paris"})] * 3), final())

    log = await chat(tools, model, repeated_call=REPEAT)

    [event] = log.of_kind("loop_detected")
    assert (event.count, event.call_ids, event.told_call_id) == (
        3, ["call_0_0", "call_0_1", "call_0_2"], "call_0_2")
    seen = results_seen(model)
    assert seen[:2] == ["Sunny in Paris"] * 2
    assert NOTE_MARK in seen[2]


async def test_arguments_compare_as_json_values() -> None:
    """Key order and spacing do not make a call different (the replay's comparison)."""
    tools = Tools()
    model = scripted(calls(call("get_weather", '{"city": "Paris"}')),
                     calls(call("get_weather", '{ "city":"Paris" }')),
                     calls(call("get_weather", '{"city":"Paris"}')), final())

    log = await chat(tools, model, repeated_call=REPEAT)

    assert flagged(log) == [(2, "repeated_call", "tell_model", 3)]


async def test_repeated_calls_with_different_arguments_are_not_flagged() -> None:
    tools = Tools()
    model = scripted(*[weather(f"city {n}") for n in range(8)], final())

    log = await chat(tools, model, repeated_call=REPEAT,
                     ping_pong=LoopRule(at=3, stop_at=4),
                     no_progress=LoopRule(at=2, stop_at=3))

    assert flagged(log) == []
    assert all(NOTE_MARK not in text for text in results_seen(model))
    assert len(tools.ran) == 8


async def test_a_run_under_the_thresholds_is_not_flagged() -> None:
    tools = Tools()
    model = scripted(weather(), weather(), final())

    log = await chat(tools, model, repeated_call=REPEAT)

    assert flagged(log) == []
    assert results_seen(model) == ["Sunny in Paris"] * 2


async def test_without_a_loop_health_policy_nothing_is_checked() -> None:
    """The seed's loop: only the round-trip cap bounds a model that repeats itself."""
    tools = Tools()
    model = scripted(*[weather()] * 10, final())
    log = EventLog()

    await ToolService().tools(tools).chat(model, [user()], observers=[log])

    assert log.of_kind("loop_detected") == []
    assert len(tools.ran) == 10


async def test_a_repeated_call_to_an_unknown_tool_is_told_in_its_error() -> None:
    model = scripted(*[calls(call("get_wether", {"city": "Paris"}))] * 3, final())
    loop = ToolService(hallucinated_tool_strategy=tell_model_available_tools,
                       loop_health=LoopHealth(repeated_call=REPEAT)).tools(Tools())

    await loop.chat(model, [user()])

    seen = results_seen(model)
    assert seen[2].startswith("Error: tool 'get_wether' is not one of the tools offered")
    assert seen[2].endswith("give your answer.")
    assert "This is call 3 of get_wether" in seen[2]


# -- ping-pong ---------------------------------------------------------------------------

PAGE = calls(call("open_page", {"url": "a"}))
SEARCH = calls(call("search", {"query": "x"}))


async def test_alternating_between_two_calls_is_told_then_stopped() -> None:
    tools = Tools()
    model = scripted(SEARCH, PAGE, SEARCH, PAGE, SEARCH, PAGE, final())
    log = EventLog()

    with pytest.raises(LoopDetectedError, match="6 rounds alternating"):
        await service(tools, ping_pong=LoopRule(at=4, stop_at=6)).chat(
            model, [user()], observers=[log])

    assert flagged(log) == [(3, "ping_pong", "tell_model", 4),
                            (4, "ping_pong", "tell_model", 5),
                            (5, "ping_pong", "stop", 6)]
    first = log.of_kind("loop_detected")[0]
    assert first.detail == ("4 rounds alternating between the same two sets of calls "
                            "(search and open_page)")
    assert first.told_call_id == "call_3_0"
    seen = results_seen(model)
    assert NOTE_MARK not in "".join(seen[:3])
    assert seen[3].startswith("Page a" + NOTE_MARK + "For the last 4 rounds you have "
                              "alternated between the same two sets of calls")
    assert len(tools.ran) == 5


async def test_alternating_calls_whose_arguments_change_are_not_ping_pong() -> None:
    tools = Tools()
    steps = [calls(call("search", {"query": f"q{n}"})) if n % 2 == 0
             else calls(call("open_page", {"url": f"u{n}"})) for n in range(8)]
    model = scripted(*steps, final())

    log = await chat(tools, model, ping_pong=LoopRule(at=4, stop_at=6))

    assert flagged(log) == []


async def test_the_same_round_again_is_not_ping_pong() -> None:
    tools = Tools()
    model = scripted(*[SEARCH] * 5, final())

    log = await chat(tools, model, ping_pong=LoopRule(at=3, stop_at=4))

    assert flagged(log) == []


# -- no progress -------------------------------------------------------------------------


async def test_rounds_that_keep_getting_the_same_results_are_told_then_stopped() -> None:
    """Different searches, the same answer every time."""
    tools = Tools()
    model = scripted(*[calls(call("search", {"query": f"q{n}"})) for n in range(6)], final())
    log = EventLog()

    with pytest.raises(LoopDetectedError, match="the 4 rounds before this one all got the "
                                                "same results"):
        await service(tools, no_progress=LoopRule(at=3, stop_at=4)).chat(
            model, [user()], observers=[log])

    assert flagged(log) == [(3, "no_progress", "tell_model", 3),
                            (4, "no_progress", "stop", 4)]
    seen = results_seen(model)
    assert seen[:3] == ["No results"] * 3
    assert seen[3] == ("No results" + NOTE_MARK + "The last 3 rounds of tool calls all "
                       "returned the same results. If that is expected, go on; otherwise "
                       "more calls like these will not help: change your approach or give "
                       "your answer.")


async def test_a_note_told_to_the_model_does_not_make_results_differ() -> None:
    """The streak compares what the tools answered, not the notes appended to it."""
    tools = Tools()
    model = scripted(*[calls(call("search", {"query": f"q{n}"})) for n in range(6)], final())

    log = await chat(tools, model, no_progress=LoopRule(at=3))

    assert [count for _, _, _, count in flagged(log)] == [3, 4, 5]


async def test_results_that_change_are_progress() -> None:
    tools = Tools()
    model = scripted(*[weather(f"city {n}") for n in range(6)], final())

    log = await chat(tools, model, no_progress=LoopRule(at=2, stop_at=3))

    assert flagged(log) == []


# -- the conversation so far, resumes and replays ----------------------------------------


def past_round(index: int, text: str) -> list[Any]:
    request = ToolExecutionRequest(id=f"old_{index}", name="get_weather",
                                   arguments='{"city": "Paris"}')
    return [AiMessage(tool_execution_requests=(request,)),
            ToolExecutionResultMessage(id=request.id, tool_name="get_weather", text=text)]


async def test_the_rounds_of_the_conversation_so_far_count() -> None:
    """A resumed run (or a fork) goes on from its earlier rounds: the model sees them."""
    tools = Tools()
    history = [user(), *past_round(0, "Sunny in Paris"), *past_round(1, "Sunny in Paris")]
    model = RecordingModel(ScriptedChatModel([weather(), final()], prelude_ai_messages=2))
    log = EventLog()
    loop = service(tools, repeated_call=REPEAT)

    await loop.chat(model, history, observers=[log], resume=ResumeState(
        round_index=2, round_trips_done=2))

    assert flagged(log) == [(2, "repeated_call", "tell_model", 3)]


async def test_a_resumed_round_gets_its_notes_without_reporting_them_again() -> None:
    """A round checked before it paused (its findings recorded then) is not reported
    twice; the calls it runs now still carry the note."""
    tools = Tools()
    history = [user(), *past_round(0, "Sunny in Paris"), *past_round(1, "Sunny in Paris")]
    pending = ChatResponse(
        ai_message=AiMessage(tool_execution_requests=(ToolExecutionRequest(
            id="call_2_0", name="get_weather", arguments='{"city": "Paris"}'),)),
        finish_reason=FinishReason.TOOL_EXECUTION)
    model = ScriptedChatModel([final()], prelude_ai_messages=3)
    log = EventLog()

    await service(tools, repeated_call=REPEAT).chat(
        model, history, observers=[log],
        resume=ResumeState(round_index=2, round_trips_done=2, pending_response=pending))

    assert log.of_kind("loop_detected") == []
    [finished] = log.of_kind("tool_call_finished")
    assert finished.text.startswith("Sunny in Paris" + NOTE_MARK + "This is call 3")


def test_a_note_is_appended_once_and_removed_whole() -> None:
    noted = with_note("Sunny", "Stop repeating.")
    assert noted == "Sunny" + NOTE_MARK + "Stop repeating."
    assert with_note(noted, "Stop repeating.") == noted  # a replayed result keeps one
    assert with_note("Sunny", None) == "Sunny"
    assert without_note(noted) == "Sunny"
    assert without_note("Sunny") == "Sunny"


def test_the_watch_reads_the_results_without_their_notes() -> None:
    history = [user(), *past_round(0, "Same"), *past_round(1, with_note("Same", "n"))]
    watch = LoopWatch(LoopHealth(no_progress=LoopRule(at=2, action="note")), history)
    request = ToolExecutionRequest(id="new", name="get_weather", arguments="{}")

    [finding] = watch.check([request])

    assert (finding.detector, finding.count, finding.note) == ("no_progress", 2, None)


@pytest.mark.parametrize("rule", [
    {"at": 0}, {"stop_at": 0}, {"action": "ignore"},
])
def test_a_rule_refuses_thresholds_below_one_and_unknown_actions(rule: Any) -> None:
    with pytest.raises(ValueError, match=r"at least 1|unknown loop action"):
        LoopRule(**rule)


def test_arguments_too_deeply_nested_to_parse_compare_as_text() -> None:
    raw = "[" * 100_000 + "]" * 100_000
    watch = LoopWatch(LoopHealth(repeated_call=LoopRule(at=2)))
    first = ToolExecutionRequest(id="a", name="t", arguments=raw)
    watch.record([first], [ToolExecutionResultMessage(id="a", tool_name="t", text="x")])

    [finding] = watch.check([ToolExecutionRequest(id="b", name="t", arguments=raw)])

    assert finding.count == 2
