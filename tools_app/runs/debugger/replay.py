"""Replaying a recording: the replay section of a snapshot (`ReplaySection`: which parts
answer from the recording, and the recording's rounds in the run file format), and
replaying a run file in this process (`manage.py replay_fixture`), compared call by call.
snapshot/engine.py builds the recorded model and tool executors from the section
(engine/providers/recorded.py)."""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tools_app.engine import ReplayDivergence
from tools_app.engine.events import ToolCallFinished, ToolCallProposed
from tools_app.engine.providers.recorded import RecordedRound, canonical_arguments
from tools_app.runs.debugger.run_files import RunFixture
from tools_app.runs.snapshot.engine import engine_for_snapshot
from tools_app.runs.snapshot.model import (
    ModelMode,
    OnDivergence,
    ReplaySection,
    RunSnapshot,
    ToolsMode,
)

MODEL_MODES: tuple[ModelMode, ...] = ("recorded", "live")
TOOLS_MODES: tuple[ToolsMode, ...] = ("recorded", "live", "mock")
DIVERGENCE_MODES: tuple[OnDivergence, ...] = ("stop", "live")


def replay_section(rounds: list[RecordedRound], *, model: ModelMode, tools: ToolsMode,
                   on_divergence: OnDivergence, source: str | None) -> ReplaySection:
    return ReplaySection(model=model, tools=tools, on_divergence=on_divergence,
                         source=source, rounds=rounds)


def call_line(round_index: int, call_index: int, name: str, arguments: str,
              text: str | None, is_error: bool) -> str:
    """One call as the comparison reads it: where, what was asked, what came back."""
    outcome = "stopped the run" if text is None else f"{'error' if is_error else 'ok'}: {text}"
    return (f"round {round_index + 1} call {call_index + 1}: {name} "
            f"{canonical_arguments(arguments)} -> {outcome}")


def recorded_lines(fixture: RunFixture) -> list[str]:
    return [call_line(r.index, c.call_index, c.tool_name, c.arguments, c.result_text,
                      c.is_error)
            for r in fixture.rounds for c in sorted(r.calls, key=lambda c: c.call_index)]


@dataclass
class CallCollector:
    """An observer keeping each call's request and outcome, in round and call order."""

    proposed: dict[tuple[int, str], tuple[int, str, str]] = field(default_factory=dict)
    finished: dict[tuple[int, str], tuple[str | None, bool]] = field(default_factory=dict)

    def __call__(self, event: Any) -> None:
        if isinstance(event, ToolCallProposed):
            key = (event.round_index or 0, event.request.id)
            self.proposed[key] = (event.call_index, event.request.name, event.request.arguments)
        elif isinstance(event, ToolCallFinished):
            self.finished[(event.round_index or 0, event.call_id)] = (event.text, event.is_error)

    def lines(self) -> list[str]:
        rows = sorted((key[0], call_index, name, arguments, key)
                      for key, (call_index, name, arguments) in self.proposed.items())
        return [call_line(r, c, name, arguments, *self.finished.get(key, (None, True)))
                for r, c, name, arguments, key in rows]


@dataclass(frozen=True)
class ReplayOutcome:
    matches: bool
    diff: list[str]
    error: str | None
    final_text: str | None


def replay_fixture(fixture: RunFixture, *, model: ModelMode, tools: ToolsMode) -> ReplayOutcome:
    """Replay the fixture here and now (no database, no server) and compare its
    tool-call sequence (names, arguments) and results with the recorded ones."""
    snapshot = fixture.run_snapshot()
    snapshot.replay = replay_section(fixture.recording(), model=model, tools=tools,
                                        on_divergence="stop", source=fixture.run.id)
    engine = engine_for_snapshot(snapshot)
    collector = CallCollector()
    error, final_text = asyncio.run(_chat(engine, snapshot, collector))
    expected, replayed = recorded_lines(fixture), collector.lines()
    diff = list(difflib.unified_diff(expected, replayed, "recorded", "replayed", lineterm=""))
    diverged = error is not None and error.startswith(ReplayDivergence.__name__)
    return ReplayOutcome(matches=not diff and not diverged, diff=diff, error=error,
                         final_text=final_text)


async def _chat(engine: Any, snapshot: RunSnapshot,
                collector: CallCollector) -> tuple[str | None, str | None]:
    try:
        result = await engine.service.chat(
            engine.model, snapshot.chat_messages(), snapshot.request_parameters(),
            observers=[collector])
    except Exception as exc:  # the replay's own failure is part of its report
        return f"{type(exc).__name__}: {exc}", None
    finally:
        close = getattr(engine.model, "aclose", None)
        if close is not None:
            await close()
    return None, result.final_response.ai_message.text


def describe(outcome: ReplayOutcome, modes: Sequence[str]) -> str:
    """The replay's report, as the command prints it."""
    lines = [f"replay ({', '.join(modes)}): "
             + ("matches the recording" if outcome.matches else "DIVERGES from the recording")]
    if outcome.error:
        lines.append(f"the replay stopped: {outcome.error}")
    lines.extend(outcome.diff)
    return "\n".join(lines)
