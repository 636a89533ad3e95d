"""One chat() call of a ToolService: the model <-> tools loop (seed chapter 4).

`ChatRun.execute`:
  1. calls the model with every registered tool merged into the request parameters;
  2. if the answer has no tool calls, returns it;
  3. otherwise checks the round's calls for loop health (round_health.py: repeated
     calls, ping-pong, no progress; noted, told to the model or stopping the run), executes
     them (concurrently unless told otherwise, results kept in request order), turns
     errors into text for the model or stops per the handlers, appends the assistant
     message and the results, and either returns at once (ReturnBehavior) or goes back
     to 1, at most `max_tool_calling_round_trips` times.
Every step is reported to observers as a typed event (see events.py). Where the loop
stops for a person (approvals, breakpoints) is gates.py; what the model calls cost and
the cost cap, spending.py. The registry and its configuration (ToolService) are
service.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any

from ..errors import (
    MaxRoundTripsExceededError,
    ReplayDivergence,
    RunPaused,
    ToolArgumentsError,
    ToolErrorContext,
    ToolErrorHandlerResult,
    ToolExecutionError,
    ToolRejectedError,
    ToolUnknownOutcomeError,
)
from ..events import (
    ChatFailed,
    ChatFinished,
    ChatPaused,
    ChatStarted,
    ModelRequestSent,
    ModelResponseReceived,
    Observer,
    PartialText,
    PartialToolCall,
    RoundStarted,
    ToolCallOutcome,
    ToolCallProposed,
    ToolCallStarted,
    bind_emitter,
    bind_round,
    reset_emitter,
    reset_round,
)
from ..execution import ToolExecution, ToolExecutionResult
from ..messages import (
    AiMessage,
    ChatMessage,
    ChatRequest,
    ChatRequestParameters,
    ChatResponse,
    TokenUsage,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
)
from ..providers.base import ChatModel
from ..spec import ReturnBehavior
from .callbacks import maybe_await
from .contract import (
    LoopSettings,
    RegisteredTool,
    ResumeState,
    ToolChatResult,
    should_return_immediately,
)
from .gates import (
    Verdict,
    approvals,
    gate_answer,
    held_calls_pause,
    messages_before_model_call,
)
from .invocation import finished_event, handler_name, invoke_tool, outcome_of, run_together
from .round_health import RoundHealth
from .spending import Spending


@dataclass
class _CallOutcome:
    message: ToolExecutionResultMessage
    behavior: ReturnBehavior
    is_error: bool
    execution: ToolExecution | None


class ChatRun:
    """State of one chat() call. Kept apart from ToolService, which stays reusable."""

    def __init__(
        self,
        service: LoopSettings,
        model: ChatModel,
        messages: list[ChatMessage],
        parameters: ChatRequestParameters | None,
        observers: list[Observer],
    ) -> None:
        self.service = service
        self.model = model
        self.messages = messages
        self.parameters = service.request_parameters(parameters)
        self.observers = observers
        # Events are built only for someone: the engine used as a library without
        # observers builds none (a run's dozen pydantic events per round), and neither
        # do the providers (no emitter is bound).
        self.observed = bool(observers)
        self.round_index = 0
        self.executions: list[ToolExecution] = []
        self.intermediate: list[ChatResponse] = []
        self.usage: TokenUsage | None = None
        # perf_counter() when the current model call's first streamed piece arrived
        self._first_token: float | None = None
        self.health = RoundHealth(service.loop_health, messages)
        self.spending = Spending(service.price, service.cost_cap)

    async def _emit(self, event: Any) -> None:
        # The loop's own events carry their round already, and provider events take it
        # from `bind_round`; an event from deeper down that has none (a custom model
        # emitting outside `chat`) is stamped here, which costs a copy.
        if event.round_index is None and not isinstance(event, (ChatStarted, ChatFinished)):
            event = event.model_copy(update={"round_index": self.round_index})
        if self._first_token is None and isinstance(event, (PartialText, PartialToolCall)):
            self._first_token = time.perf_counter()
        for observer in self.observers:
            await maybe_await(observer(event))

    async def execute(self, resume: ResumeState | None) -> ToolChatResult:
        token = bind_emitter(self._emit if self.observed else None)
        round_token = bind_round(None)
        try:
            if self.observed:
                await self._emit(
                    ChatStarted(
                        tool_names=[s.name for s in self.service.tool_specifications],
                        message_count=len(self.messages),
                    )
                )
            return await self._loop(resume)
        except RunPaused as paused:
            if self.observed:
                await self._emit(ChatPaused(call_ids=paused.call_ids, reason=paused.reason,
                                            round_index=paused.round_index))
            raise
        except asyncio.CancelledError as cancelled:
            if self.observed:
                # Whoever cancelled may say why (a run's deadline does).
                await self._emit(ChatFailed(error_type="CancelledError",
                                            message=str(cancelled) or "The run was cancelled",
                                            cancelled=True))
            raise
        except Exception as exc:
            if self.observed:
                await self._emit(ChatFailed(error_type=type(exc).__name__, message=str(exc)))
            raise
        finally:
            reset_round(round_token)
            reset_emitter(token)

    async def _loop(self, resume: ResumeState | None) -> ToolChatResult:
        round_trips = 0
        pending: ChatResponse | None = None
        if resume is not None:
            self.round_index = resume.round_index
            round_trips = resume.round_trips_done
            pending = resume.pending_response
            self.intermediate.extend(resume.intermediate_responses)
            self.spending.resume(resume)
        limit = self.service.max_tool_calling_round_trips
        while True:
            response = pending if pending is not None else await self._call_model()
            ai_message = response.ai_message
            if not ai_message.has_tool_execution_requests():
                return await self._finish(response, immediate=False)
            if round_trips >= limit:
                raise MaxRoundTripsExceededError(limit)
            # A resumed round was checked (and its findings reported) before it paused.
            await self.health.check(ai_message.tool_execution_requests, self.round_index,
                                    emit=self._emit if self.observed else None,
                                    report=pending is None)
            round_trips += 1
            self.intermediate.append(response)
            self.messages.append(ai_message)
            outcomes = await self._execute_round(ai_message, resume if pending else None)
            pending = None
            self.messages.extend(outcome.message for outcome in outcomes)
            self.health.record(ai_message.tool_execution_requests,
                               [outcome.message for outcome in outcomes])
            any_error = any(outcome.is_error for outcome in outcomes)
            if not any_error and should_return_immediately([o.behavior for o in outcomes]):
                self.intermediate.pop()
                return await self._finish(response, immediate=True)
            self.round_index += 1

    async def _call_model(self) -> ChatResponse:
        self.spending.check_cap(self.round_index)
        # The hook may raise RunPaused: nothing of this round has happened.
        self.messages.extend(await messages_before_model_call(
            self.service.before_model_call, self.round_index, self.messages))
        # Built from the loop's own validated messages: validating the whole history
        # again every round would cost O(history) per round for nothing.
        request = ChatRequest.model_construct(messages=tuple(self.messages),
                                              parameters=self.parameters)
        if self.observed:
            await self._emit(RoundStarted(round_index=self.round_index))
        if self.observed:
            await self._emit(
                ModelRequestSent(
                    round_index=self.round_index,
                    message_count=len(request.messages),
                    tool_names=[t.name for t in request.parameters.tools or ()],
                )
            )
        started = time.perf_counter()
        self._first_token = None
        bind_round(self.round_index)
        response = await self.model.chat(request)
        latency_ms = (time.perf_counter() - started) * 1000
        first_token_ms = (
            (self._first_token - started) * 1000 if self._first_token is not None else None
        )
        self.usage = response.usage + self.usage if response.usage else self.usage
        cost = self.spending.count(response)
        if self.observed:
            price = self.service.price
            await self._emit(
                ModelResponseReceived(round_index=self.round_index, response=response,
                                      latency_ms=latency_ms,
                                      first_token_ms=first_token_ms, usage=response.usage,
                                      cost=cost,
                                      price_revision=price.revision if price else None)
            )
        return response

    async def _finish(self, response: ChatResponse, *, immediate: bool) -> ToolChatResult:
        if self.observed:
            await self._emit(
                ChatFinished(
                    final_text=response.ai_message.text,
                    reason="immediate_return" if immediate else "model_stopped",
                    rounds=self.round_index + 1,
                    tool_calls=len(self.executions),
                    usage=self.usage,
                    round_index=self.round_index,
                )
            )
        if not immediate:
            self.messages.append(response.ai_message)
        return ToolChatResult(
            final_response=response,
            tool_executions=list(self.executions),
            intermediate_responses=list(self.intermediate),
            messages=list(self.messages),
            usage=self.usage,
            returned_immediately=immediate,
        )

    # -- one round of tool calls -------------------------------------------------------

    async def _execute_round(
        self, ai_message: AiMessage, resume: ResumeState | None
    ) -> list[_CallOutcome]:
        requests = list(ai_message.tool_execution_requests)
        # The calls' tasks see the round (`events.current_round`), a resumed round too,
        # whose model call (which binds it otherwise) was not made again.
        bind_round(self.round_index)
        shares = self.spending.call_shares(len(requests))
        for index, request in enumerate(requests):
            if self.observed:
                await self._emit(
                    ToolCallProposed(
                        round_index=self.round_index,
                        call_index=index,
                        request=request,
                        known_tool=request.name in self.service.registered_tools,
                        cost=shares[index],
                    )
                )
        done = dict(resume.completed_results) if resume else {}
        unknown = resume.unknown_outcome_ids if resume else frozenset()
        to_run = [r for r in requests if r.id not in done]
        tools = self.service.registered_tools
        flagged = [r for r in to_run if r.name in tools and tools[r.name].requires_approval]
        verdicts = await approvals(self.service.approver, flagged, self.round_index)
        answer = await gate_answer(self.service.call_gate, to_run, verdicts,
                                   self.round_index)

        async def run_one(request: ToolExecutionRequest) -> _CallOutcome:
            if request.id in done:
                return self._replayed(request, done[request.id])
            return await self._execute_call(request, in_doubt=request.id in unknown,
                                            verdict=verdicts.get(request.id))

        now = [r for r in requests if r.id not in answer.hold]
        if not self.service.parallel or len(now) == 1:
            outcomes = [await run_one(request) for request in now]
        else:
            outcomes = await self._run_concurrently(now, run_one)
        if answer.hold:  # the calls that ran are stored: a resume replays them
            raise held_calls_pause(requests, answer, self.round_index)
        self.executions.extend(o.execution for o in outcomes if o.execution is not None)
        return outcomes

    async def _run_concurrently(
        self,
        requests: list[ToolExecutionRequest],
        run_one: Callable[[ToolExecutionRequest], Coroutine[Any, Any, _CallOutcome]],
    ) -> list[_CallOutcome]:
        cap = self.service.max_concurrency
        if cap is None or cap >= len(requests):  # nothing to hold back
            return await run_together([run_one(request) for request in requests])
        semaphore = asyncio.Semaphore(cap)

        async def limited(request: ToolExecutionRequest) -> _CallOutcome:
            async with semaphore:
                return await run_one(request)

        return await run_together([limited(request) for request in requests])

    def _replayed(
        self, request: ToolExecutionRequest, message: ToolExecutionResultMessage
    ) -> _CallOutcome:
        registered = self.service.registered_tools.get(request.name)
        behavior = registered.return_behavior if registered else ReturnBehavior.TO_LLM
        return _CallOutcome(message=message, behavior=behavior, is_error=message.is_error,
                            execution=None)

    async def _execute_call(self, request: ToolExecutionRequest, *, in_doubt: bool,
                            verdict: Verdict | None = None) -> _CallOutcome:
        registered = self.service.registered_tools.get(request.name)
        if registered is None:
            return await self._hallucinated(request)
        if isinstance(verdict, ToolRejectedError):
            return await self._handle(registered, request, time.time(), verdict, "rejected")
        if isinstance(verdict, ToolExecutionRequest):
            request = verdict  # edited arguments; same id and tool
        if self.observed:
            await self._emit(ToolCallStarted(round_index=self.round_index, call_id=request.id,
                                             tool_name=request.name))
        started = time.time()
        try:
            if in_doubt:
                raise ToolUnknownOutcomeError(
                    f"The outcome of tool '{request.name}' is unknown: its worker stopped while "
                    "it ran, and the tool is not idempotent, so it was not run again",
                    tool_name=request.name,
                )
            result = await invoke_tool(registered, request,
                                       default_timeout=self.service.default_timeout)
        except asyncio.CancelledError:
            await self._report_finished(request, started, "cancelled", None, error=None,
                                        handled_by=None)
            raise
        except ReplayDivergence as error:
            # A replay told to stop where it leaves its recording: no handler decides.
            await self._report_finished(request, started, "execution_error", None,
                                        error=error, handled_by="replay", stopped_run=True)
            raise
        except ToolArgumentsError as error:
            return await self._handle(registered, request, started, error, "arguments_error")
        except ToolExecutionError as error:
            return await self._handle(registered, request, started, error, outcome_of(error))
        if request.id in self.health.notes:
            result = replace(result, text=self.health.noted(request, result.text))
        execution = ToolExecution(request, result, started, time.time())
        await self._report_finished(request, started, "succeeded", result, error=None,
                                    handled_by=None)
        message = ToolExecutionResultMessage(id=request.id, tool_name=request.name,
                                             text=result.text, is_error=result.is_error)
        return _CallOutcome(message, registered.return_behavior, result.is_error, execution)

    async def _handle(
        self,
        registered: RegisteredTool,
        request: ToolExecutionRequest,
        started: float,
        error: ToolArgumentsError | ToolExecutionError,
        outcome: ToolCallOutcome,
    ) -> _CallOutcome:
        handler: Callable[[Any, ToolErrorContext], Any] = (
            self.service.arguments_error_handler
            if isinstance(error, ToolArgumentsError)
            else self.service.execution_error_handler
        )
        context = ToolErrorContext(request=request, round_index=self.round_index)
        name = handler_name(handler)
        try:
            decision = await maybe_await(handler(error, context))
            if not isinstance(decision, ToolErrorHandlerResult):
                raise TypeError(f"error handler {name} returned {decision!r}, "
                                "expected ToolErrorHandlerResult")
        except BaseException:
            await self._report_finished(request, started, outcome, None, error=error,
                                        handled_by=name, stopped_run=True)
            raise
        text = self.health.noted(request, decision.text_value)
        result = ToolExecutionResult.failure(text, error)
        await self._report_finished(request, started, outcome, result, error=error,
                                    handled_by=name)
        execution = ToolExecution(request, result, started, time.time())
        message = ToolExecutionResultMessage(id=request.id, tool_name=request.name, text=text,
                                             is_error=True)
        return _CallOutcome(message, registered.return_behavior, True, execution)

    async def _hallucinated(self, request: ToolExecutionRequest) -> _CallOutcome:
        strategy = self.service.hallucinated_tool_strategy
        available = list(self.service.registered_tools)
        started = time.time()
        name = handler_name(strategy)
        try:
            message = await maybe_await(strategy(request, available))
        except BaseException as error:
            await self._report_finished(request, started, "hallucinated", None, error=error,
                                        handled_by=name, stopped_run=True)
            raise
        message = message.model_copy(update={"id": request.id, "is_error": True,
                                             "text": self.health.noted(request, message.text)})
        result = ToolExecutionResult.failure(message.text)
        await self._report_finished(request, started, "hallucinated", result, error=None,
                                    handled_by=name)
        execution = ToolExecution(request, result, started, time.time())
        return _CallOutcome(message, ReturnBehavior.TO_LLM, True, execution)

    async def _report_finished(
        self,
        request: ToolExecutionRequest,
        started: float,
        outcome: ToolCallOutcome,
        result: ToolExecutionResult | None,
        *,
        error: BaseException | None,
        handled_by: str | None,
        stopped_run: bool = False,
    ) -> None:
        if self.observed:
            await self._emit(finished_event(self.round_index, request, started, outcome,
                                            result, error=error, handled_by=handled_by,
                                            stopped_run=stopped_run))
