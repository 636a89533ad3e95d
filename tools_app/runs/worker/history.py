"""A claimed run's conversation rebuilt from its stored rounds, for the engine to go on
from: finished rounds become messages; the first unfinished one becomes the resume state
(ask the model again, or run the calls left, the ones in doubt reported as such)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from decimal import Decimal

from tools_app.engine import (
    ChatMessage,
    ChatResponse,
    ResumeState,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
    run_cost,
)
from tools_app.models import FINISHED_CALL_STATES, IN_DOUBT_CALL_STATES, Round, Run, ToolCall
from tools_app.runs.snapshot.model import RunSnapshot, snapshot_of
from tools_app.runs.store.sql import rowsql
from tools_app.runs.worker.breakpoint_hooks import added_messages


def load_history(run: Run, *, has_rounds: bool | None = None,
                 ) -> tuple[list[ChatMessage], ResumeState | None]:
    """Rebuild the conversation from stored rounds; the unfinished round becomes resume
    state. `has_rounds`: whether the run has any, when the caller already read it."""
    snapshot = snapshot_of(run)
    messages = snapshot.chat_messages()
    if has_rounds is None:
        has_rounds = bool(rowsql.select(Round, ("id",), {"run": run.pk}))
    if not has_rounds:
        # Every run's first claim: no rounds, found without the ORM's query and prefetch.
        return messages, None
    rounds = list(Round.objects.filter(run=run).order_by("index").prefetch_related("tool_calls"))
    messages, resume = _rebuilt(run, snapshot, messages, rounds)
    return messages, _with_cost(resume, rounds)


def _with_cost(resume: ResumeState, rounds: Sequence[Round]) -> ResumeState:
    """The resume state with what the stored rounds cost: the cost cap goes on from it."""
    inputs = [r.input_tokens for r in rounds if r.input_tokens is not None]
    return replace(resume, cost_spent=run_cost(r.cost_usd for r in rounds) or Decimal(0),
                   last_input_tokens=inputs[-1] if inputs else 0)


def _rebuilt(run: Run, snapshot: RunSnapshot, messages: list[ChatMessage],
             rounds: list[Round]) -> tuple[list[ChatMessage], ResumeState]:
    idempotent = snapshot.idempotent_tools()
    added = added_messages(str(run.pk)) if snapshot.breakpoints else {}
    round_trips = 0
    for round_ in rounds:
        response = _stored_response(round_)
        if response is None:
            # The model call never completed: ask again (cost only, no side effects);
            # the breakpoint hook adds this round's added messages again itself.
            return messages, ResumeState(round_index=round_.index, round_trips_done=round_trips)
        # Messages people added at a breakpoint before this model call, as it saw them.
        messages.extend(UserMessage(text=text) for text in added.get(round_.index, []))
        calls = sorted(round_.tool_calls.all(), key=lambda c: c.call_index)
        requests = response.ai_message.tool_execution_requests
        if requests and len(calls) == len(requests) and all(_finished(c) for c in calls):
            messages.append(response.ai_message)
            messages.extend(_result_message(c, requests) for c in calls)
            round_trips += 1
            continue
        return messages, _pending(round_, response, calls, idempotent, round_trips)
    last = rounds[-1]
    return messages, ResumeState(round_index=last.index + 1, round_trips_done=round_trips)



def _stored_response(round_: Round) -> ChatResponse | None:
    if round_.status != "responded" or not round_.response:
        return None
    return ChatResponse.model_validate(round_.response)


def _finished(call: ToolCall) -> bool:
    return call.state in FINISHED_CALL_STATES and call.result_text is not None


def _request_of(call: ToolCall, requests: Sequence[ToolExecutionRequest]) -> tuple[str, str]:
    """The call's id and tool name as the model sent them (the stored response has them
    whole; the columns may hold them cut to fit)."""
    if call.call_index < len(requests):
        request = requests[call.call_index]
        return request.id, request.name
    return call.call_id, call.tool_name


def _result_message(call: ToolCall,
                    requests: Sequence[ToolExecutionRequest]) -> ToolExecutionResultMessage:
    call_id, tool_name = _request_of(call, requests)
    return ToolExecutionResultMessage(id=call_id, tool_name=tool_name,
                                      text=call.result_text or "", is_error=call.is_error)


def _pending(
    round_: Round, response: ChatResponse, calls: list[ToolCall],
    idempotent: frozenset[str], round_trips: int,
) -> ResumeState:
    requests = response.ai_message.tool_execution_requests
    done = {_request_of(c, requests)[0]: _result_message(c, requests)
            for c in calls if _finished(c)}
    in_doubt = frozenset(
        _request_of(c, requests)[0] for c in calls
        if c.state in IN_DOUBT_CALL_STATES and _request_of(c, requests)[1] not in idempotent
    )
    return ResumeState(round_index=round_.index, round_trips_done=round_trips,
                       pending_response=response, completed_results=done,
                       unknown_outcome_ids=in_doubt)

