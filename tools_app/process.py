"""Process-wide settings for the long-running processes (daphne, db_worker)."""

from __future__ import annotations

import gc

YOUNG_GENERATION_THRESHOLD = 10_000
"""Allocations (net) between two collections of the youngest generation; CPython's
default is 700. A run allocates a few hundred short-lived objects per model round
(events, messages, HTTP objects), so at the default a busy worker collects every few
requests, and each collection also ages survivors towards the costly older ones. Ten
thousand halves the collector's share of a busy worker's CPU (benchmarks/
bench_providers.py) for a young generation of a few megabytes at most."""


def prepare_for_serving() -> None:
    """Call once start-up is done: freeze what it built, then space collections out."""
    freeze_startup_objects()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, middle, oldest)


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
