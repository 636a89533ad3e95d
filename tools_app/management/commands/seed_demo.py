"""`manage.py seed_demo`: what `make run` does on every start so the demo works offline.

Idempotent: tools are synced; the default policy is created only when there is no
policy at all, and each scripted endpoint only when no endpoint has its name, so the
user's edits (or a deliberately deleted default) survive every restart.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from tools_app.models import ErrorPolicy, ModelEndpoint, ProviderKind
from tools_app.runs.store.selectors import PLAYGROUND_DEFAULT_ENDPOINT
from tools_app.tools.registry import ToolSyncError, sync_tools

# The tool the "hallucinated tool" script calls; it must never be registered.
HALLUCINATED_TOOL = "get_stock_price"

# Steps in the format of engine.providers.scripted.ScriptStep.
DEMO_SCRIPTS: dict[str, list[dict[str, Any]]] = {
    # The playground's default on a fresh install: it succeeds with the default policy.
    PLAYGROUND_DEFAULT_ENDPOINT: [
        {
            "text": "Let me check both cities at once.",
            "tool_calls": [
                {"name": "get_weather", "arguments": {"city": "Hangzhou"}},
                {"name": "get_weather", "arguments": {"city": "London"}},
            ],
        },
        {"text": "Here is the weather:\n{last_results}"},
    ],
    "Scripted: failing + slow tools": [
        {
            "tool_calls": [
                {"name": "always_fails", "arguments": {"reason": "the demo service is down"}},
                {"name": "slow_tool", "arguments": {"seconds": 1.5}},
                {"name": "calculator", "arguments": {"expression": "(2 + 3) * 7"}},
            ],
        },
        {"text": "One tool failed, the others answered:\n{last_results}"},
    ],
    "Scripted: bad arguments": [
        # Truncated JSON, as a model cut off mid-call would send it. With the default
        # policy the run stops here; with arguments errors sent to the model it goes on.
        {"tool_calls": [{"name": "calculator", "arguments": '{"expression": "2 +'}]},
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2 + 2"}}]},
        {"text": "2 + 2 = {last_result}"},
    ],
    "Scripted: hallucinated tool": [
        {"tool_calls": [{"name": HALLUCINATED_TOOL, "arguments": {"symbol": "ACME"}}]},
        {"text": "I could not look up the stock price: {last_result}"},
    ],
}


class Command(BaseCommand):
    help = "Sync the tools and create the default policy and the scripted demo endpoints."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = sync_tools()
        except ToolSyncError as exc:
            raise CommandError(str(exc)) from exc
        policy_created = _create_default_policy()
        endpoints_created = _create_demo_endpoints()
        self.stdout.write(
            f"seed_demo: tools {report.summary()}; "
            f"default policy {'created' if policy_created else 'kept'}; "
            f"{endpoints_created} of {len(DEMO_SCRIPTS)} demo endpoints created"
        )


def _create_default_policy() -> bool:
    if ErrorPolicy.objects.exists():
        return False
    ErrorPolicy.objects.create(name="Default", is_default=True)
    return True


def _create_demo_endpoints() -> int:
    created = 0
    for name, script in DEMO_SCRIPTS.items():
        _, was_created = ModelEndpoint.objects.get_or_create(
            name=name,
            defaults={"kind": ProviderKind.SCRIPTED, "model": "scripted", "script": script},
        )
        created += was_created
    return created
