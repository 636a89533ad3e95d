"""What the loop takes and gives: a registered tool, the settings it reads from its
service, the result of one chat(), the state a resumed run starts from, and when a
round's results end the loop at once (ReturnBehavior)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Protocol

from ..errors import (
    Approver,
    HallucinatedToolStrategy,
    ToolArgumentsErrorHandler,
    ToolExecutionErrorHandler,
)
from ..execution import ToolExecution, ToolExecutor
from ..messages import (
    ChatMessage,
    ChatRequestParameters,
    ChatResponse,
    TokenUsage,
    ToolExecutionResultMessage,
)
from ..pricing import CostCap, TokenPrice
from ..spec import ReturnBehavior, ToolSpecification
from .gates import (
    CallGate,
    ModelCallHook,
)
from .health import LoopHealth


@dataclass(frozen=True)
class RegisteredTool:
    specification: ToolSpecification
    executor: ToolExecutor
    return_behavior: ReturnBehavior = ReturnBehavior.TO_LLM
    timeout: float | None = None
    idempotent: bool = False
    requires_approval: bool = False


class LoopSettings(Protocol):
    """What the loop reads of its ToolService (service.py): the registry and the
    configuration, never changed by a chat."""

    max_tool_calling_round_trips: int
    parallel: bool
    max_concurrency: int | None
    default_timeout: float | None
    arguments_error_handler: ToolArgumentsErrorHandler
    execution_error_handler: ToolExecutionErrorHandler
    hallucinated_tool_strategy: HallucinatedToolStrategy
    approver: Approver | None
    call_gate: CallGate | None
    before_model_call: ModelCallHook | None
    loop_health: LoopHealth | None
    price: TokenPrice | None
    cost_cap: CostCap | None

    @property
    def tool_specifications(self) -> list[ToolSpecification]: ...

    @property
    def registered_tools(self) -> Mapping[str, RegisteredTool]: ...

    def request_parameters(
        self, user_parameters: ChatRequestParameters | None
    ) -> ChatRequestParameters: ...


@dataclass(frozen=True)
class ToolChatResult:
    final_response: ChatResponse
    tool_executions: list[ToolExecution]
    intermediate_responses: list[ChatResponse]
    messages: list[ChatMessage]
    usage: TokenUsage | None
    returned_immediately: bool = False


@dataclass(frozen=True)
class ResumeState:
    """Where a persisted run stopped, so a new worker continues without redoing work.

    `messages` passed to chat() hold every completed round. `pending_response` is the
    model answer whose tool calls were not all finished (its AiMessage is not in
    `messages`: the loop appends it); `completed_results`
    holds the calls of that round that did finish (never re-executed), and
    `unknown_outcome_ids` the calls that were in flight on a non-idempotent tool: they
    are not re-executed and become ToolUnknownOutcomeError for the execution handler.
    `cost_spent` is what the stored rounds cost and `last_input_tokens` the input tokens
    of the last stored model call (the cost cap goes on from them).
    """

    round_index: int
    round_trips_done: int
    pending_response: ChatResponse | None = None
    completed_results: Mapping[str, ToolExecutionResultMessage] = field(default_factory=dict)
    unknown_outcome_ids: frozenset[str] = frozenset()
    intermediate_responses: tuple[ChatResponse, ...] = ()
    cost_spent: Decimal = Decimal(0)
    last_input_tokens: int = 0


def should_return_immediately(behaviors: Sequence[ReturnBehavior]) -> bool:
    """The seed's ReturnBehavior table (tool errors are checked by the caller).

    []                                -> continue
    any TO_LLM                        -> continue
    all IMMEDIATE                     -> return
    [IMMEDIATE_IF_LAST]               -> return
    [IMMEDIATE..., IMMEDIATE_IF_LAST] -> return (an IMMEDIATE_IF_LAST that is not the
                                         last call of the round means continue)
    """
    if not behaviors:
        return False
    last = len(behaviors) - 1
    for index, behavior in enumerate(behaviors):
        if behavior is ReturnBehavior.TO_LLM:
            return False
        if behavior is ReturnBehavior.IMMEDIATE_IF_LAST and index != last:
            return False
    return True


