"""Replaying a recorded run: a model that answers from the recording, and tools that
serve the recorded results without executing anything.

`RecordedChatModel` answers round N with the recorded response of round N, as long as
the conversation it is sent still is the recorded one: every earlier assistant message
asked for the recorded calls, and every result sent back is the recorded result. The
first place where it is not is the divergence (which round, which call, what differed).
Then it either raises `ReplayDivergence` (the run stops there) or, given a live model,
reports it (`ReplayDiverged`) and lets the live model answer from there on. Like the
scripted model it is stateless (everything is derived from the request), so a resumed
replay continues exactly.

`RecordedToolExecutor` serves a call from the recording of the current round: the
recorded result, or the recorded error raised again (so the run's error policy turns
it into the same text for the model; a timeout as a timeout, with its message). A
call the recording does not have is a divergence, stopped or handed to the live
executor like the model's; in "mock" mode it gets a fixed placeholder result instead
and the replay goes on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ..errors import (
    ProviderError,
    ReplayDivergence,
    ToolArgumentsError,
    ToolExecutionError,
    ToolTimeoutError,
)
from ..events import ReplayDiverged, current_round, emit, observed
from ..execution import ToolExecutionResult, ToolExecutor
from ..messages import (
    AiMessage,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
)
from .base import ChatModel

ARGUMENTS_ERROR_STATES = frozenset({"arguments_error"})
TIMEOUT_STATES = frozenset({"timed_out"})
# Calls that never finished in the recording: there is nothing to serve.
UNFINISHED_STATES = frozenset({"proposed", "started", "cancelled"})
MOCK_RESULT = "mock result: the recording has no call of {tool} with these arguments"


class RecordedCall(BaseModel):
    """One tool call as it was recorded."""

    model_config = ConfigDict(frozen=True)

    call_index: int
    call_id: str
    tool_name: str
    arguments: str = ""
    state: str = "succeeded"
    result_text: str | None = None
    result_json: Any = None
    is_error: bool = False
    error_type: str | None = None
    error_message: str | None = None
    error_details: list[dict[str, Any]] | None = None


class RecordedRound(BaseModel):
    """One round as it was recorded: the model's answer and the calls it asked for."""

    model_config = ConfigDict(frozen=True)

    index: int
    response: ChatResponse | None
    calls: tuple[RecordedCall, ...] = ()


class Divergence(BaseModel):
    """Where a replay left its recording: 0-based round and call, and what differed."""

    model_config = ConfigDict(frozen=True)

    round_index: int
    call_index: int | None = None
    tool_name: str | None = None
    detail: str

    def describe(self) -> str:
        where = f"round {self.round_index + 1}"
        if self.call_index is not None:
            where += f", call {self.call_index + 1}"
            if self.tool_name:
                where += f" ({self.tool_name})"
        return f"The replay left its recording at {where}: {self.detail}"

    def error(self) -> ReplayDivergence:
        return ReplayDivergence(self.describe(), round_index=self.round_index,
                                call_index=self.call_index)


def canonical_arguments(raw: str) -> str:
    """Arguments compared as JSON values (key order and spacing do not matter); text
    that is not JSON, or nested too deeply to parse, compares as it is."""
    try:
        return json.dumps(json.loads(raw or "{}"), sort_keys=True, ensure_ascii=False)
    except (ValueError, RecursionError):
        return raw


def _short(text: str | None, limit: int = 120) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."


class RecordedChatModel:
    """Answers from `rounds`; see the module docstring."""

    provider = "recorded"

    def __init__(self, rounds: Sequence[RecordedRound], *, prelude_messages: int,
                 live: ChatModel | None = None) -> None:
        self.rounds = list(rounds)
        self.prelude_messages = prelude_messages  # the starting conversation's length
        self.live = live

    async def chat(self, request: ChatRequest) -> ChatResponse:
        conversation = request.messages[self.prelude_messages:]
        divergence = self.divergence(conversation)
        if divergence is None:
            asked = sum(1 for m in conversation if isinstance(m, AiMessage))
            if asked < len(self.rounds):
                recorded = self.rounds[asked].response
                if recorded is None:
                    # The recorded call never answered (the provider failed, or the run
                    # was stopped while it waited): the replay ends the same way.
                    raise ProviderError(f"round {asked + 1}: the recorded model call did "
                                        "not answer", provider=self.provider)
                return recorded
            divergence = Divergence(round_index=asked, detail=(
                f"the recording has {self._answered()} model answers and the run asks "
                f"for answer {asked + 1}"))
        if self.live is None:
            raise divergence.error()
        await self._report(divergence, conversation)
        return await self.live.chat(request)

    def _answered(self) -> int:
        return sum(1 for r in self.rounds if r.response is not None)

    async def _report(self, divergence: Divergence,
                      conversation: Sequence[ChatMessage]) -> None:
        """Once: when the model call right after the divergence is made (later calls
        find the same divergence again, further back)."""
        asked = sum(1 for m in conversation if isinstance(m, AiMessage))
        first_live_answer = (divergence.round_index if divergence.call_index is None
                             else divergence.round_index + 1)
        if asked == first_live_answer and observed():
            await emit(ReplayDiverged(call_index=divergence.call_index,
                                      tool_name=divergence.tool_name,
                                      detail=divergence.describe() + "; going on live"))

    def divergence(self, conversation: Sequence[ChatMessage]) -> Divergence | None:
        """The first place where `conversation` (after the starting messages) is not
        the recorded one, or None."""
        round_index = -1
        for message in conversation:
            if isinstance(message, AiMessage):
                round_index += 1
                found = self._answer_differs(round_index, message)
            elif isinstance(message, ToolExecutionResultMessage):
                found = self._result_differs(round_index, message)
            else:
                found = None
            if found is not None:
                return found
        return None

    def _answer_differs(self, index: int, message: AiMessage) -> Divergence | None:
        recorded = self.rounds[index].response if index < len(self.rounds) else None
        if recorded is None:
            return Divergence(round_index=index, detail="the recording has no answer here")
        if _calls_of(recorded.ai_message) != _calls_of(message):
            return Divergence(round_index=index, detail=(
                f"the model asked for {_calls_of(message)}, the recording for "
                f"{_calls_of(recorded.ai_message)}"))
        return None

    def _result_differs(self, index: int,
                        message: ToolExecutionResultMessage) -> Divergence | None:
        calls = self.rounds[index].calls if 0 <= index < len(self.rounds) else ()
        call = next((c for c in calls if c.call_id == message.id), None)
        if call is None:
            return Divergence(round_index=max(index, 0), tool_name=message.tool_name,
                              detail=f"the recording has no call with id {message.id!r}")
        if (call.result_text, call.is_error) != (message.text, message.is_error):
            return Divergence(round_index=index, call_index=call.call_index,
                              tool_name=call.tool_name, detail=(
                                  f"the result differs: recorded {_short(call.result_text)}"
                                  f"{' (error)' if call.is_error else ''}, now "
                                  f"{_short(message.text)}"
                                  f"{' (error)' if message.is_error else ''}"))
        return None


def _calls_of(message: AiMessage) -> list[tuple[str, str]]:
    return [(r.name, canonical_arguments(r.arguments)) for r in message.tool_execution_requests]


ToolsMode = Literal["recorded", "mock"]


class RecordedToolExecutor:
    """Serves one tool's calls from the recording; see the module docstring."""

    def __init__(self, rounds: Sequence[RecordedRound], *, mode: ToolsMode = "recorded",
                 live: ToolExecutor | None = None) -> None:
        self.rounds = {r.index: r for r in rounds}
        self.mode = mode
        self.live = live

    async def execute_with_result(self, request: ToolExecutionRequest) -> ToolExecutionResult:
        round_index = current_round() or 0
        call = self.recorded_call(round_index, request)
        if call is not None:
            return _served(call, request)
        if self.mode == "mock":
            return ToolExecutionResult.success(MOCK_RESULT.format(tool=request.name))
        divergence = Divergence(
            round_index=round_index, call_index=self._call_index(round_index, request),
            tool_name=request.name,
            detail=f"the recording has no call of {request.name} with the arguments "
                   f"{_short(request.arguments)}")
        if self.live is None:
            raise divergence.error()
        if observed():
            await emit(ReplayDiverged(call_index=divergence.call_index,
                                      tool_name=request.name,
                                      detail=divergence.describe() + "; executing it live"))
        return await self.live.execute_with_result(request)

    def recorded_call(self, round_index: int,
                      request: ToolExecutionRequest) -> RecordedCall | None:
        """The recorded call of this round with the same tool and arguments: the one
        with the same id if there is one (several equal calls in a round)."""
        recorded = self.rounds.get(round_index)
        if recorded is None:
            return None
        wanted = (request.name, canonical_arguments(request.arguments))
        same = [c for c in recorded.calls if c.state not in UNFINISHED_STATES
                and (c.tool_name, canonical_arguments(c.arguments)) == wanted]
        return next((c for c in same if c.call_id == request.id), same[0] if same else None)

    def _call_index(self, round_index: int, request: ToolExecutionRequest) -> int | None:
        """The call's place in its round, known when the model's answer is the recorded
        one (same ids); None otherwise."""
        recorded = self.rounds.get(round_index)
        calls = recorded.calls if recorded is not None else ()
        return next((c.call_index for c in calls if c.call_id == request.id), None)


def _served(call: RecordedCall, request: ToolExecutionRequest) -> ToolExecutionResult:
    """The recorded outcome again: a result, or the recorded error raised again so the
    run's error policy turns it into the text for the model as it did then."""
    if not call.is_error:
        return ToolExecutionResult.success(call.result_text or "", call.result_json)
    message = call.error_message or call.result_text or "the recorded call failed"
    if call.state in ARGUMENTS_ERROR_STATES:
        raise ToolArgumentsError(message, tool_name=request.name, errors=call.error_details)
    if call.state in TIMEOUT_STATES:  # a timeout again, not a failure: same state and type
        raise ToolTimeoutError(request.name, None, message=message)
    if call.error_type is None:  # an error result the tool itself returned
        return ToolExecutionResult(text=call.result_text or "", is_error=True)
    raise ToolExecutionError(message, tool_name=request.name)
