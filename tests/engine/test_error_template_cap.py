"""An error policy's template formats to at most 64 Ki characters (65,536), cut with a
marker: a stored template that repeats {arguments} cannot blow up the worker's memory."""

from __future__ import annotations

import pytest

from tools_app.engine.errors import ERROR_TEXT_LIMIT, format_error_template

VALUES = {"tool": "calculator", "error": "ValueError: boom", "arguments": '{"x": 1}'}


def test_a_template_formats_like_str_format() -> None:
    template = "{{literal}} {tool} failed: {error} ({arguments})"

    assert format_error_template(template, VALUES) == template.format(**VALUES)


def test_90000_argument_placeholders_are_cut_at_the_limit() -> None:
    arguments = "a" * 2_000

    text = format_error_template("{arguments}" * 90_000, VALUES | {"arguments": arguments})

    assert len(text) == ERROR_TEXT_LIMIT == 65_536
    assert text.endswith(" [... cut: error text limited to 65,536 characters]")
    assert text.startswith(arguments * 30)


def test_one_oversized_value_is_cut_too() -> None:
    text = format_error_template("Error: {error}", VALUES | {"error": "e" * 1_000_000})

    assert len(text) == ERROR_TEXT_LIMIT
    assert text.startswith("Error: eee")
    assert text.endswith("characters]")


def test_a_text_of_exactly_the_limit_is_not_cut() -> None:
    text = format_error_template("{error}", VALUES | {"error": "e" * ERROR_TEXT_LIMIT})

    assert text == "e" * ERROR_TEXT_LIMIT


def test_format_specs_and_conversions_of_an_old_template_are_not_applied() -> None:
    assert format_error_template("{error:>999999999}|{tool!r}", VALUES) == (
        "ValueError: boom|calculator")


def test_an_unknown_placeholder_raises_key_error_as_str_format_does() -> None:
    with pytest.raises(KeyError):
        format_error_template("{secret}", VALUES)
