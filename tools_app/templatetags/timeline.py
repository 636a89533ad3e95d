"""Template helpers for the timeline. Everything they return is plain text: the
template's autoescaping still applies (nothing here marks anything safe)."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def ms(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1000:
        return f"{value / 1000:.2f} s"
    return f"{value:.0f} ms" if value >= 10 else f"{value:.1f} ms"
