"""Process-wide settings for the long-running processes (daphne, db_worker)."""

from __future__ import annotations

import gc

YOUNG_GENERATION_THRESHOLD = 20_000
"""Net allocations between two collections of the youngest generation (CPython: 700).
A run allocates a few hundred short-lived objects per model round (messages, request
bodies, HTTP objects), so at the default a busy worker collects every few requests.
Spaced out, the collector's share of a busy worker's CPU falls by about two thirds
(benchmarks/bench_providers.py), for a young generation of a few megabytes at most."""

MIDDLE_GENERATION_THRESHOLD = 50
"""Young collections between two collections of the middle generation (CPython: 10).
What survives a young collection is mostly the working set of the runs in flight;
scanning it again every 10 young collections stalled a worker with 100 concurrent runs
for ~18 ms at a time, one in every few hundred requests."""


def prepare_for_serving() -> None:
    """Call once start-up is done: freeze what it built, then space collections out."""
    freeze_startup_objects()
    oldest = gc.get_threshold()[2]
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, MIDDLE_GENERATION_THRESHOLD, oldest)


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
