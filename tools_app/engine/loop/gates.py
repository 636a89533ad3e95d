"""Where the tool loop stops for a person: the approval gate and the breakpoint hooks.

- Approvals: a call of a tool registered with `requires_approval` runs only if the
  service's approver (`errors.Approver`) approves it, possibly with edited arguments;
  without an approver it is refused (`ToolRejectedError`), never run. `approvals` asks
  about every flagged call of a round before any call of it starts; an approver that
  has no decision yet raises `ApprovalPending`, and the round pauses whole
  (`ToolApprovalPending`).
- Breakpoints: a `ModelCallHook` is asked before each model call (it adds messages, or
  raises `RunPaused` to pause before the call); a `CallGate` is asked once per round,
  after approvals, and may hold calls (the others run, then the chat pauses with
  `held_calls_pause`) or edit their arguments.

The pauses are exceptions of the engine's tree (errors.py): `RunPaused`, its subclass
`ToolApprovalPending`, and `ApprovalPending`. The loop (chat_run.py) calls these helpers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import (
    ApprovalPending,
    Approver,
    RunPaused,
    ToolApprovalPending,
    ToolErrorContext,
    ToolRejectedError,
)
from ..messages import ChatMessage, ToolExecutionRequest
from .callbacks import maybe_await

Verdict = ToolRejectedError | ToolExecutionRequest | None
"""An approver's answer for one call: run it (None), run an edited request, or refuse."""


@dataclass(frozen=True)
class GateAnswer:
    """A call gate's answer for the calls of a round still to run: `hold` them (the
    chat pauses with RunPaused once the others finished), and/or run some with `edited`
    arguments (same id and tool)."""

    hold: frozenset[str] = frozenset()
    edited: Mapping[str, ToolExecutionRequest] = field(default_factory=dict)
    reason: str = "breakpoint"


CallGate = Callable[[list[ToolExecutionRequest], int], "GateAnswer | Awaitable[GateAnswer]"]
"""Asked once per round, after approvals, with the calls still to run and the round."""

ModelCallHook = Callable[[int, list[ChatMessage]],
                         "Sequence[ChatMessage] | Awaitable[Sequence[ChatMessage]]"]
"""Asked before each model call with the round and the history: returns messages to
append first (none: an empty list), or raises RunPaused to pause before the call."""


async def approvals(approver: Approver | None, flagged: Sequence[ToolExecutionRequest],
                    round_index: int) -> dict[str, Verdict]:
    """Ask about every flagged call of the round before any call of it starts: a call
    still undecided pauses the whole round (ToolApprovalPending), so a pause never
    interrupts a call that is running."""
    verdicts: dict[str, Verdict] = {}
    waiting: list[str] = []
    for request in flagged:
        try:
            verdicts[request.id] = await approval(approver, request, round_index)
        except ApprovalPending:
            waiting.append(request.id)
    if waiting:
        raise ToolApprovalPending(waiting, round_index)
    return verdicts


async def approval(approver: Approver | None, request: ToolExecutionRequest,
                   round_index: int) -> Verdict:
    """None if the call may run as it is; the request to run instead (edited
    arguments); else why not (the call is then never executed)."""
    if approver is None:
        return ToolRejectedError(
            f"Tool '{request.name}' requires a person's approval, and nobody could be "
            "asked for it: the call was not executed", tool_name=request.name)
    context = ToolErrorContext(request=request, round_index=round_index)
    decision = await maybe_await(approver(request, context))
    if decision is True:
        return None
    if isinstance(decision, ToolExecutionRequest):
        if (decision.id, decision.name) != (request.id, request.name):
            raise ValueError("an approver may edit a call's arguments, not its id or tool")
        return decision
    reason = decision if isinstance(decision, str) and decision else "not approved"
    return ToolRejectedError(f"Tool '{request.name}' was not executed: {reason}",
                             tool_name=request.name)


async def gate_answer(gate: CallGate | None, requests: list[ToolExecutionRequest],
                      verdicts: dict[str, Verdict], round_index: int) -> GateAnswer:
    """The call gate's answer; its edits join the verdicts (a refusal stands)."""
    if gate is None or not requests:
        return GateAnswer()
    answer: GateAnswer = await maybe_await(gate(requests, round_index))
    by_id = {r.id: r for r in requests}
    for call_id, edited in answer.edited.items():
        original = by_id.get(call_id)
        if original is None or (edited.id, edited.name) != (original.id, original.name):
            raise ValueError("a call gate may edit a call's arguments, not its id or tool")
        if not isinstance(verdicts.get(call_id), ToolRejectedError):
            verdicts[call_id] = edited
    return answer


def held_calls_pause(requests: Sequence[ToolExecutionRequest], answer: GateAnswer,
                     round_index: int) -> RunPaused:
    """The pause to raise once a round's calls that were not held have run."""
    held = [r.id for r in requests if r.id in answer.hold]
    return RunPaused(f"paused before {len(held)} tool call(s) of round "
                     f"{round_index + 1}", call_ids=held,
                     round_index=round_index, reason=answer.reason)


async def messages_before_model_call(hook: ModelCallHook | None, round_index: int,
                                     messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
    """What the hook adds to the history before the round's model call (nothing without
    a hook); the hook raises RunPaused to pause before the call."""
    if hook is None:
        return ()
    added: Sequence[ChatMessage] = await maybe_await(hook(round_index, list(messages)))
    return added
