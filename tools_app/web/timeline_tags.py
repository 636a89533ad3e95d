"""Template helpers for the timeline and the audit pages (`{% load timeline %}`,
registered in settings' TEMPLATES libraries). Everything they return is plain text: the
template's autoescaping still applies (nothing here marks anything safe)."""

from __future__ import annotations

from django import template

from ..runs.selectors import format_ms

register = template.Library()
register.filter("ms", format_ms)


@register.filter
def percent(value: float) -> str:
    """A share from 0 to 1 as people read it: "0 %", "12.5 %", "100 %"."""
    share = float(value) * 100
    return f"{share:.0f} %" if share in (0, 100) or share >= 10 else f"{share:.1f} %"


@register.filter
def words(value: str) -> list[str]:
    """A string's words: `"a b c"|words` is ["a", "b", "c"] (a list an include's `with`
    can pass, as in _filters.html)."""
    return value.split()
