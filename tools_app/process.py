"""Process-wide settings for the long-running processes (daphne, db_worker)."""

from __future__ import annotations

import gc


def freeze_startup_objects() -> None:
    """Take what start-up allocated (modules, Django's setup, pydantic's validators: a
    few hundred thousand objects that live as long as the process) out of the cyclic
    garbage collector's scans.

    Otherwise every full collection walks all of them again, and a busy worker (a
    hundred concurrent runs allocating events, messages and HTTP objects) triggers full
    collections often. Garbage made before the call is collected first, so nothing dead
    is kept.
    """
    gc.collect()
    gc.freeze()
