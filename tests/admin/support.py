"""Helpers of the admin tests: an admin URL by model and view, a change form's errors
by field, and the add form of a tool."""

from __future__ import annotations

import json
from typing import Any

from django.db.models import Model
from django.urls import reverse


def url(model: type[Model], view: str, *args: Any) -> str:
    return reverse(f"admin:tools_app_{model._meta.model_name}_{view}", args=args)


def form_errors(response: Any) -> dict[str, list[str]]:
    return {k: list(v) for k, v in response.context["adminform"].form.errors.items()}


def tool_data(**overrides: str) -> dict[str, str]:
    data = {"name": "calc", "kind": "python",
            "python_path": "tools_app.tools.example_tools.calculator", "description": "Calculator",
            "json_schema": json.dumps({"type": "object", "properties": {}}), "config": "{}",
            "return_behavior": "to_llm", "timeout_seconds": "", "enabled": "on"}
    return data | overrides
