"""Start-up of the long-running processes that execute runs (daphne, db_worker)."""

from __future__ import annotations

import gc


def freeze_startup_objects() -> None:
    """Take what start-up built (modules, Django's setup, pydantic's validators: a few
    hundred thousand objects that live as long as the process) out of the cyclic
    garbage collector's scans, after collecting what is already garbage.

    A busy process (many runs allocating messages, events and HTTP objects) triggers
    full collections often, and each would walk all of them again: with 100 concurrent
    runs this is worth about 4 points of efficiency (docs/benchmarks/providers.md)."""
    gc.collect()
    gc.freeze()
