"""The run header's words for the settings a run used: the error modes as the admin's
policy form names them."""

from __future__ import annotations

import pytest
from django.db import models

from tools_app.models import ArgumentsErrorMode, ExecutionErrorMode, HallucinatedToolMode
from tools_app.runs.debugger.run_header import MODE_CHOICES, _setting_text


@pytest.mark.parametrize(("name", "choices"), [
    ("arguments_error", ArgumentsErrorMode), ("execution_error", ExecutionErrorMode),
    ("hallucinated_tool", HallucinatedToolMode)])
def test_every_error_mode_reads_as_the_admin_labels_it(
        name: str, choices: type[models.TextChoices]) -> None:
    assert MODE_CHOICES[name] is choices
    for value, label in choices.choices:
        text = _setting_text(name, value)
        assert text.lower() == str(label).removesuffix(" (default)").lower()
        assert "_" not in text
        assert "(default)" not in text


def test_the_admin_wording_of_the_common_modes() -> None:
    assert _setting_text("arguments_error", "rethrow") == "stop the run"
    assert _setting_text("execution_error", "to_model") == "send a message to the model"
    assert _setting_text("hallucinated_tool", "tell_model") == "tell the model which tools exist"
    # a value no choice has (a future mode in an older page) is still shown, readably
    assert _setting_text("arguments_error", "ask_a_person") == "ask a person"
