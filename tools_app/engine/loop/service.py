"""ToolService: the tool registry and the configuration of its chat loop (seed chapter
4). Registering turns functions, objects' tool methods and executors into
`RegisteredTool`s; `chat()` runs one conversation through the loop (chat_run.py), with
every registered tool offered to the model.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, cast

from ..errors import (
    Approver,
    HallucinatedToolStrategy,
    ToolArgumentsErrorHandler,
    ToolExecutionErrorHandler,
    execution_error_to_model,
    rethrow_arguments_error,
    throw_on_hallucinated_tool,
)
from ..events import Observer
from ..execution import CallableToolExecutor, FunctionToolExecutor, ToolExecutor
from ..isolation import IsolatedFunctionExecutor, IsolationSettings
from ..messages import ChatMessage, ChatRequestParameters
from ..pricing import CostCap, TokenPrice
from ..providers.base import ChatModel
from ..spec import (
    ReturnBehavior,
    ToolOptions,
    ToolSpecification,
    tool_functions_of,
    tool_options,
    tool_specification_from,
    validate_specifications,
)
from .chat_run import ChatRun
from .contract import RegisteredTool, ResumeState, ToolChatResult
from .gates import CallGate, ModelCallHook
from .health import LoopHealth

DEFAULT_MAX_ROUND_TRIPS = 100


class ToolService:
    """Registry of tools plus the configurable chat loop."""

    def __init__(
        self,
        *,
        max_tool_calling_round_trips: int = DEFAULT_MAX_ROUND_TRIPS,
        parallel: bool = True,
        max_concurrency: int | None = None,
        default_timeout: float | None = None,
        arguments_error_handler: ToolArgumentsErrorHandler = rethrow_arguments_error,
        execution_error_handler: ToolExecutionErrorHandler = execution_error_to_model,
        hallucinated_tool_strategy: HallucinatedToolStrategy = throw_on_hallucinated_tool,
        observers: Iterable[Observer] = (),
        approver: Approver | None = None,
        call_gate: CallGate | None = None,
        before_model_call: ModelCallHook | None = None,
        loop_health: LoopHealth | None = None,
        price: TokenPrice | None = None,
        cost_cap_usd: Decimal | None = None,
        isolation: IsolationSettings | None = None,
    ) -> None:
        if max_tool_calling_round_trips < 1:
            raise ValueError("max_tool_calling_round_trips must be at least 1")
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self._tools: dict[str, RegisteredTool] = {}
        # The worker pool of the @tool(isolated=True) functions registered here.
        self.isolation = isolation or IsolationSettings()
        self.max_tool_calling_round_trips = max_tool_calling_round_trips
        self.parallel = parallel
        self.max_concurrency = max_concurrency
        self.default_timeout = default_timeout
        self.arguments_error_handler = arguments_error_handler
        self.execution_error_handler = execution_error_handler
        self.hallucinated_tool_strategy = hallucinated_tool_strategy
        self.observers: list[Observer] = list(observers)
        self.approver = approver
        """Asked before any call of a tool registered with requires_approval executes:
        True runs it; False or a message refuses it. Without one, such calls are refused:
        a safety flag is never silently ignored."""
        self.call_gate = call_gate
        """Breakpoints on calls: may hold calls of a round (a pause) or edit them."""
        self.before_model_call = before_model_call
        """Breakpoints on model calls: may pause before one, or add messages to it."""
        self.loop_health = loop_health
        """Repeated calls, ping-pong and no progress (health.py): flagged, told to the
        model or stopping the run per its rules. None: not checked."""
        self.price = price
        """What the model's tokens cost (pricing.py): each round's cost is reported with
        its response, each call's share with its proposal. None: no price."""
        if cost_cap_usd is not None and price is None:
            raise ValueError("a cost cap needs a price to count the cost")
        self.cost_cap = (CostCap(cost_cap_usd, price)
                         if cost_cap_usd is not None and price is not None else None)
        """Stops the run before a model call that would pass it (pricing.CostCap)."""

    # -- registration ------------------------------------------------------------------

    def tools(self, source: object) -> ToolService:
        """Register @tool functions of an object, class or module, a list mixing those
        and @tool functions, or a mapping / list of (specification, executor) pairs."""
        if isinstance(source, Mapping):
            for spec, executor in source.items():
                self.tool(spec, executor)
        elif isinstance(source, (list, tuple)):
            for item in source:
                self._register_item(item)
        else:
            self._register_item(source)
        return self

    def _register_item(self, item: object) -> None:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], ToolSpecification):
            self.tool(item[0], item[1])
        elif callable(item) and not isinstance(item, type) and tool_options(item) is not None:
            self.tool(item)
        else:
            functions = tool_functions_of(item)
            if not functions and not isinstance(item, types.ModuleType):
                raise ValueError(f"{item!r} has no @tool functions")
            for func in functions:
                self.tool(func)

    def tool(
        self,
        target: object,
        executor_or_method: object = None,
        *,
        return_behavior: ReturnBehavior | None = None,
        timeout: float | None = None,
        idempotent: bool | None = None,
        requires_approval: bool | None = None,
    ) -> ToolService:
        """Register one tool: a function, `(obj, "method_name")`, or `(spec, executor)`."""
        if isinstance(target, ToolSpecification):
            executor = _as_executor(executor_or_method)
            options = ToolOptions()
            spec = target
        else:
            func = _resolve_function(target, executor_or_method)
            options = tool_options(func) or ToolOptions()
            spec = tool_specification_from(func)
            executor = (IsolatedFunctionExecutor(func, settings=self.isolation)
                        if options.isolated else FunctionToolExecutor(func))
        self.register(
            RegisteredTool(
                specification=spec,
                executor=executor,
                return_behavior=return_behavior or options.return_behavior,
                timeout=timeout if timeout is not None else options.timeout,
                idempotent=idempotent if idempotent is not None else options.idempotent,
                requires_approval=(
                    requires_approval
                    if requires_approval is not None
                    else options.requires_approval
                ),
            )
        )
        return self

    def register(self, registered: RegisteredTool) -> ToolService:
        name = registered.specification.name
        if name in self._tools:
            raise ValueError(f"Duplicate tool name: {name!r} is already registered")
        validate_specifications([registered.specification])
        self._tools[name] = registered
        return self

    @property
    def tool_specifications(self) -> list[ToolSpecification]:
        return [t.specification for t in self._tools.values()]

    @property
    def registered_tools(self) -> Mapping[str, RegisteredTool]:
        return types.MappingProxyType(self._tools)

    def request_parameters(
        self, user_parameters: ChatRequestParameters | None
    ) -> ChatRequestParameters:
        """Registered tools are always included; the caller's other fields win (seed 4.3)."""
        registered = tuple(self.tool_specifications)
        merged = ChatRequestParameters().override_with(user_parameters)
        extra = tuple(
            spec for spec in (merged.tools or ()) if spec.name not in self._tools
        )
        tools = registered + extra
        return merged.model_copy(update={"tools": tools or None})

    # -- the loop ----------------------------------------------------------------------

    async def chat(
        self,
        model: ChatModel,
        messages: Sequence[ChatMessage],
        parameters: ChatRequestParameters | None = None,
        *,
        observers: Iterable[Observer] = (),
        resume: ResumeState | None = None,
    ) -> ToolChatResult:
        run = ChatRun(self, model, list(messages), parameters, [*self.observers, *observers])
        return await run.execute(resume)


def _resolve_function(target: object, method: object) -> Callable[..., Any]:
    if isinstance(method, str):
        func = getattr(target, method, None)
        if func is None or not callable(func):
            raise ValueError(f"{target!r} has no method {method!r}")
        return cast(Callable[..., Any], func)
    if method is not None:
        raise TypeError("the second argument must be a method name or omitted")
    if not callable(target):
        raise TypeError(f"{target!r} is not a function")
    return cast(Callable[..., Any], target)


def _as_executor(executor: object) -> ToolExecutor:
    if isinstance(executor, ToolExecutor):
        return executor
    if callable(executor):
        return CallableToolExecutor(executor)
    raise TypeError(f"{executor!r} is neither a ToolExecutor nor a callable")
