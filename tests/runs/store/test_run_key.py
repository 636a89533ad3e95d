"""A run id has one spelling whichever form it comes in (remembered for text)."""

from __future__ import annotations

import uuid

import pytest

from tools_app.runs.store.eventlog import run_key


def test_every_form_of_a_run_id_is_one_key() -> None:
    run_id = uuid.uuid4()
    forms = [run_id, str(run_id), run_id.hex, str(run_id).upper(), f"{{{run_id}}}",
             run_id.urn]
    assert {run_key(form) for form in forms} == {run_id.hex}
    assert run_key(str(run_id)) == run_id.hex  # asked again: the remembered answer


def test_text_that_is_no_run_id_is_refused_every_time() -> None:
    for _ in range(2):
        with pytest.raises(ValueError):
            run_key("not-a-run")
