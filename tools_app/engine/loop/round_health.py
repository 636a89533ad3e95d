"""Loop health inside the loop: the detectors of health.py applied to each round.

Before a round's calls run, `RoundHealth.check` asks the detectors about them: the
findings are reported as `LoopDetected` events, a "stop" finding raises
errors.LoopDetectedError, and the notes meant for the model are kept so the calls'
results carry them (`noted`). After the round, `record` gives the watch the calls with
their results.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..events import Emitter, LoopDetected
from ..messages import ChatMessage, ToolExecutionRequest, ToolExecutionResultMessage
from .health import LoopFinding, LoopHealth, LoopWatch, round_notes, stop_error, with_note


class RoundHealth:
    """The loop-health state of one chat() call (ChatRun keeps one)."""

    def __init__(self, health: LoopHealth | None, messages: list[ChatMessage]) -> None:
        # The conversation so far counts: a resumed or forked chat's earlier rounds too.
        self.watch = (LoopWatch(health, messages)
                      if health is not None and health.active else None)
        # Call id -> the loop-health note appended to its result, for the current round.
        self.notes: dict[str, str] = {}

    async def check(self, requests: Sequence[ToolExecutionRequest], round_index: int, *,
                    emit: Emitter | None, report: bool) -> None:
        """The detectors on this round's calls, before any runs: findings are reported
        (through `emit`, when someone observes), a "stop" raises LoopDetectedError, and
        the notes for the model are kept for the calls' results."""
        self.notes = {}
        if self.watch is None:
            return
        findings = self.watch.check(requests)
        stop = next((f for f in findings if f.action == "stop"), None)
        if emit is not None and (report or stop is not None):
            for finding in findings:
                await emit(loop_event(finding, round_index))
        if stop is not None:
            raise stop_error(stop, round_index)
        self.notes = round_notes(findings)

    def noted(self, request: ToolExecutionRequest, text: str) -> str:
        """A call's result text with the loop-health note for it, if it has one."""
        return with_note(text, self.notes.get(request.id))

    def record(self, requests: Sequence[ToolExecutionRequest],
               results: Sequence[ToolExecutionResultMessage]) -> None:
        """The round's calls with their results, for the next rounds' checks."""
        if self.watch is not None:
            self.watch.record(requests, results)


def loop_event(finding: LoopFinding, round_index: int) -> LoopDetected:
    """The event a finding is reported with."""
    return LoopDetected(
        round_index=round_index, detector=finding.detector, action=finding.action,
        count=finding.count, threshold=finding.threshold,
        call_ids=list(finding.call_ids), tool_names=list(finding.tool_names),
        detail=finding.detail, told=finding.note, told_call_id=finding.told_call_id)
