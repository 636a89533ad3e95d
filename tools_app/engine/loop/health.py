"""Loop health: noticing a model that goes round in circles instead of getting anywhere.

Three detectors look at a round's tool calls before any of them runs, against the rounds
of the conversation before it (a resumed or forked chat's earlier rounds count too: the
model sees them):

- `repeated_call`: the same call (tool and canonical arguments, as a replay compares
  them) made N times, this one included;
- `ping_pong`: the rounds alternate between two sets of calls (A, B, A, B, ...) for M
  rounds, this one included;
- `no_progress`: the K rounds before this one all got the same results (tool, error
  flag and text) and the model calls tools again.

Each detector has a `LoopRule`: from `at` on it flags the round with its action (`note`:
in the record only; `tell_model`: a note is also appended to a call's result text, so
the model reads that it is repeating itself and what to do instead; `stop`), and from
`stop_at` on the run stops (`errors.LoopDetectedError`) before the round's calls run. The
loop (round_health.py) reports each flagged round as a `LoopDetected` event.

A note told to the model is part of the result text the model got, so a stored run's
results carry it, a resumed run sends it again as it was, and a replay that serves the
recorded text gets no second copy (`with_note`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..errors import NAME_CHARS_LIMIT, LoopDetectedError
from ..messages import AiMessage, ChatMessage, ToolExecutionRequest, ToolExecutionResultMessage
from ..providers.recorded import canonical_arguments

Detector = Literal["repeated_call", "ping_pong", "no_progress"]
LoopAction = Literal["note", "tell_model", "stop"]
DETECTORS: tuple[Detector, ...] = ("repeated_call", "ping_pong", "no_progress")

NOTE_MARK = "\n\n[Loop check] "
"""What separates a note told to the model from the result text it is appended to."""

Signature = tuple[str, str]  # (tool name, canonical arguments)
Results = tuple[tuple[str, bool, str], ...]  # (tool name, is_error, text) per call


@dataclass(frozen=True)
class LoopRule:
    """One detector's thresholds: flag with `action` from `at` on, stop the run from
    `stop_at` on (None: never)."""

    at: int | None = None
    action: LoopAction = "tell_model"
    stop_at: int | None = None

    def __post_init__(self) -> None:
        if self.action not in ("note", "tell_model", "stop"):
            raise ValueError(f"unknown loop action {self.action!r}")
        for name in ("at", "stop_at"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1 (or None: never)")

    @property
    def active(self) -> bool:
        return self.at is not None or self.stop_at is not None

    def decide(self, count: int) -> tuple[LoopAction, int] | None:
        """The action for `count` and the threshold it reached, or None below both."""
        if self.stop_at is not None and count >= self.stop_at:
            return "stop", self.stop_at
        if self.at is not None and count >= self.at:
            return self.action, self.at
        return None


@dataclass(frozen=True)
class LoopHealth:
    """The three detectors' rules. The default checks nothing (the seed's loop has only
    its round-trip cap); an error policy supplies the thresholds it wants."""

    repeated_call: LoopRule = field(default_factory=LoopRule)
    ping_pong: LoopRule = field(default_factory=LoopRule)
    no_progress: LoopRule = field(default_factory=LoopRule)

    @property
    def active(self) -> bool:
        return any(getattr(self, name).active for name in DETECTORS)


@dataclass(frozen=True)
class LoopFinding:
    """A detector that flagged a round: how many (identical calls, alternating rounds,
    rounds with the same results), the threshold reached, the round's calls it is about,
    `detail` for people, and `note` for the model (tell_model only), appended to the
    result of `told_call_id`."""

    detector: Detector
    action: LoopAction
    count: int
    threshold: int
    call_ids: tuple[str, ...]
    tool_names: tuple[str, ...]
    detail: str
    note: str | None = None
    told_call_id: str | None = None


def stop_error(finding: LoopFinding, round_index: int) -> LoopDetectedError:
    """The error a "stop" finding ends the run with."""
    return LoopDetectedError(
        f"Loop detected in round {round_index + 1}: {finding.detail} (the policy stops "
        f"the run at {finding.threshold})", detector=finding.detector, count=finding.count,
        round_index=round_index)


def with_note(text: str, note: str | None) -> str:
    """`text` with `note` appended after NOTE_MARK; unchanged if it ends with that note
    already (a replay serving a recorded result that carries it)."""
    if not note:
        return text
    suffix = NOTE_MARK + note
    return text if text.endswith(suffix) else text + suffix


def without_note(text: str) -> str:
    """`text` without a note appended to it (what the tool itself answered)."""
    cut = text.rfind(NOTE_MARK)
    return text if cut < 0 else text[:cut]


class LoopWatch:
    """The rounds of one chat as the detectors need them. `check` a round's calls before
    they run, then `record` them with their results."""

    def __init__(self, health: LoopHealth, history: Sequence[ChatMessage] = ()) -> None:
        self.health = health
        self._calls: Counter[Signature] = Counter()
        self._rounds: list[tuple[Signature, ...]] = []  # each round's calls, sorted
        self._results: list[Results | None] = []
        self._seed(history)

    def _seed(self, history: Sequence[ChatMessage]) -> None:
        requests: Sequence[ToolExecutionRequest] = ()
        results: dict[str, ToolExecutionResultMessage] = {}
        for message in history:
            if isinstance(message, AiMessage) and message.tool_execution_requests:
                if requests:
                    self._record(requests, results)
                requests, results = message.tool_execution_requests, {}
            elif isinstance(message, ToolExecutionResultMessage) and requests:
                results[message.id] = message
        if requests:
            self._record(requests, results)

    def record(self, requests: Sequence[ToolExecutionRequest],
               results: Sequence[ToolExecutionResultMessage]) -> None:
        self._record(requests, {r.id: r for r in results})

    def _record(self, requests: Sequence[ToolExecutionRequest],
                results: dict[str, ToolExecutionResultMessage]) -> None:
        signatures = [_signature(r) for r in requests]
        self._calls.update(signatures)
        self._rounds.append(tuple(sorted(signatures)))
        answered = [results.get(r.id) for r in requests]
        self._results.append(
            None if any(a is None for a in answered) else tuple(sorted(
                (a.tool_name, a.is_error, without_note(a.text))
                for a in answered if a is not None)))

    def check(self, requests: Sequence[ToolExecutionRequest]) -> list[LoopFinding]:
        """What the detectors find in this round's calls (nothing is recorded)."""
        if not requests:
            return []
        return [*self._repeated(requests), *self._ping_pong(requests),
                *self._no_progress(requests)]

    def _repeated(self, requests: Sequence[ToolExecutionRequest]) -> list[LoopFinding]:
        rule = self.health.repeated_call
        if not rule.active:
            return []
        seen: Counter[Signature] = Counter()
        last: dict[Signature, ToolExecutionRequest] = {}
        for request in requests:
            signature = _signature(request)
            seen[signature] += 1
            last[signature] = request
        findings = []
        for signature, in_round in seen.items():
            count = self._calls[signature] + in_round
            decided = rule.decide(count)
            if decided is None:
                continue
            action, threshold = decided
            request = last[signature]
            tool = _shown(request.name)
            ids = tuple(r.id for r in requests if _signature(r) == signature)
            note = (f"This is call {count} of {tool} with these same arguments in this "
                    "conversation. Repeating it is unlikely to give you anything new: use "
                    "the results you already have, change the arguments, try another "
                    "tool, or give your answer.")
            findings.append(LoopFinding(
                detector="repeated_call", action=action, count=count, threshold=threshold,
                call_ids=ids, tool_names=(request.name,),
                detail=f"call {count} of {tool} with the same arguments",
                **_told(action, note, request.id)))
        return findings

    def _ping_pong(self, requests: Sequence[ToolExecutionRequest]) -> list[LoopFinding]:
        rule = self.health.ping_pong
        if not rule.active:
            return []
        rounds = [*self._rounds, tuple(sorted(_signature(r) for r in requests))]
        count = _alternating(rounds)
        decided = rule.decide(count) if count else None
        if decided is None:
            return []
        action, threshold = decided
        sides = " and ".join(_names(side) for side in (rounds[-2], rounds[-1]))
        note = (f"For the last {count} rounds you have alternated between the same two "
                f"sets of calls ({sides}). Going back and forth will not get you further: "
                "use the results you already have, try something different, or give your "
                "answer.")
        return [LoopFinding(
            detector="ping_pong", action=action, count=count, threshold=threshold,
            call_ids=tuple(r.id for r in requests), tool_names=_tools(requests),
            detail=f"{count} rounds alternating between the same two sets of calls "
                   f"({sides})",
            **_told(action, note, requests[-1].id))]

    def _no_progress(self, requests: Sequence[ToolExecutionRequest]) -> list[LoopFinding]:
        rule = self.health.no_progress
        if not rule.active or not self._results or self._results[-1] is None:
            return []
        count = 0
        for results in reversed(self._results):
            if results != self._results[-1]:
                break
            count += 1
        decided = rule.decide(count)
        if decided is None:
            return []
        action, threshold = decided
        note = (f"The last {count} rounds of tool calls all returned the same results. If "
                "that is expected, go on; otherwise more calls like these will not help: "
                "change your approach or give your answer.")
        return [LoopFinding(
            detector="no_progress", action=action, count=count, threshold=threshold,
            call_ids=tuple(r.id for r in requests), tool_names=_tools(requests),
            detail=f"the {count} rounds before this one all got the same results",
            **_told(action, note, requests[-1].id))]


def _told(action: LoopAction, note: str, call_id: str) -> dict[str, str | None]:
    if action != "tell_model":
        return {"note": None, "told_call_id": None}
    return {"note": note, "told_call_id": call_id}


def round_notes(findings: Sequence[LoopFinding]) -> dict[str, str]:
    """Call id -> the note appended to its result: a round's notes for one call joined."""
    notes: dict[str, list[str]] = {}
    for finding in findings:
        if finding.note and finding.told_call_id is not None:
            notes.setdefault(finding.told_call_id, []).append(finding.note)
    return {call_id: " ".join(parts) for call_id, parts in notes.items()}


def _alternating(rounds: Sequence[tuple[Signature, ...]]) -> int:
    """How many of the last rounds alternate between the last two (which differ): 0
    if they do not."""
    if len(rounds) < 2 or rounds[-1] == rounds[-2]:
        return 0
    count = 2
    for back in range(3, len(rounds) + 1):
        if rounds[-back] != rounds[-back + 2]:
            break
        count += 1
    return count


def _signature(request: ToolExecutionRequest) -> Signature:
    return request.name, canonical_arguments(request.arguments)


def _shown(name: str) -> str:
    """A tool name from the model, cut for a message."""
    return name if len(name) <= NAME_CHARS_LIMIT else f"{name[:NAME_CHARS_LIMIT]}..."


def _names(side: tuple[Signature, ...]) -> str:
    names = list(dict.fromkeys(name for name, _ in side))
    shown = ", ".join(_shown(name) for name in names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _tools(requests: Sequence[ToolExecutionRequest]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(r.name for r in requests))
