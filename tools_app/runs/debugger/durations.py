"""Durations as the pages show them (the timeline, compare, the lists, the admin)."""

from __future__ import annotations


def format_ms(value: float | None) -> str:
    """A duration in milliseconds as people read it: "-", "0 ms", "<0.01 ms", "0.05 ms",
    "4.2 ms", "87 ms", "1.25 s". Below a millisecond two decimals, so a fast mock or
    replayed call does not read "0.0 ms"."""
    if value is None:
        return "-"
    if value >= 1000:
        return f"{value / 1000:.2f} s"
    if value >= 10:
        return f"{value:.0f} ms"
    if value >= 1:
        return f"{value:.1f} ms"
    if value == 0:
        return "0 ms"
    return f"{value:.2f} ms" if value >= 0.01 else "<0.01 ms"
