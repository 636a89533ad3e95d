"""The demo tools: deterministic answers, clear errors, and a calculator that is safe."""

import asyncio
import inspect
import re

import pytest

from tools_app.engine import (
    FunctionToolExecutor,
    ToolExecutionError,
    ToolExecutionRequest,
    tool_specifications_from,
)
from tools_app.engine.spec import tool_options
from tools_app.tools import example_tools
from tools_app.tools.example_tools import (
    always_fails,
    calculator,
    convert_units,
    get_weather,
    lookup_order,
    slow_tool,
)


def test_the_module_declares_the_six_demo_tools_in_order() -> None:
    names = [spec.name for spec in tool_specifications_from(example_tools)]
    assert names == ["get_weather", "calculator", "convert_units", "always_fails",
                     "slow_tool", "lookup_order"]
    assert "demo" in (example_tools.__doc__ or "").lower()


def test_every_tool_has_a_description_and_described_parameters() -> None:
    for spec in tool_specifications_from(example_tools):
        assert spec.description
        for name, schema in spec.parameters["properties"].items():
            assert schema.get("description"), f"{spec.name}.{name} has no description"


# -- get_weather -----------------------------------------------------------------------


def test_weather_of_hangzhou_is_the_same_under_its_chinese_name() -> None:
    assert get_weather("Hangzhou") == get_weather("杭州")
    assert get_weather("Hangzhou")["city"] == "Hangzhou"
    assert get_weather("Hangzhou")["temperature_c"] == 18


def test_weather_ignores_case_and_extra_spaces() -> None:
    assert get_weather("  new   YORK ") == get_weather("New York")


def test_weather_of_an_unknown_city_is_a_clear_answer_not_an_error() -> None:
    answer = get_weather("Atlantis")
    assert isinstance(answer, str)
    assert "No weather data for 'Atlantis'" in answer
    assert "Hangzhou" in answer


# -- calculator ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2", 3),
        ("(2 + 3) * 4", 20),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("7 % 3", 1),
        ("2 ** 10", 1024),
        ("-3 + 5", 2),
        ("-(2 + 3)", -5),
        ("2 ** -1", 0.5),
        ("1.5 * 4", 6.0),
        ("  10 - 2 * 3  ", 4),
    ],
)
def test_calculator_evaluates_arithmetic(expression: str, expected: float) -> None:
    assert calculator(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os')", "'Call'"),
        ("__import__('os').system('true')", "'Call'"),
        ("os", "'Name'"),
        ("x + 1", "'Name'"),
        ("(1).real", "'Attribute'"),
        ("(1).__class__.__bases__", "'Attribute'"),
        ("[1, 2][0]", "'Subscript'"),
        ("'a' * 3", "only numbers"),
        ("True + 1", "only numbers"),
        ("1 < 2", "'Compare'"),
        ("lambda: 1", "'Lambda'"),
        ("1 if 1 else 2", "'IfExp'"),
        ("1 << 100", "'BinOp'"),
        ("~1", "'UnaryOp'"),
        ("2 +", "not a valid arithmetic expression"),
        ("1; 2", "not a valid arithmetic expression"),
        ("9 ** 9 ** 9", "larger than 1000"),
        ("2 ** 1001", "larger than 1000"),
        ("99999999999999 ** 1000", "too large"),
        ("(9 ** 999) * (9 ** 999) * (9 ** 999)", "too large"),
        ("10.0 ** 400", "too large"),
        ("1e308 * 10", "not a finite number"),
        ("(-8) ** 0.5", "not a real number"),
        ("1 / 0", "division by zero"),
        ("1 % 0", "division by zero"),
        ("1 + " * 60 + "1", "longer than 200"),
    ],
)
def test_calculator_rejects_anything_but_arithmetic(expression: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        calculator(expression)


async def test_a_rejected_expression_reaches_the_model_as_a_tool_error() -> None:
    executor = FunctionToolExecutor(calculator)
    request = ToolExecutionRequest(
        id="c1", name="calculator", arguments='{"expression": "__import__(\'os\')"}'
    )
    with pytest.raises(ToolExecutionError, match="Call"):
        await executor.execute_with_result(request)


# -- convert_units ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "source", "target", "expected"),
    [
        (10, "km", "mi", 6.21371192237),
        (1, "mi", "m", 1609.344),
        (12, "in", "ft", 1.0),
        (1, "pounds", "kg", 0.45359237),
        (1500, "g", "kg", 1.5),
        (100, "C", "F", 212.0),
        (32, "fahrenheit", "celsius", 0.0),
        (0, "K", "C", -273.15),
        (1, "Kilometres", "Metres", 1000.0),
    ],
)
def test_convert_units_converts_within_a_dimension(
    value: float, source: str, target: str, expected: float
) -> None:
    assert convert_units(value, source, target)["value"] == pytest.approx(expected)


def test_convert_units_names_the_target_unit_canonically() -> None:
    assert convert_units(1, "kilometer", "miles") == {"value": 0.621371192237, "unit": "mi"}


def test_convert_units_refuses_incompatible_units() -> None:
    with pytest.raises(ValueError, match=r"cannot convert length \(km\) to mass \(kg\)"):
        convert_units(1, "km", "kg")


def test_convert_units_refuses_unknown_units() -> None:
    with pytest.raises(ValueError, match="unknown unit 'parsec'; known units: mm"):
        convert_units(1, "parsec", "km")


def test_convert_units_refuses_temperatures_below_absolute_zero() -> None:
    with pytest.raises(ValueError, match="below absolute zero"):
        convert_units(-300, "C", "K")


# -- always_fails, slow_tool, lookup_order ---------------------------------------------


def test_always_fails_raises_its_reason() -> None:
    with pytest.raises(RuntimeError, match=r"^disk full$"):
        always_fails("disk full")


def test_always_fails_has_a_default_reason() -> None:
    with pytest.raises(RuntimeError, match="always fails"):
        always_fails()


async def test_slow_tool_is_async_and_sleeps() -> None:
    assert inspect.iscoroutinefunction(slow_tool)
    assert await slow_tool(0.01) == "Slept 0.01 s"


async def test_slow_tool_caps_the_sleep_at_30_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    assert await slow_tool(3600) == "Slept 30 s"
    assert slept == [30.0]


def test_slow_tool_sets_no_timeout_so_the_policy_timeout_applies() -> None:
    options = tool_options(slow_tool)
    assert options is not None
    assert options.timeout is None
    [spec] = [s for s in tool_specifications_from(example_tools) if s.name == "slow_tool"]
    assert spec.parameters["properties"]["seconds"]["default"] == 2.0
    assert spec.parameters["properties"]["seconds"]["minimum"] == 0


def test_lookup_order_is_idempotent_and_finds_known_orders() -> None:
    options = tool_options(lookup_order)
    assert options is not None
    assert options.idempotent is True
    assert lookup_order(" a1001 ") == {
        "order_id": "A1001", "status": "shipped", "items": ["USB-C cable"], "total_usd": 12.5,
    }


def test_lookup_order_answers_clearly_for_an_unknown_order() -> None:
    answer = lookup_order("Z9")
    assert isinstance(answer, str)
    assert answer.startswith("No order 'Z9'")


def test_only_the_read_only_lookups_are_idempotent() -> None:
    idempotent = [
        f.__name__ for f in (get_weather, calculator, convert_units, always_fails, slow_tool,
                             lookup_order)
        if (options := tool_options(f)) is not None and options.idempotent
    ]
    assert idempotent == ["get_weather", "lookup_order"]
