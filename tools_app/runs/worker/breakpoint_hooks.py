"""The engine's breakpoint hooks for a run, and what they stored (see runs.debugger.breakpoints)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from asgiref.sync import sync_to_async

from tools_app.engine import ChatMessage, GateAnswer, RunPaused, ToolExecutionRequest, UserMessage
from tools_app.models import PauseResolution, RunPause, ToolCall


def describe(breakpoint: dict[str, Any]) -> str:
    kind = breakpoint["kind"]
    if kind == "before_round":
        return f"before round {breakpoint['round']}"
    if kind == "before_tool":
        return f"before a call of {breakpoint['tool']}"
    if kind == "tool_error":
        return "after a failed tool call"
    value = json.dumps(breakpoint["value"], ensure_ascii=False)
    return f"{breakpoint['tool']} with {breakpoint['pointer'] or '(arguments)'} = {value}"


def pointer_value(document: Any, pointer: str) -> tuple[bool, Any]:
    """RFC 6901: (found, value) of `pointer` in `document`."""
    if pointer == "":
        return True, document
    current = document
    for token in pointer[1:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(current, dict) and token in current:
            current = current[token]
        elif isinstance(current, list) and token.isdigit() and int(token) < len(current):
            current = current[int(token)]
        else:
            return False, None
    return True, current


class RunBreakpoints:
    """The engine hooks of one run (`before_model_call`, `call_gate`)."""

    def __init__(self, run_id: str, breakpoints: list[dict[str, Any]]) -> None:
        self.run_id = run_id
        self.breakpoints = breakpoints

    async def before_model_call(self, round_index: int,
                                messages: list[ChatMessage]) -> list[ChatMessage]:
        added = await sync_to_async(self._before_model)(round_index)
        return [UserMessage(text=text) for text in added]

    async def call_gate(self, requests: list[ToolExecutionRequest],
                        round_index: int) -> GateAnswer:
        pending = [(r.id, r.name, r.arguments) for r in requests]
        hold, edits = await sync_to_async(self._gate)(pending, round_index)
        by_id = {r.id: r for r in requests}
        edited = {call_id: by_id[call_id].model_copy(update={"arguments": json.dumps(args)})
                  for call_id, args in edits.items() if call_id in by_id}
        return GateAnswer(hold=frozenset(hold), edited=edited)

    # -- in the database, on a thread ---------------------------------------------------

    def _before_model(self, round_index: int) -> list[str]:
        """The messages resolved pauses add here, or RunPaused if the run stops here."""
        pauses = list(RunPause.objects.filter(run_id=self.run_id, round_index=round_index,
                                              before="model"))
        resolved = [p for p in pauses if p.resolved_at is not None]
        if resolved:
            return [p.message for p in resolved if p.message]
        opened = next(iter(pauses), None)
        reason = opened.reason if opened is not None else self._model_reason(round_index)
        if reason is None:
            return []
        if opened is None:
            RunPause.objects.create(run_id=self.run_id, round_index=round_index,
                                    before="model", reason=reason)
        raise RunPaused(f"paused {reason}", call_ids=[], round_index=round_index,
                        reason="breakpoint")

    def _model_reason(self, round_index: int) -> str | None:
        step = last_step(self.run_id)
        if step == PauseResolution.ROUND:
            return f"before round {round_index + 1}, after stepping one round"
        if step == PauseResolution.CALL:
            # The stepped call was the last one held: the next step is this model call.
            return f"before round {round_index + 1}, after stepping one call"
        for breakpoint in self.breakpoints:
            if breakpoint["kind"] == "before_round" and breakpoint["round"] == round_index + 1:
                return describe(breakpoint)
            if (breakpoint["kind"] == "tool_error" and round_index > 0
                    and ToolCall.objects.filter(run_id=self.run_id, is_error=True,
                                                round__index=round_index - 1).exists()):
                return f"before round {round_index + 1}: a tool call failed in round " \
                       f"{round_index}"
        return None

    def _gate(self, requests: list[tuple[str, str, str]],
              round_index: int) -> tuple[list[str], dict[str, Any]]:
        """(the calls to hold, call id -> edited arguments) for a round's calls."""
        pauses = list(RunPause.objects.filter(run_id=self.run_id, round_index=round_index,
                                              before="calls"))
        released: set[str] = set()
        for pause in pauses:
            if pause.resolved_at is not None:
                released.update(pause.released)
        edits = {call_id: pause.edited_arguments[call_id]
                 for call_id, pause in edits_in_force(pauses).items()}
        opened = next((p for p in pauses if p.resolved_at is None), None)
        candidates = [r for r in requests if r[0] not in released]
        hold, reason = self._to_hold(candidates, opened)
        if hold and opened is None:
            RunPause.objects.create(run_id=self.run_id, round_index=round_index,
                                    before="calls", call_ids=hold, reason=reason)
        return hold, {k: v for k, v in edits.items() if k not in hold}

    def _to_hold(self, candidates: list[tuple[str, str, str]],
                 opened: RunPause | None) -> tuple[list[str], str]:
        if opened is not None:  # a pause made before a crash: it still stands
            return [c[0] for c in candidates if c[0] in opened.call_ids], opened.reason
        if candidates and last_step(self.run_id) == PauseResolution.CALL:
            return [c[0] for c in candidates], "after stepping one call"
        hold: list[str] = []
        reasons: list[str] = []
        for call_id, name, arguments in candidates:
            matched = self._match(name, arguments)
            if matched is not None:
                hold.append(call_id)
                reasons.append(matched)
        return hold, "; ".join(dict.fromkeys(reasons))

    def _match(self, name: str, arguments: str) -> str | None:
        for breakpoint in self.breakpoints:
            if breakpoint.get("tool") != name:
                continue
            if breakpoint["kind"] == "before_tool":
                return describe(breakpoint)
            if breakpoint["kind"] == "condition":
                found, value = pointer_value(_parsed(arguments), breakpoint["pointer"])
                if found and value == breakpoint["value"]:
                    return describe(breakpoint)
        return None


def _parsed(arguments: str) -> Any:
    try:
        return json.loads(arguments or "{}")
    except (ValueError, RecursionError):
        return None


def edits_in_force(pauses: Iterable[RunPause]) -> dict[str, RunPause]:
    """Call id -> the resolved pause whose edited arguments the call runs with, of one
    round's pauses in their order: a later edit of the same call replaces an earlier one."""
    return {call_id: pause for pause in pauses if pause.resolved_at is not None
            for call_id in pause.edited_arguments}


def edited_calls(run_id: str) -> dict[int, dict[str, RunPause]]:
    """Round index -> `edits_in_force` of the run's pauses before that round's calls."""
    by_round: dict[int, list[RunPause]] = {}
    for pause in RunPause.objects.filter(run_id=run_id, before="calls",
                                         resolved_at__isnull=False):
        by_round.setdefault(pause.round_index, []).append(pause)
    edited = {index: edits_in_force(pauses) for index, pauses in by_round.items()}
    return {index: calls for index, calls in edited.items() if calls}


def last_step(run_id: str) -> str | None:
    """"call" or "round" while a step is under way: the latest pause was resolved
    with it and no pause came after."""
    last = RunPause.objects.filter(run_id=run_id).order_by("-created_at", "-pk").first()
    if last is None or last.resolved_at is None:
        return None
    return last.resolution if last.resolution in (PauseResolution.CALL,
                                                  PauseResolution.ROUND) else None


def added_messages(run_id: str) -> dict[int, list[str]]:
    """Round index -> the messages people added before its model call (for rebuilding
    the conversation on a resume)."""
    added: dict[int, list[str]] = {}
    for pause in RunPause.objects.filter(run_id=run_id, before="model",
                                         resolved_at__isnull=False).exclude(message=""):
        added.setdefault(pause.round_index, []).append(pause.message)
    return added
