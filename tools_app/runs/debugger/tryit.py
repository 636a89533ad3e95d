""""Try it": one call of one tool with arguments a person typed, executed as a run.

A try-it run is an ordinary run (queued, claimed by a worker, recorded round by round,
in the runs list, the calls log, the tool's statistics and its timeline) whose snapshot
holds a built-in scripted model of two steps: propose exactly this call, then answer
with the call's result. So the tool executes through the normal run path, with its own
kind's executor, the default error policy and its approval flag: a tool that requires
approval waits for a decision like any run. The snapshot's "tryit" section marks the
run (`{"tool", "arguments"}`) and is what a user's recent inputs are read from.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from tools_app.engine import (
    ChatRequestParameters,
    ToolArgumentsError,
    ToolExecutionError,
    UserMessage,
)
from tools_app.engine.arguments import (
    JsonTextError,
    parse_json_text,
    schema_validator,
    validate_against_schema,
)
from tools_app.models import ModelEndpoint, ProviderKind, Run, ToolCall, ToolRegistration
from tools_app.runs.debugger.breakpoints import checked_breakpoints
from tools_app.runs.snapshot.frozen import build_snapshot
from tools_app.runs.snapshot.model import TryItSection, snapshot_of
from tools_app.runs.store.sanitize import clean_json
from tools_app.runs.store.selectors import default_policy
from tools_app.runs.tasks import queue_run

TRYIT_ENDPOINT_NAME = "Try it (one call)"
RECENT_LIMIT = 10
# Distinct argument sets are picked from this many of the user's latest try-it runs,
# so reading them stays one bounded query however many runs there are.
RECENT_SCAN = 200


class TryItError(ValueError):
    """The call cannot be tried as asked. `problems` lists schema violations, each with
    the JSON `pointer` of the argument it concerns and a `message`."""

    def __init__(self, message: str, *, problems: list[dict[str, str]] | None = None,
                 status: int = 400) -> None:
        super().__init__(message)
        self.problems = problems or []
        self.status = status


@dataclass(frozen=True)
class TryItOutcome:
    """What the tool page shows of a try-it run: the run, and its call once proposed."""

    run: Run
    call: ToolCall | None


def parse_arguments_text(text: str) -> Any:
    """The arguments as typed (JSON text); a TryItError says where the JSON broke."""
    try:
        return parse_json_text(text)
    except JsonTextError as exc:
        message = f"not valid JSON: {exc}"
        raise TryItError(f"The arguments are {message}",
                         problems=[{"pointer": "", "message": message}]) from exc


def checked_arguments(tool: ToolRegistration, arguments: Any) -> dict[str, Any]:
    """`arguments` if they satisfy the tool's schema; else a TryItError listing every
    violation at its JSON pointer (the engine's validator, as schema-only tools use)."""
    if not isinstance(arguments, dict):
        raise TryItError("The arguments must be a JSON object",
                         problems=[{"pointer": "", "message": "not a JSON object"}])
    try:
        return validate_against_schema(schema_validator(tool.json_schema), arguments,
                                       tool.name)
    except ToolArgumentsError as exc:
        problems = [{"pointer": e["pointer"], "message": e["msg"]} for e in exc.errors or []]
        raise TryItError("The arguments do not match the tool's schema",
                         problems=problems) from exc
    except ToolExecutionError as exc:  # the tool's own schema is broken, not the input
        raise TryItError(str(exc), status=409) from exc


def tryit_create(*, user: AbstractBaseUser | AnonymousUser, tool: ToolRegistration,
                 arguments: Any) -> Run:
    """Check the arguments, then store a queued try-it run and enqueue it on commit."""
    if not tool.enabled:
        raise TryItError(f"The tool {tool.name} is disabled: it cannot be tried", status=409)
    checked = checked_arguments(tool, arguments)
    policy = default_policy()
    if policy is None:
        raise TryItError("There is no error policy to run with: an administrator must "
                         "create one", status=409)
    snapshot = build_snapshot(endpoint=_tryit_endpoint(tool.name, checked), tools=[tool],
                              policy=policy, messages=[UserMessage(text=_prompt(tool.name,
                                                                                checked))],
                              parameters=ChatRequestParameters())
    snapshot.endpoint.id = None  # built in: no endpoint row stands behind it
    snapshot.breakpoints = checked_breakpoints(None, [tool.name])
    snapshot.tryit = TryItSection(tool=tool.name,
                                  arguments=clean_json(checked, limit=sys.maxsize))
    return queue_run(created_by=user if user.is_authenticated else None, endpoint=None,
                     policy=policy, parent=None, title=f"Try it: {tool.name}",
                     snapshot=snapshot.stored())


def _tryit_endpoint(name: str, arguments: dict[str, Any]) -> ModelEndpoint:
    """The built-in scripted model of a try-it run (never saved: the snapshot holds it)."""
    return ModelEndpoint(
        name=TRYIT_ENDPOINT_NAME, kind=ProviderKind.SCRIPTED, model="try-it",
        script=[{"tool_calls": [{"name": name, "arguments": arguments}]},
                {"text": "{last_result}"}])


def _prompt(name: str, arguments: dict[str, Any]) -> str:
    return f"Try it: call {name} with {json.dumps(arguments, ensure_ascii=False)}"


def is_tryit_of(run: Run, tool_name: str) -> bool:
    section = snapshot_of(run).tryit
    return section is not None and section.tool == tool_name


def tryit_outcome(run: Run) -> TryItOutcome:
    call = ToolCall.objects.filter(run=run).order_by("round__index", "call_index").first()
    return TryItOutcome(run=run, call=call)


def recent_arguments(user: AbstractBaseUser | AnonymousUser, tool_name: str,
                     limit: int = RECENT_LIMIT) -> list[dict[str, Any]]:
    """The user's last `limit` distinct argument sets for the tool, newest first, from
    their own try-it runs (equal as JSON values, whatever the key order)."""
    if not user.is_authenticated:
        return []
    latest = (Run.objects.filter(created_by_id=user.pk, snapshot__tryit__tool=tool_name)
              .order_by("-created_at").values_list("snapshot__tryit__arguments", flat=True))
    seen: set[str] = set()
    found: list[dict[str, Any]] = []
    for arguments in latest[:RECENT_SCAN]:
        key = json.dumps(arguments, sort_keys=True)
        if isinstance(arguments, dict) and key not in seen:
            seen.add(key)
            found.append(arguments)
            if len(found) == limit:
                break
    return found
