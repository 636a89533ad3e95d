"""Forking a run at round N: a new run whose starting conversation is the original's
conversation as the model saw it at round N (its starting messages and the rounds
before N, inherited), plus messages added for the fork, then goes on live.

The added messages use the OpenAI format of `engine.conversation`; the whole
conversation is validated as one (so a tool result must answer a call, and so on), and
problems name the ADDED message at fault ("messages[0]: ..."). The fork's snapshot
records where it came from ("fork": of, round, inherited message and round counts), so
its page marks the inherited prefix and a scripted model plays on from round N.
"""

from __future__ import annotations

import re
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from ..engine import (
    AiMessage,
    ChatMessage,
    ChatResponse,
    ToolExecutionResultMessage,
)
from ..engine.conversation import ConversationError, parse_conversation, to_openai_messages
from ..models import Round, Run, ToolCall
from .rerun import LIVE, RerunError, RerunMode, run_rerun
from .runner import FINISHED_CALL_STATES
from .snapshot import dump_messages, snapshot_messages


class ForkError(ValueError):
    """The fork cannot be made as asked; `field` is the request field at fault."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def run_fork(*, run: Run, user: AbstractBaseUser | AnonymousUser | None, round_number: int,
             messages: Any = None, mode: RerunMode = "as_it_was") -> Run:
    """A new queued run forked from `run` at `round_number` (1-based)."""
    inherited_rounds = _rounds_before(run, round_number)
    prefix = snapshot_messages(run.snapshot) + inherited_rounds
    combined = _combined(prefix, messages or [])
    try:
        fork = run_rerun(run=run, user=user, mode=mode, replay=LIVE, snapshot_changes={
            "messages": dump_messages(combined),
            "fork": {"of": str(run.pk), "round": round_number, "inherited": len(prefix),
                     "inherited_rounds": round_number - 1},
        })
    except RerunError as exc:
        raise ForkError(str(exc)) from exc
    return fork


def run_splice(*, run: Run, user: AbstractBaseUser | AnonymousUser | None, call: ToolCall,
               result: ToolExecutionResultMessage, splice: dict[str, Any]) -> Run:
    """A new queued run (parent: `run`) whose starting conversation is `run`'s through
    the round of `call`, with `result` in place of that call's result; the loop goes on
    from the next model call (a scripted model plays on, as in a fork). `splice` (which
    call, old and new result, who) is kept in the snapshot for the new run's page."""
    through = call.round.index
    inherited: list[ChatMessage] = []
    rounds = Round.objects.filter(run=run, index__lte=through).order_by("index")
    for round_ in rounds.prefetch_related("tool_calls"):
        inherited.extend(_round_messages(
            round_, {call.pk: result} if round_.index == through else None))
    prefix = snapshot_messages(run.snapshot) + inherited
    try:
        return run_rerun(run=run, user=user, mode="as_it_was", replay=LIVE, snapshot_changes={
            "messages": dump_messages(prefix),
            "fork": {"of": str(run.pk), "round": through + 2, "inherited": len(prefix),
                     "inherited_rounds": through + 1},
            "splice": splice,
        })
    except RerunError as exc:
        raise ForkError(str(exc)) from exc


def _rounds_before(run: Run, round_number: int) -> list[ChatMessage]:
    """The assistant messages and tool results of the rounds before `round_number`, each
    of which must have finished (an answer, and every call's result)."""
    if not isinstance(round_number, int) or isinstance(round_number, bool) or \
            not 1 <= round_number <= max(run.rounds_count, 1):
        raise ForkError(f"round must be a round of the run: 1 to {max(run.rounds_count, 1)}",
                        field="round")
    messages: list[ChatMessage] = []
    rounds = Round.objects.filter(run=run, index__lt=round_number - 1).order_by("index")
    for round_ in rounds.prefetch_related("tool_calls"):
        messages.extend(_round_messages(round_))
    return messages


def _round_messages(round_: Round,
                    replaced: dict[int, ToolExecutionResultMessage] | None = None,
                    ) -> list[ChatMessage]:
    """The round's assistant message and its calls' results; `replaced`: call pk -> the
    result to put in that call's place (a splice)."""
    if round_.status != "responded" or not round_.response:
        raise ForkError(f"round {round_.index + 1} has no answer: fork at or before it",
                        field="round")
    ai_message = ChatResponse.model_validate(round_.response).ai_message
    calls = {c.call_index: c for c in round_.tool_calls.all()}
    results: list[ChatMessage] = []
    for index, request in enumerate(ai_message.tool_execution_requests):
        call = calls.get(index)
        if call is not None and call.pk in (replaced or {}):
            results.append((replaced or {})[call.pk])
            continue
        if call is None or call.state not in FINISHED_CALL_STATES or call.result_text is None:
            raise ForkError(f"round {round_.index + 1}, call {index + 1} has no result: fork "
                            "at or before that round", field="round")
        results.append(ToolExecutionResultMessage(id=request.id, tool_name=request.name,
                                                  text=call.result_text,
                                                  is_error=call.is_error))
    return [AiMessage(text=ai_message.text,
                      tool_execution_requests=ai_message.tool_execution_requests,
                      thinking=ai_message.thinking,
                      provider_blocks=ai_message.provider_blocks), *results]


_AT = re.compile(r"messages\[(\d+)\]")


def _combined(prefix: list[ChatMessage], added: Any) -> list[ChatMessage]:
    """The inherited prefix and the added messages, validated as one conversation; an
    error names the added message (its index in the request), not the combined one."""
    if not isinstance(added, list):
        raise ForkError("messages must be a list of message objects", field="messages")
    try:
        parsed = parse_conversation(to_openai_messages(prefix) + added)
    except ConversationError as exc:
        raise ForkError(_relative(str(exc), len(prefix)),
                        field=_relative(exc.field, len(prefix))) from exc
    # The prefix itself, not its OpenAI form read back: that form has no place for
    # thinking or provider blocks (an Anthropic thinking signature must go back as it was).
    return prefix + parsed[len(prefix):]


def _relative(text: str, offset: int) -> str:
    def shift(match: re.Match[str]) -> str:
        index = int(match.group(1)) - offset
        return f"messages[{index}]" if index >= 0 else f"the inherited message {match[1]}"

    return _AT.sub(shift, text)
