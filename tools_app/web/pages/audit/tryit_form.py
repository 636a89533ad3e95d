"""The tool page's Try it section: the form's field tree (or why the schema has none),
the arguments it starts with, and the user's recent argument sets."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from tools_app.models import ToolRegistration
from tools_app.runs.debugger.tryit import recent_arguments
from tools_app.tools.schema_form import initial_arguments, schema_form


def tryit_context(user: AbstractBaseUser | AnonymousUser, registration: ToolRegistration | None,
                  *, text: str | None = None) -> dict[str, Any]:
    """What the tool page's Try it section needs (nothing for a name without an enabled
    registration). `text`: the arguments as last submitted (a failed plain POST)."""
    if registration is None or not registration.enabled:
        return {"tryit": None}
    form = schema_form(registration.json_schema)
    initial = initial_arguments(form.tree) if form.tree is not None else {}
    return {"tryit": {
        "form": form.tree, "problem": form.problem,
        "text": text if text is not None else json.dumps(initial, indent=2,
                                                         ensure_ascii=False),
        "recent": recent_choices(user, registration.name),
        "requires_approval": registration.requires_approval,
    }}


def recent_choices(user: AbstractBaseUser | AnonymousUser, name: str) -> list[dict[str, str]]:
    """Each recent argument set as compact text (the button's label) and as the JSON the
    form is refilled with; both are rendered escaped."""
    return [{"label": json.dumps(a, ensure_ascii=False),
             "json": json.dumps(a, indent=2, ensure_ascii=False)}
            for a in recent_arguments(user, name)]
