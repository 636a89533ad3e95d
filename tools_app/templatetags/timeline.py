"""Template helpers for the timeline. Everything they return is plain text: the
template's autoescaping still applies (nothing here marks anything safe)."""

from __future__ import annotations

import json
from typing import Any

from django import template
from django.conf import settings

register = template.Library()


@register.filter
def pretty_json(value: Any) -> str:
    if value is None:
        return ""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


@register.filter
def compact_json(value: Any) -> str:
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@register.filter
def is_large(value: str | None) -> bool:
    return value is not None and len(value) > settings.AGENTFORGE_DISPLAY_LIMIT


@register.filter
def display_head(value: str | None) -> str:
    if value is None:
        return ""
    return value[: settings.AGENTFORGE_DISPLAY_LIMIT]


@register.filter
def ms(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1000:
        return f"{value / 1000:.2f} s"
    return f"{value:.0f} ms" if value >= 10 else f"{value:.1f} ms"
