"""Demo tools: what `make run` registers so the playground works offline.

They are deliberately small and deterministic (fake weather, a fake order database) so
a scripted run gives the same timeline every time. Each one shows something the
debugger is for: parallel calls (get_weather), argument errors (calculator), a tool
that always raises (always_fails), a slow tool to demo a policy timeout (slow_tool, which
sets no timeout of its own on purpose), and a tool safe to re-execute after a worker
crash (lookup_order, idempotent). The two read-only lookups (get_weather, lookup_order)
are declared idempotent, as a user would declare such tools: a resumed run may call
them again, and their calls run without waiting for their start to be stored. None of
them touches the network or the file system.
"""

from __future__ import annotations

import ast
import asyncio
import math
import operator
from collections.abc import Callable
from typing import Annotated, Any, NoReturn

from pydantic import Field

from tools_app.engine import tool

# -- get_weather -----------------------------------------------------------------------

_WEATHER: dict[str, dict[str, Any]] = {
    "Hangzhou": {"condition": "light rain", "temperature_c": 18, "humidity_pct": 82},
    "Beijing": {"condition": "sunny", "temperature_c": 12, "humidity_pct": 30},
    "London": {"condition": "overcast", "temperature_c": 9, "humidity_pct": 76},
    "New York": {"condition": "partly cloudy", "temperature_c": 15, "humidity_pct": 55},
    "Paris": {"condition": "clear", "temperature_c": 14, "humidity_pct": 60},
    "Tokyo": {"condition": "windy", "temperature_c": 16, "humidity_pct": 64},
}
_CITY_ALIASES = {"杭州": "Hangzhou", "北京": "Beijing", "东京": "Tokyo", "nyc": "New York"}


def _canonical_city(city: str) -> str | None:
    cleaned = " ".join(city.split())
    if cleaned in _CITY_ALIASES:
        return _CITY_ALIASES[cleaned]
    folded = cleaned.casefold()
    if folded in _CITY_ALIASES:
        return _CITY_ALIASES[folded]
    return next((name for name in _WEATHER if name.casefold() == folded), None)


@tool(idempotent=True)  # a read: calling it twice changes nothing
def get_weather(
    city: Annotated[str, Field(description="City name, e.g. Hangzhou, 杭州 or London")],
) -> dict[str, Any] | str:
    """Current weather for a city (demo data: the same answer every time)."""
    name = _canonical_city(city)
    if name is None:
        # An answer rather than an exception: "no data" is a normal result the model
        # should relay, not a tool failure.
        return f"No weather data for {city!r}. Known cities: {', '.join(_WEATHER)}."
    return {"city": name, **_WEATHER[name]}


# -- calculator ------------------------------------------------------------------------

MAX_EXPRESSION_LENGTH = 200
MAX_EXPONENT = 1000
MAX_INTEGER_BITS = 4096  # ~1233 digits: far below Python's int-to-str limit

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


@tool
def calculator(
    expression: Annotated[
        str,
        Field(description="Arithmetic only: numbers, + - * / // % **, parentheses, e.g. (2+3)*4"),
    ],
) -> int | float:
    """Evaluate an arithmetic expression safely (no names, calls or attributes)."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise ValueError(f"expression is longer than {MAX_EXPRESSION_LENGTH} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not a valid arithmetic expression: {exc.msg}") from None
    try:
        return _check_size(_evaluate(tree.body))
    except ZeroDivisionError:
        raise ValueError("division by zero") from None
    except OverflowError:
        raise ValueError("the result is too large") from None


def _evaluate(node: ast.expr) -> int | float:
    # Whitelist walk: anything not listed here (names, calls, attributes, subscripts,
    # comparisons, strings...) is refused, so the input can never reach Python code.
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
        raise ValueError(f"only numbers are allowed, not {value!r}")
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _check_size(_UNARY[type(node.op)](_evaluate(node.operand)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        return _check_size(_BINARY[type(node.op)](left, right))
    raise ValueError(
        f"unsupported element {type(node).__name__!r}: only numbers, + - * / // % ** "
        "and parentheses are allowed"
    )


def _check_power(base: int | float, exponent: int | float) -> None:
    # Checked before computing: 9**9**9 would otherwise hang the worker.
    if abs(exponent) > MAX_EXPONENT:
        raise ValueError(f"exponent {exponent} is larger than {MAX_EXPONENT}")
    # (bits - 1) * exponent is a lower bound of the result's size; what passes is at most
    # MAX_EXPONENT bits over the limit, cheap to compute and then refused by _check_size.
    if (
        isinstance(base, int)
        and isinstance(exponent, int)
        and exponent > 0
        and (base.bit_length() - 1) * exponent > MAX_INTEGER_BITS
    ):
        raise ValueError("the result is too large")


def _check_size(value: object) -> int | float:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("the result is not a finite number")
        return value
    if isinstance(value, int):
        if value.bit_length() > MAX_INTEGER_BITS:
            raise ValueError("the result is too large")
        return value
    # (-8) ** 0.5 is complex in Python 3: not an answer a calculator should give.
    raise ValueError("the result is not a real number")


# -- convert_units ---------------------------------------------------------------------

# unit -> (dimension, factor to the base unit: metre, kilogram)
_LINEAR_UNITS: dict[str, tuple[str, float]] = {
    "mm": ("length", 0.001),
    "cm": ("length", 0.01),
    "m": ("length", 1.0),
    "km": ("length", 1000.0),
    "in": ("length", 0.0254),
    "ft": ("length", 0.3048),
    "yd": ("length", 0.9144),
    "mi": ("length", 1609.344),
    "mg": ("mass", 0.000001),
    "g": ("mass", 0.001),
    "kg": ("mass", 1.0),
    "t": ("mass", 1000.0),
    "oz": ("mass", 0.028349523125),
    "lb": ("mass", 0.45359237),
}
_TEMPERATURE_UNITS = ("C", "F", "K")
_UNIT_ALIASES = {
    "millimeter": "mm", "millimetre": "mm", "centimeter": "cm", "centimetre": "cm",
    "meter": "m", "metre": "m", "kilometer": "km", "kilometre": "km", "inch": "in",
    "foot": "ft", "feet": "ft", "yard": "yd", "mile": "mi", "milligram": "mg", "gram": "g",
    "kilogram": "kg", "tonne": "t", "ounce": "oz", "pound": "lb", "lbs": "lb",
    "c": "C", "°c": "C", "celsius": "C", "f": "F", "°f": "F", "fahrenheit": "F",
    "k": "K", "kelvin": "K",
}


def _canonical_unit(unit: str) -> str:
    cleaned = unit.strip()
    if cleaned in _LINEAR_UNITS or cleaned in _TEMPERATURE_UNITS:
        return cleaned
    folded = cleaned.casefold()
    alias = _UNIT_ALIASES.get(folded) or _UNIT_ALIASES.get(folded.removesuffix("s"))
    if alias is None:
        known = ", ".join([*_LINEAR_UNITS, *_TEMPERATURE_UNITS])
        raise ValueError(f"unknown unit {unit!r}; known units: {known}")
    return alias


def _dimension(unit: str) -> str:
    return "temperature" if unit in _TEMPERATURE_UNITS else _LINEAR_UNITS[unit][0]


def _to_kelvin(value: float, unit: str) -> float:
    kelvin = {"C": value + 273.15, "F": (value - 32) * 5 / 9 + 273.15, "K": value}[unit]
    if kelvin < 0:
        raise ValueError(f"{value} {unit} is below absolute zero")
    return kelvin


def _from_kelvin(kelvin: float, unit: str) -> float:
    return {"C": kelvin - 273.15, "F": (kelvin - 273.15) * 9 / 5 + 32, "K": kelvin}[unit]


@tool
def convert_units(
    value: Annotated[float, Field(description="The amount to convert")],
    from_unit: Annotated[str, Field(description="Unit of value: length, mass or temperature")],
    to_unit: Annotated[str, Field(description="Target unit of the same kind, e.g. km -> mi")],
) -> dict[str, Any]:
    """Convert a length (mm cm m km in ft yd mi), mass (mg g kg t oz lb) or temperature (C F K)."""
    source, target = _canonical_unit(from_unit), _canonical_unit(to_unit)
    if _dimension(source) != _dimension(target):
        raise ValueError(
            f"cannot convert {_dimension(source)} ({source}) to {_dimension(target)} ({target})"
        )
    if _dimension(source) == "temperature":
        converted = _from_kelvin(_to_kelvin(value, source), target)
    else:
        converted = value * _LINEAR_UNITS[source][1] / _LINEAR_UNITS[target][1]
    # 12 significant digits hide float noise such as 0.30000000000000004.
    return {"value": float(f"{converted:.12g}"), "unit": target}


# -- failing, slow and idempotent tools ------------------------------------------------


@tool
def always_fails(
    reason: Annotated[str, Field(description="The error message to raise")] = (
        "this demo tool always fails"
    ),
) -> NoReturn:
    """Always raise an error (demonstrates how the error policy handles a failing tool)."""
    raise RuntimeError(reason)


MAX_SLEEP_SECONDS = 30.0


@tool  # no timeout here on purpose: the error policy's default timeout is what it demos
async def slow_tool(
    seconds: Annotated[float, Field(ge=0, description="How long to sleep (capped at 30)")] = 2.0,
) -> str:
    """Sleep for a while, then answer (demonstrates timeouts and parallel execution)."""
    duration = min(seconds, MAX_SLEEP_SECONDS)
    await asyncio.sleep(duration)
    return f"Slept {duration:g} s"


_ORDERS: dict[str, dict[str, Any]] = {
    "A1001": {"status": "shipped", "items": ["USB-C cable"], "total_usd": 12.5},
    "A1002": {"status": "processing", "items": ["Keyboard", "Mouse"], "total_usd": 89.0},
    "A1003": {"status": "delivered", "items": ["Monitor"], "total_usd": 219.99},
}


@tool(idempotent=True)
def lookup_order(
    order_id: Annotated[str, Field(description="Order id, e.g. A1001")],
) -> dict[str, Any] | str:
    """Look up an order's status (read-only, so safe to run again after a crash)."""
    key = order_id.strip().upper()
    if key not in _ORDERS:
        return f"No order {order_id!r}. Known demo orders: {', '.join(_ORDERS)}."
    return {"order_id": key, **_ORDERS[key]}
