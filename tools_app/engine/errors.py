"""The engine's exceptions, and the error-handler contracts of the tool loop.

    AgentForgeError
    ├── ToolError                       one tool call went wrong
    │   ├── ToolArgumentsError          arguments: invalid JSON, not an object, missing or
    │   │                               ill-typed values (default handler: rethrow)
    │   ├── ToolExecutionError          the tool raised (default handler: text to the model)
    │   │   ├── ToolTimeoutError        the tool ran past its timeout
    │   │   ├── ToolUnknownOutcomeError the worker died while the call was in flight
    │   │   └── ToolRejectedError       a flagged call was not approved: never executed
    │   └── HallucinatedToolError       the model named a tool it was not offered
    ├── ToolDefinitionError             tool definitions (JSON) that cannot be used
    ├── ToolLoopError                   the loop itself stopped
    │   ├── MaxRoundTripsExceededError  more tool-calling round trips than allowed
    │   ├── LoopDetectedError           the model went round in circles (loop/health.py)
    │   ├── CostCapExceededError        the next model call would pass the run's cost cap
    │   └── RunPaused                   paused where it can resume (a breakpoint)
    │       └── ToolApprovalPending     calls of a round await a decision
    ├── ApprovalPending                 an approver's "not decided yet" (pauses the loop)
    ├── ProviderError                   a model provider failed; `retryable` decides retries
    │   └── ModelTimeout                no answer within the endpoint's timeout
    └── ReplayDivergence                a replayed run left its recording (and was told
                                        to stop there)

Handlers receive the error and a ToolErrorContext. They return
`ToolErrorHandlerResult.text(...)` (the text goes to the model as the tool result, with
is_error set) or raise (the run stops with that exception).
"""

from __future__ import annotations

import string
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

# The base of the tree lives apart, so modules the messages depend on (spec, through
# argument validation) can raise these without an import cycle.
from .base_errors import AgentForgeError as AgentForgeError
from .base_errors import ToolArgumentsError as ToolArgumentsError
from .base_errors import ToolError as ToolError
from .base_errors import ToolExecutionError as ToolExecutionError

if TYPE_CHECKING:
    from .messages import ToolExecutionRequest, ToolExecutionResultMessage


class ToolTimeoutError(ToolExecutionError):
    def __init__(self, tool_name: str, timeout: float | None, *,
                 message: str | None = None) -> None:
        """`timeout` None and a `message`: a timeout served again from a recording,
        which keeps the message, not the timeout (providers/recorded.py)."""
        if message is None:
            after = f" after {timeout:g} s" if timeout is not None else ""
            message = f"Tool '{tool_name}' timed out{after}"
        super().__init__(message, tool_name=tool_name)
        self.timeout = timeout


class ToolUnknownOutcomeError(ToolExecutionError):
    """A non-idempotent call was in flight when its worker died; it was not re-executed."""


class ToolRejectedError(ToolExecutionError):
    """A call to a tool that requires a person's approval was not approved (or there was
    no one to ask): it was never executed. The model is told through the execution-error
    handler, like any failure of the tool."""


class ApprovalPending(AgentForgeError):
    """Raised by an approver that has no decision yet for a call: the call must wait for
    one. The loop asks about every flagged call of a round before any call of it starts,
    so a pause never leaves a call of the round half done."""


# An error about a tool name the model made up names at most this many offered tools
# (then how many more), and cuts the made-up name: both end up in the run's record and,
# told to the model, in every later request.
NAMED_TOOLS_LIMIT = 20
NAME_CHARS_LIMIT = 200


def _shown_name(name: str) -> str:
    """A tool name for a message, cut to NAME_CHARS_LIMIT characters (the model's can be
    of any length)."""
    return name if len(name) <= NAME_CHARS_LIMIT else f"{name[:NAME_CHARS_LIMIT]}..."


def _offered_tools(available: list[str]) -> str:
    """The tools offered to the run, for a message: "a, b, c", at most NAMED_TOOLS_LIMIT
    of them and then "and N more", or "none"."""
    if not available:
        return "none"
    names = ", ".join(_shown_name(name) for name in available[:NAMED_TOOLS_LIMIT])
    rest = len(available) - NAMED_TOOLS_LIMIT
    return f"{names} and {rest} more" if rest > 0 else names


class HallucinatedToolError(ToolError):
    """The model called a tool it was not offered. The engine knows only the tools of
    the run (`available`): whether the name is registered elsewhere is not its to say,
    and not offered is what matters to the run either way."""

    def __init__(self, tool_name: str, available: list[str]) -> None:
        super().__init__(
            f"The model requested tool '{_shown_name(tool_name)}', which is not one of "
            f"the tools offered to this run (offered: {_offered_tools(available)})",
            tool_name=tool_name,
        )
        self.available = available


class ToolDefinitionError(AgentForgeError, ValueError):
    """Tool definitions that cannot be registered. `problems` holds one (tool, reason)
    pair per problem, every bad tool listed, so a whole file is fixed in one pass."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        lines = "\n".join(f"- {tool}: {reason}" for tool, reason in problems)
        count = len(problems)
        super().__init__(f"{count} problem{'s' if count != 1 else ''} in the tool "
                         f"definitions:\n{lines}")
        self.problems = problems


class ToolLoopError(AgentForgeError):
    pass


class MaxRoundTripsExceededError(ToolLoopError):
    def __init__(self, limit: int) -> None:
        super().__init__(
            f"The model kept requesting tools after {limit} tool-calling round trips "
            f"(max_tool_calling_round_trips={limit})"
        )
        self.limit = limit


class LoopDetectedError(ToolLoopError):
    """A loop-health detector reached its policy's `stop_at` (loop/health.py): the
    run stops before the round's calls run. `detector` names it ("repeated_call",
    "ping_pong", "no_progress"), `count` is what it counted, `round_index` 0-based."""

    def __init__(self, message: str, *, detector: str, count: int, round_index: int) -> None:
        super().__init__(message)
        self.detector, self.count, self.round_index = detector, count, round_index


class CostCapExceededError(ToolLoopError):
    """The run stopped before a model call: what it spent (`spent_usd`), plus the least
    the call could cost, would pass its cost cap (`limit_usd`; pricing.CostCap).
    `round_index` is the round whose model call was not made (0-based)."""

    def __init__(self, *, spent_usd: Decimal, limit_usd: Decimal, next_minimum_usd: Decimal,
                 round_index: int) -> None:
        least = (f" and the next model call would cost at least ${next_minimum_usd}"
                 if next_minimum_usd else "")
        super().__init__(
            f"The run stopped before round {round_index + 1}'s model call: it has spent "
            f"${spent_usd}{least}, past its cost cap of ${limit_usd} (cost_cap_usd)")
        self.spent_usd, self.limit_usd = spent_usd, limit_usd
        self.next_minimum_usd, self.round_index = next_minimum_usd, round_index


class RunPaused(ToolLoopError):
    """The chat stopped at a point it can be resumed from (a ResumeState built from what
    was stored): before round `round_index`'s model call (`call_ids` empty), or before
    `call_ids` of that round executed (calls of the round not held may have run).
    `reason` says why: "approval" or "breakpoint"."""

    def __init__(self, message: str, *, call_ids: list[str], round_index: int,
                 reason: str) -> None:
        super().__init__(message)
        self.call_ids, self.round_index, self.reason = call_ids, round_index, reason


class ToolApprovalPending(RunPaused):
    """The chat stopped before executing a round because calls await a person's
    decision (`call_ids`); nothing of that round ran. Resume it (ResumeState with the
    pending response) once they are decided."""

    def __init__(self, call_ids: list[str], round_index: int) -> None:
        super().__init__(f"{len(call_ids)} tool call(s) of round {round_index + 1} await "
                         "a person's decision", call_ids=call_ids, round_index=round_index,
                         reason="approval")


class ProviderError(AgentForgeError):
    """Any failure talking to a model. The retry loop decides on `retryable` alone.

    The message never contains credentials: adapters build it from the provider's
    error body, which never echoes the key.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        status: int | None = None,
        error_type: str | None = None,
        code: str | None = None,
        request_id: str | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status
        self.error_type = error_type
        self.code = code
        self.request_id = request_id
        self.retryable = retryable
        self.retry_after = retry_after


class ModelTimeout(ProviderError):
    """The provider did not connect, or stayed silent (before its first byte or between
    two) longer than the endpoint's timeout allows for one attempt."""


@dataclass(frozen=True)
class ToolErrorContext:
    """Where a tool error happened, for handlers that want to tailor their message."""

    request: ToolExecutionRequest
    round_index: int
    attempt: int = 1


@dataclass(frozen=True)
class ToolErrorHandlerResult:
    """What a handler sends to the model instead of the tool's result."""

    text_value: str

    @classmethod
    def text(cls, text: str) -> ToolErrorHandlerResult:
        return cls(text_value=text)


HandlerReturn = ToolErrorHandlerResult | Awaitable[ToolErrorHandlerResult]
ToolArgumentsErrorHandler = Callable[[ToolArgumentsError, ToolErrorContext], HandlerReturn]
ToolExecutionErrorHandler = Callable[[ToolExecutionError, ToolErrorContext], HandlerReturn]
Approver = Callable[
    ["ToolExecutionRequest", ToolErrorContext],
    "bool | str | ToolExecutionRequest | Awaitable[bool | str | ToolExecutionRequest]",
]
"""Asked before a tool that requires approval runs: True to run it, False or a reason
(a non-empty str) to refuse it, or a request (same id and tool, edited arguments) to run
instead; may be async. Raising `ApprovalPending` pauses the chat (`ToolApprovalPending`)."""

HallucinatedToolStrategy = Callable[
    ["ToolExecutionRequest", list[str]],
    "ToolExecutionResultMessage | Awaitable[ToolExecutionResultMessage]",
]


ERROR_TEXT_LIMIT = 64 * 1024
"""The most characters an error policy's template formats to (65,536)."""


def format_error_template(template: str, values: Mapping[str, str], *,
                          limit: int = ERROR_TEXT_LIMIT) -> str:
    """An error policy's template with its placeholders filled, at most `limit`
    characters: past it the text is cut and ends with a marker saying so.

    Built piece by piece and stopped at the limit, so a stored template that repeats
    {arguments} thousands of times never allocates more than the limit. A placeholder
    gets its plain value: conversions and format specs (refused when a policy is saved)
    are ignored rather than applied ("{error:>999999999}" would allocate a gigabyte).
    A name not in `values` raises KeyError, as str.format does.
    """
    pieces: list[str] = []
    size = 0
    for literal, name, _spec, _conversion in string.Formatter().parse(template):
        for piece in (literal, None if name is None else values[name]):
            if not piece:
                continue
            if size + len(piece) > limit:
                return _cut("".join(pieces) + piece[:limit - size], limit)
            pieces.append(piece)
            size += len(piece)
    return "".join(pieces)


def _cut(text: str, limit: int) -> str:
    """`text` (`limit` characters) cut to end with the marker, `limit` in all."""
    marker = f" [... cut: error text limited to {limit:,} characters]"
    return text[:max(0, limit - len(marker))] + marker


def rethrow_arguments_error(
    error: ToolArgumentsError, context: ToolErrorContext
) -> ToolErrorHandlerResult:
    """Default for argument errors (seed 4.4): stop the run."""
    raise error


def execution_error_to_model(
    error: ToolExecutionError, context: ToolErrorContext
) -> ToolErrorHandlerResult:
    """Default for execution errors (seed 4.4): the error text goes back to the model."""
    return ToolErrorHandlerResult.text(str(error))


def throw_on_hallucinated_tool(
    request: ToolExecutionRequest, available: list[str]
) -> ToolExecutionResultMessage:
    """Default hallucinated-tool strategy (seed 4.4): stop the run."""
    raise HallucinatedToolError(request.name, available)


def tell_model_available_tools(
    request: ToolExecutionRequest, available: list[str]
) -> ToolExecutionResultMessage:
    """Replacement strategy: answer the call with an error naming the tools the model
    was offered, so it can call one of them instead."""
    from .messages import ToolExecutionResultMessage

    return ToolExecutionResultMessage(
        id=request.id,
        tool_name=request.name,
        text=f"Error: tool '{_shown_name(request.name)}' is not one of the tools offered "
             f"to this run. Offered tools: {_offered_tools(available)}",
        is_error=True,
    )


class ReplayDivergence(AgentForgeError):
    """A replay left its recording: the model or a tool was asked something the recording
    has no answer for. `round_index` (0-based) and `call_index` say where; the message
    says it in words. It stops the run: the loop never hands it to an error handler."""

    def __init__(self, message: str, *, round_index: int,
                 call_index: int | None = None) -> None:
        super().__init__(message)
        self.round_index = round_index
        self.call_index = call_index
