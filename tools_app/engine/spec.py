"""Tool declarations: `@tool`, `ToolSpecification`, and JSON Schema from signatures.

The JSON schema of a tool is never written by hand: it is derived from the
function signature through a pydantic model built with `create_model`, and the same
model validates the model's arguments at execution time, so the schema the LLM sees
and the validation the tool gets can never drift apart.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, create_model

from .arguments import parse_arguments, schema_validator, validate_against_schema

TOOL_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_MARKER = "__agentforge_tool__"


class ReturnBehavior(StrEnum):
    TO_LLM = "to_llm"
    IMMEDIATE = "immediate"
    IMMEDIATE_IF_LAST = "immediate_if_last"


class ToolSpecification(BaseModel):
    """The provider-neutral declaration of one tool (name, description, JSON schema)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    strict: bool | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    def validate_arguments(self, arguments: str | Mapping[str, Any]) -> dict[str, Any]:
        """The arguments (raw JSON or already parsed) as a dict, if they satisfy
        `parameters` (JSON Schema Draft 2020-12); else a ToolArgumentsError listing every
        violation with its JSON pointer. The validator is compiled once per distinct
        schema and kept (arguments.schema_validator), not per call."""
        if isinstance(arguments, Mapping):
            parsed = dict(arguments)
        else:
            parsed = parse_arguments(arguments, self.name)
        return validate_against_schema(schema_validator(self.parameters), parsed, self.name)

    def __hash__(self) -> int:
        # Hashable despite its dict fields, so a {specification: executor} mapping works
        # (seed 4.1); equal specifications have the same canonical JSON.
        return hash(json.dumps(self.model_dump(mode="json"), sort_keys=True))


ToolParameters = dict[str, Any]
"""A JSON-Schema object describing a tool's arguments (the seed's ToolParameters)."""


@dataclass(frozen=True)
class ToolOptions:
    """What `@tool` records on a function besides its schema."""

    name: str | None = None
    description: str | None = None
    return_behavior: ReturnBehavior = ReturnBehavior.TO_LLM
    strict: bool | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    timeout: float | None = None
    requires_approval: bool = False
    idempotent: bool = False
    isolated: bool = False
    """Run in a worker process of its own (engine/isolation): stopped at its timeout."""


def P(name: str | None = None, description: str | None = None) -> Any:
    """The seed's @P: rename a parameter for the model and/or describe it.

    Use as `city: Annotated[str, P("city", "City name")]`; it is a pydantic Field
    whose alias is the name the model sees.
    """
    return Field(alias=name, description=description)


@typing.overload
def tool[F: Callable[..., Any]](
    func: F,
    *,
    name: str | None = None,
    description: str | None = None,
    return_behavior: ReturnBehavior = ReturnBehavior.TO_LLM,
    strict: bool | None = None,
    metadata: dict[str, Any] | None = None,
    timeout: float | None = None,
    requires_approval: bool = False,
    idempotent: bool = False,
    isolated: bool = False,
) -> F: ...
@typing.overload
def tool[F: Callable[..., Any]](
    func: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    return_behavior: ReturnBehavior = ReturnBehavior.TO_LLM,
    strict: bool | None = None,
    metadata: dict[str, Any] | None = None,
    timeout: float | None = None,
    requires_approval: bool = False,
    idempotent: bool = False,
    isolated: bool = False,
) -> Callable[[F], F]: ...
def tool[F: Callable[..., Any]](
    func: F | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    return_behavior: ReturnBehavior = ReturnBehavior.TO_LLM,
    strict: bool | None = None,
    metadata: dict[str, Any] | None = None,
    timeout: float | None = None,
    requires_approval: bool = False,
    idempotent: bool = False,
    isolated: bool = False,
) -> F | Callable[[F], F]:
    """Mark a function or method as a tool. Works as `@tool`, `@tool()` and `@tool(...)`."""
    options = ToolOptions(
        name=name,
        description=description,
        return_behavior=ReturnBehavior(return_behavior),
        strict=strict,
        metadata=dict(metadata or {}),
        timeout=timeout,
        requires_approval=requires_approval,
        idempotent=idempotent,
        isolated=isolated,
    )

    def mark(target: F) -> F:
        setattr(target, _MARKER, options)
        return target

    return mark(func) if func is not None else mark


def tool_options(func: Callable[..., Any]) -> ToolOptions | None:
    """The `@tool` options of a function or bound method, or None if it is not a tool."""
    target = getattr(func, "__func__", func)
    return cast(ToolOptions | None, getattr(target, _MARKER, None))


def is_tool(obj: object) -> bool:
    return callable(obj) and tool_options(cast(Callable[..., Any], obj)) is not None


def tool_name_from(func: Callable[..., Any]) -> str:
    options = tool_options(func)
    return (options.name if options and options.name else None) or func.__name__


@dataclass(frozen=True)
class ArgumentsModel:
    """The pydantic model of a function's parameters and how to call the function with it."""

    model: type[BaseModel]
    # python parameter name -> how to pass it (positional-only parameters go first)
    positional: tuple[str, ...]
    keyword: tuple[str, ...]


def arguments_model_for(func: Callable[..., Any], *, strict: bool = False) -> ArgumentsModel:
    """The pydantic model of `func`'s parameters (self/cls excluded), built once per
    function and strictness: a worker builds each run's tool executors afresh, and
    creating a pydantic model costs about as much as a round's tool call. Held weakly
    (by the function under a bound method, whose every instance has the same model), so
    a tool made per run (a closure, a partial) is forgotten with it."""
    key = func.__func__ if inspect.ismethod(func) else func
    try:
        known = _ARGUMENT_MODELS.setdefault(key, {})
    except TypeError:  # no weak reference to it, or no hash: built each time
        return _build_arguments_model(func, strict)
    model = known.get(strict)
    if model is None:
        model = known[strict] = _build_arguments_model(func, strict)
    return model


_ARGUMENT_MODELS: weakref.WeakKeyDictionary[Any, dict[bool, ArgumentsModel]] = (
    weakref.WeakKeyDictionary())


def _build_arguments_model(func: Callable[..., Any], strict: bool) -> ArgumentsModel:
    signature = inspect.signature(func)
    hints = _resolved_hints(func)
    fields: dict[str, Any] = {}
    positional: list[str] = []
    keyword: list[str] = []
    for param in _tool_parameters(func, signature):
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            raise TypeError(f"tool {func.__name__!r}: *{param.name} cannot be a tool argument")
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            raise TypeError(f"tool {func.__name__!r}: **{param.name} cannot be a tool argument")
        annotation = hints.get(param.name, Any)
        fields[param.name] = _field_for(param, annotation)
        target = positional if param.kind is inspect.Parameter.POSITIONAL_ONLY else keyword
        target.append(param.name)
    config = ConfigDict(
        extra="forbid" if strict else "ignore",
        populate_by_name=False,
        arbitrary_types_allowed=False,
    )
    model = create_model(f"{func.__name__}_arguments", __config__=config, **fields)
    return ArgumentsModel(model=model, positional=tuple(positional), keyword=tuple(keyword))


def _tool_parameters(
    func: Callable[..., Any], signature: inspect.Signature
) -> list[inspect.Parameter]:
    """The parameters the model fills in: `self`/`cls` of a method taken from its class
    (a plain function whose qualified name places it in a class) is not one of them."""
    params = list(signature.parameters.values())
    qualname = getattr(func, "__qualname__", "")
    owner = qualname.rsplit(".", 2)[-2] if "." in qualname else "<locals>"
    if (
        params
        and not inspect.ismethod(func)
        and owner != "<locals>"
        and params[0].name in ("self", "cls")
        and params[0].kind is not inspect.Parameter.KEYWORD_ONLY
    ):
        return params[1:]
    return params


def _resolved_hints(func: Callable[..., Any]) -> dict[str, Any]:
    """Type hints with string annotations resolved (`from __future__ import annotations`)."""
    target = getattr(func, "__func__", func)
    try:
        return typing.get_type_hints(target, include_extras=True)
    except NameError as exc:
        raise TypeError(f"tool {target.__name__!r}: cannot resolve annotation: {exc}") from exc


def _field_for(param: inspect.Parameter, annotation: Any) -> tuple[Any, Any]:
    # An Annotated[..., Field(...)] already carries a FieldInfo; pydantic merges it with
    # the default given here, so descriptions and aliases survive. A default (any
    # default, None included) is what makes a parameter optional.
    default = ... if param.default is inspect.Parameter.empty else param.default
    return (annotation, default)


def tool_specification_from(
    func: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
) -> ToolSpecification:
    """The ToolSpecification of a function or method (taken from a class or an instance)."""
    options = tool_options(func) or ToolOptions()
    arguments = arguments_model_for(func, strict=bool(options.strict))
    schema = _clean_schema(arguments.model.model_json_schema(by_alias=True))
    if options.strict:
        schema = strict_schema(schema)
    return ToolSpecification(
        name=name or tool_name_from(func),
        description=description or options.description or _docstring(func),
        parameters=schema,
        strict=options.strict,
        metadata=dict(options.metadata),
    )


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The form OpenAI's strict mode accepts: in every object, all properties required
    and no others allowed; an optional property becomes nullable instead (the executor
    turns a null back into the parameter's default)."""
    return cast(dict[str, Any], _strict_node(schema))


def _strict_node(node: Any) -> Any:
    if isinstance(node, list):
        return [_strict_node(item) for item in node]
    if not isinstance(node, dict):
        return node
    result = {key: _strict_node(value) for key, value in node.items()}
    properties = result.get("properties")
    if result.get("type") == "object" and isinstance(properties, dict):
        required = set(result.get("required", []))
        result["properties"] = {
            name: prop if name in required else _nullable(prop)
            for name, prop in properties.items()
        }
        result["required"] = list(properties)
        result["additionalProperties"] = False
    return result


def _nullable(prop: Any) -> Any:
    if not isinstance(prop, dict):
        return prop
    prop = {key: value for key, value in prop.items() if key != "default"}
    if prop.get("type") == "null" or {"type": "null"} in prop.get("anyOf", []):
        return prop
    if "anyOf" in prop:
        return {**prop, "anyOf": [*prop["anyOf"], {"type": "null"}]}
    description = prop.pop("description", None)
    nullable: dict[str, Any] = {"anyOf": [prop, {"type": "null"}]}
    if description is not None:
        nullable["description"] = description
    return nullable


def tool_specifications_from(source: object) -> list[ToolSpecification]:
    """Specifications of every @tool function of an object, class or module."""
    return [tool_specification_from(func) for func in tool_functions_of(source)]


def tool_functions_of(source: object) -> list[Callable[..., Any]]:
    """The @tool callables of an object (bound methods), a class, or a module, in order."""
    if isinstance(source, types.ModuleType):
        members = [value for value in vars(source).values() if _defined_in(value, source)]
    elif isinstance(source, type):
        members = [getattr(source, n) for n in _ordered_attribute_names(source)]
    else:
        members = [getattr(source, n) for n in _ordered_attribute_names(type(source))]
    return [member for member in members if is_tool(member)]


def _defined_in(value: object, module: types.ModuleType) -> bool:
    return getattr(value, "__module__", None) == module.__name__


def _ordered_attribute_names(cls: type) -> list[str]:
    """Attribute names in definition order, base classes first, without duplicates."""
    seen: dict[str, None] = {}
    for klass in reversed(cls.__mro__):
        for attr in vars(klass):
            seen.setdefault(attr, None)
    return [n for n in seen if not n.startswith("__")]


def validate_specifications(specifications: Iterable[ToolSpecification]) -> None:
    """Reject duplicate names and names the providers do not accept."""
    seen: set[str] = set()
    for spec in specifications:
        if not TOOL_NAME_PATTERN.match(spec.name):
            raise ValueError(
                f"tool name {spec.name!r} is invalid: providers require 1-64 characters "
                "from a-z, A-Z, 0-9, '_' and '-'"
            )
        if spec.name in seen:
            raise ValueError(f"tool {spec.name!r} is declared more than once")
        seen.add(spec.name)


def _docstring(func: Callable[..., Any]) -> str:
    return inspect.cleandoc(func.__doc__) if func.__doc__ else ""


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's auto-generated titles, which only add noise to the model's prompt."""
    cleaned = _strip_titles(schema)
    cleaned.setdefault("properties", {})
    cleaned["type"] = "object"
    if not cleaned.get("required"):
        cleaned.pop("required", None)
    return cast(dict[str, Any], cleaned)


def _strip_titles(node: Any, *, in_properties: bool = False) -> Any:
    if isinstance(node, dict):
        return {
            key: _strip_titles(value, in_properties=key in ("properties", "$defs"))
            for key, value in node.items()
            if in_properties or key != "title" or not isinstance(value, str)
        }
    if isinstance(node, list):
        return [_strip_titles(item) for item in node]
    return node
