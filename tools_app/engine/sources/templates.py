"""`{name}` placeholders filled from a call's arguments (mock results, HTTP URLs).

Deliberately not str.format: a template may only name arguments (`{city}`, or a path
into one, `{address.city}`, `{items.0}`), never reach attributes or format specs of
Python objects.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*)\}")


class MissingArgument(LookupError):
    """A placeholder names an argument the call did not give."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


def lookup(arguments: dict[str, Any], path: str) -> Any:
    """The value at a dotted path into the arguments (list items by index)."""
    value: Any = arguments
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise MissingArgument(path)
    return value


def as_text(value: Any) -> str:
    """A value inside text: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def fill_text(template: str, arguments: dict[str, Any],
              encode: Callable[[str], str] = lambda text: text) -> str:
    """`template` with each placeholder replaced by its argument, as text passed
    through `encode` (URL quoting, for one)."""
    return PLACEHOLDER.sub(lambda m: encode(as_text(lookup(arguments, m.group(1)))), template)


def placeholders(template: Any) -> list[str]:
    """The paths the placeholders of a JSON value name, in every string, each once, in
    the order they first appear."""
    if isinstance(template, str):
        return list(dict.fromkeys(m.group(1) for m in PLACEHOLDER.finditer(template)))
    if isinstance(template, list):
        items = template
    elif isinstance(template, dict):
        items = list(template.values())
    else:
        return []
    return list(dict.fromkeys(path for item in items for path in placeholders(item)))


def fill_json(template: Any, arguments: dict[str, Any]) -> Any:
    """A JSON value with placeholders filled in every string; a string that is one
    placeholder and nothing else becomes the argument itself (its JSON type kept)."""
    if isinstance(template, str):
        whole = PLACEHOLDER.fullmatch(template)
        if whole:
            return lookup(arguments, whole.group(1))
        return fill_text(template, arguments)
    if isinstance(template, list):
        return [fill_json(item, arguments) for item in template]
    if isinstance(template, dict):
        return {key: fill_json(value, arguments) for key, value in template.items()}
    return template
