"""Template helpers for the timeline (`{% load timeline %}`, registered in settings'
TEMPLATES libraries). Everything they return is plain text: the template's autoescaping
still applies (nothing here marks anything safe)."""

from __future__ import annotations

from django import template

from ..runs.selectors import format_ms

register = template.Library()
register.filter("ms", format_ms)
