"""Process-wide settings of the serving processes (tools_app/process.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from tools_app.process import (
    MIDDLE_GENERATION_THRESHOLD,
    YOUNG_GENERATION_THRESHOLD,
    prepare_for_serving,
)


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restored_gc")
def test_serving_processes_freeze_start_up_and_space_young_collections_out() -> None:
    gc.unfreeze()
    oldest = gc.get_threshold()[2]
    garbage: list[object] = []
    garbage.append(garbage)  # a cycle only the collector can free
    del garbage

    prepare_for_serving()

    assert gc.get_threshold() == (YOUNG_GENERATION_THRESHOLD, MIDDLE_GENERATION_THRESHOLD,
                                  oldest)
    assert gc.get_freeze_count() > 0
    assert gc.get_count()[0] < 100  # collected before freezing: nothing dead is kept
