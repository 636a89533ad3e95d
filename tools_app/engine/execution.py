"""Executing one tool call: argument parsing, validation, invocation, result text.

The seed's DefaultToolExecutor and ToolExecutionRequestUtil in Python form:
- arguments "" or "{}" -> empty object; invalid JSON / non-object -> ToolArgumentsError;
- arguments are validated by the pydantic model derived from the signature, so a
  missing or ill-typed value is a ToolArgumentsError naming the argument;
- result text: str as-is, None -> "Success", anything else -> JSON;
- the tool raising -> ToolExecutionError, except that a ToolArgumentsError raised inside
  the tool stays what it is (no exception disguise).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import json
import threading
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import pydantic_core
from pydantic import BaseModel, ValidationError

from .arguments import parse_arguments
from .errors import ToolArgumentsError, ToolExecutionError
from .messages import ToolExecutionRequest
from .spec import (
    ArgumentsModel,
    ToolSpecification,
    arguments_model_for,
    tool_name_from,
    tool_options,
)


@dataclass(frozen=True)
class ToolExecutionResult:
    """`text` goes to the model; `result` is the raw object, kept for the audit log only."""

    text: str
    result: Any = None
    is_error: bool = False
    error: BaseException | None = None

    @classmethod
    def success(cls, text: str, result: Any = None) -> ToolExecutionResult:
        return cls(text=text, result=result)

    @classmethod
    def failure(cls, text: str, cause: BaseException | None = None) -> ToolExecutionResult:
        return cls(text=text, is_error=True, error=cause)


@dataclass(frozen=True)
class ToolExecution:
    """One executed call: request, result, and when it ran (epoch seconds)."""

    request: ToolExecutionRequest
    result: ToolExecutionResult
    started_at: float
    finished_at: float

    @property
    def result_text(self) -> str:
        return self.result.text

    @property
    def has_failed(self) -> bool:
        return self.result.is_error

    @property
    def duration(self) -> float:
        return self.finished_at - self.started_at


@runtime_checkable
class ToolExecutor(Protocol):
    """How one tool call is executed. Raise ToolArgumentsError / ToolExecutionError."""

    async def execute_with_result(self, request: ToolExecutionRequest) -> ToolExecutionResult: ...


def arguments_as_map(request: ToolExecutionRequest) -> dict[str, Any]:
    """Parse the raw arguments JSON into an object (seed: ToolExecutionRequestUtil)."""
    return parse_arguments(request.arguments, request.name)


def result_text(result: Any) -> str:
    """str as-is; None -> "Success"; anything else -> deterministic JSON."""
    if result is None:
        return "Success"
    if isinstance(result, str):
        return result
    return json.dumps(to_jsonable(result), ensure_ascii=False)


def to_jsonable(value: Any) -> Any:
    """JSON-compatible form of any tool result: pydantic models, dataclasses, sets..."""
    return pydantic_core.to_jsonable_python(value, fallback=repr)


# What a tool raising counts as its own failure. SystemExit and KeyboardInterrupt are not
# Exceptions, but raised by a tool (a sys.exit() in a script turned tool) they mean only
# that the tool failed; let through, they would stop the worker's event loop, and every
# run on it. (Signals never raise KeyboardInterrupt here: tools run off the main thread,
# or under asyncio, which turns SIGINT into cancellation.)
TOOL_FAILURES = (Exception, SystemExit, KeyboardInterrupt)


def failure_text(exc: BaseException) -> str:
    detail = str(exc)
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


# Sync tools run on threads of their own, not on the event loop's default executor: a
# timed-out sync tool keeps its thread until it returns (Python cannot stop a thread), and
# a few stuck ones would otherwise take the default executor's handful of threads, which
# aiohttp also needs (to resolve host names): every model call would then hang too.
TOOL_THREADS = 64
_tool_pool: concurrent.futures.ThreadPoolExecutor | None = None
_tool_pool_lock = threading.Lock()


def _tool_threads() -> concurrent.futures.ThreadPoolExecutor:
    global _tool_pool
    with _tool_pool_lock:
        if _tool_pool is None:
            _tool_pool = concurrent.futures.ThreadPoolExecutor(
                TOOL_THREADS, thread_name_prefix="agentforge-tool")
        return _tool_pool


async def run_in_tool_thread(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """asyncio.to_thread on the tools' own threads (context variables included)."""
    context = contextvars.copy_context()
    call = functools.partial(context.run, func, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_tool_threads(), call)


class FunctionToolExecutor:
    """Executes a Python function (sync or async) with validated, coerced arguments.

    Sync functions run on the tools' own threads (run_in_tool_thread) so they never block
    the event loop.
    """

    def __init__(self, func: Callable[..., Any], *, strict: bool | None = None) -> None:
        options = tool_options(func)
        self.func = func
        self.name = tool_name_from(func)
        self.strict = strict if strict is not None else bool(options and options.strict)
        self.arguments: ArgumentsModel = arguments_model_for(func, strict=self.strict)
        self.is_async = inspect.iscoroutinefunction(func)

    async def execute(self, request: ToolExecutionRequest) -> str:
        return (await self.execute_with_result(request)).text

    async def execute_with_result(self, request: ToolExecutionRequest) -> ToolExecutionResult:
        validated = self.validate(request)
        args, kwargs = self._call_arguments(validated)
        value = await self._invoke(args, kwargs)
        return ToolExecutionResult.success(result_text(value), result=value)

    def validate(self, request: ToolExecutionRequest) -> BaseModel:
        raw = arguments_as_map(request)
        if self.strict:
            raw = self._defaults_for_nulls(raw)
        try:
            return self.arguments.model.model_validate(raw)
        except ValidationError as exc:
            raise ToolArgumentsError(
                _describe_validation_error(request.name, exc),
                tool_name=request.name,
                errors=_plain_errors(exc),
            ) from exc

    def _defaults_for_nulls(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Strict schemas send optional parameters as null: null means "use the default"."""
        return _drop_nulls_of_optionals(self.arguments.model, raw)

    def _call_arguments(self, validated: BaseModel) -> tuple[list[Any], dict[str, Any]]:
        args = [getattr(validated, name) for name in self.arguments.positional]
        kwargs = {name: getattr(validated, name) for name in self.arguments.keyword}
        return args, kwargs

    async def _invoke(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        try:
            if self.is_async:
                pending: Awaitable[Any] = self.func(*args, **kwargs)
                return await pending
            return await run_in_tool_thread(self.func, *args, **kwargs)
        except ToolArgumentsError:
            raise
        except asyncio.CancelledError:
            raise
        except TOOL_FAILURES as exc:
            raise ToolExecutionError(failure_text(exc), tool_name=self.name,
                                     cause=exc) from exc


class CallableToolExecutor:
    """Wraps a plain callable `request -> str | ToolExecutionResult` (sync or async).

    The seed's "a lambda is enough" executor.
    """

    def __init__(self, func: Callable[[ToolExecutionRequest], Any]) -> None:
        self.func = func

    async def execute(self, request: ToolExecutionRequest) -> str:
        return (await self.execute_with_result(request)).text

    async def execute_with_result(self, request: ToolExecutionRequest) -> ToolExecutionResult:
        try:
            value = self.func(request)
            if inspect.isawaitable(value):
                value = await value
        except (ToolArgumentsError, ToolExecutionError, asyncio.CancelledError):
            raise
        except TOOL_FAILURES as exc:
            raise ToolExecutionError(failure_text(exc), tool_name=request.name,
                                     cause=exc) from exc
        if isinstance(value, ToolExecutionResult):
            return value
        return ToolExecutionResult.success(result_text(value), result=value)


def _drop_nulls_of_optionals(model: type[BaseModel], raw: dict[str, Any]) -> dict[str, Any]:
    """Drop `null` for fields that have a default, recursing into nested models."""
    cleaned = dict(raw)
    for name, field in model.model_fields.items():
        key = field.alias or name
        value = cleaned.get(key)
        if value is None and key in cleaned and not field.is_required():
            del cleaned[key]
        elif isinstance(value, dict):
            nested = _model_in(field.annotation)
            if nested is not None:
                cleaned[key] = _drop_nulls_of_optionals(nested, value)
    return cleaned


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation like `M`, `M | None` or `Annotated[M, ...]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _plain_errors(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": [str(part) for part in err["loc"]], "msg": err["msg"], "type": err["type"]}
        for err in exc.errors(include_url=False, include_input=False)
    ]


def _describe_validation_error(tool_name: str, exc: ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(arguments)'}: {err['msg']}"
        for err in exc.errors(include_url=False)
    )
    return f"Invalid arguments for tool '{tool_name}': {problems}"


class SchemaValidatingExecutor:
    """Runs `inner` only for arguments that satisfy the specification's JSON schema.

    Tools that have no Python signature (mock, HTTP, MCP) are validated this way before
    they run; a violation is a ToolArgumentsError listing every problem with its JSON
    pointer, handled by the arguments-error policy exactly as for a Python tool."""

    def __init__(self, specification: ToolSpecification, inner: ToolExecutor) -> None:
        self.specification = specification
        self.inner = inner

    async def execute_with_result(self, request: ToolExecutionRequest) -> ToolExecutionResult:
        self.specification.validate_arguments(request.arguments)
        return await self.inner.execute_with_result(request)
