"""What the run page and the live timeline show above the rounds: the starting
conversation, the header (owner, the settings the run used, counts that agree with the
lanes, the call that stopped the run, where a replay went live) and the run row a live
batch reads, in one prepared query."""

from __future__ import annotations

import uuid
from decimal import Decimal
from functools import partial
from typing import Any

from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS
from django.db.models import Count, Q, QuerySet

from tools_app.engine import json_nesting
from tools_app.engine.conversation import to_openai_messages
from tools_app.models import (
    ArgumentsErrorMode,
    ExecutionErrorMode,
    HallucinatedToolMode,
    Round,
    Run,
    RunEvent,
    ToolCall,
    ToolCallState,
)
from tools_app.models.prices import format_usd
from tools_app.runs.debugger import lineage
from tools_app.runs.debugger.timeline import pretty_json, unexecuted_requests
from tools_app.runs.snapshot.model import snapshot_of
from tools_app.runs.store.selectors import as_uuid
from tools_app.runs.store.sql import prepared


def replay_divergences(run: Run) -> list[str]:
    """What a replaying run said where it left its recording and went on live (only a
    replay told to go on live records it: the others read nothing)."""
    replay = snapshot_of(run).replay
    if replay is None or replay.on_divergence != "live":
        return []
    payloads = RunEvent.objects.filter(run=run, kind="replay_diverged").order_by("seq")
    return [str(p.get("detail", "")) for p in payloads.values_list("payload", flat=True)
            if isinstance(p, dict)]


def starting_conversation(run: Run) -> list[dict[str, Any]]:
    """The conversation the run started from, as OpenAI-format dicts (role, content,
    tool calls with their arguments pretty-printed when they are JSON)."""
    try:
        messages = snapshot_of(run).chat_messages()
    except ValueError:  # a row made outside the run services (seeded or old data)
        return []
    shown = []
    for message in to_openai_messages(messages, error_flags=True):
        calls = [{"id": c["id"], "name": c["function"]["name"],
                  "arguments": _pretty_arguments(c["function"]["arguments"])}
                 for c in message.get("tool_calls", [])]
        shown.append(message | {"calls": calls})
    return shown


def _pretty_arguments(raw: str) -> str:
    try:
        return pretty_json(json_nesting.loads(raw))
    except ValueError:
        return raw


# -- the run header ---------------------------------------------------------------------

# The policy values a run actually used, in the header's words (the snapshot holds the
# policy with the run's own choices already applied).
SETTING_LABELS = (("parallel", "Parallel calls"), ("max_concurrency", "At most at once"),
                  ("max_round_trips", "Max rounds"), ("default_tool_timeout", "Tool timeout"),
                  ("arguments_error", "Arguments errors"), ("execution_error", "Tool errors"),
                  ("hallucinated_tool", "Unknown tools"),
                  ("provider_max_retries", "Provider retries"),
                  ("run_timeout_seconds", "Run deadline"), ("cost_cap_usd", "Cost cap"))
# The error modes in the admin's words (its choices' labels, without "(default)"), so
# the header says "Arguments errors: stop the run" as the policy form does.
MODE_CHOICES = {"arguments_error": ArgumentsErrorMode, "execution_error": ExecutionErrorMode,
                "hallucinated_tool": HallucinatedToolMode}


def header_view(run: Run, owner: str | None = None) -> dict[str, Any]:
    """What the run header shows beyond the run row: who started it (`owner`: their
    username if already read, else read from `run.created_by`; "" for none), the
    effective settings, counts taken from the same rows as the lanes (so they agree at
    every moment of a live run), and the call that stopped the run, if one did (its
    error is shown in its lane), and where a replay left its recording and went on live
    (so it shows as it happens); beside the status, what it leaves out ("with 2
    errors"), the run's lineage badges, and the breakpoint it waits at (`pause`)."""
    if owner is None:
        owner = run.created_by.get_username() if run.created_by is not None else ""
    counts = _lane_counts(run)
    return {"owner": owner, "settings": effective_settings(run), "counts": counts,
            "status_note": lineage.status_note(run.status, counts["errors"]),
            "badges": lineage.badges(run.snapshot),
            "stopped_by": _stopping_call(run), "divergences": replay_divergences(run),
            "price": price_view(run), "pause": pause_view(run)}


def pause_view(run: Run) -> dict[str, Any] | None:
    """The breakpoint the run waits at, as values (a live batch compares a header's
    inputs with the previous one's), or None."""
    pause = run.open_pause
    if pause is None:
        return None
    return {"before": pause.before, "round_index": pause.round_index,
            "reason": pause.reason, "call_ids": list(pause.call_ids)}


def price_view(run: Run) -> dict[str, Any] | None:
    """The price revision the run's rounds were priced with (frozen at its start), or
    None: the run has no price (or answered from a recording, which costs nothing)."""
    snapshot = snapshot_of(run)
    price = snapshot.price
    if price is None or snapshot.billed_price() is None:
        return None
    return {"revision": price.revision, "model": price.model,
            "input": format_usd(price.input_per_million),
            "cached_input": format_usd(price.cached_input_per_million
                                       if price.cached_input_per_million is not None
                                       else price.input_per_million),
            "output": format_usd(price.output_per_million)}


RUN_COLUMNS = prepared.concrete_names(Run)


def live_run(run_id: str | uuid.UUID) -> tuple[Run, str]:
    """The run and its owner's username ("" for none), for a live batch's header: one
    prepared read (prepared.py) instead of the ORM's get() with its join, which every
    batch paid for. Raises Run.DoesNotExist."""
    username = "created_by__" + get_user_model().USERNAME_FIELD
    found = prepared.rows(("live_run", username), partial(_run_row, username),
                          as_uuid(run_id))
    if not found:
        raise Run.DoesNotExist(run_id)
    row = found[0]
    run = Run.from_db(DEFAULT_DB_ALIAS, RUN_COLUMNS, [row[name] for name in RUN_COLUMNS])
    return run, row[username] or ""


def _run_row(username: str, run_id: Any) -> QuerySet[Run, Any]:
    picked: QuerySet[Run, Any] = Run.objects.filter(pk=run_id).values(*RUN_COLUMNS, username)
    return picked


def effective_settings(run: Run) -> list[dict[str, Any]]:
    snapshot = snapshot_of(run)
    if snapshot.imported is not None and (snapshot.imported.model_extra or {}).get("otlp"):
        return []  # received over OTLP: its code's settings, which no span says
    policy = snapshot.policy.model_dump(exclude_unset=True)
    changed = set(snapshot.policy_changed)
    settings = [{"label": label, "value": _setting_text(name, policy[name]),
                 "changed": name in changed} for name, label in SETTING_LABELS if name in policy]
    if policy.get("cost_cap_usd") is not None and snapshot.billed_price() is None:
        for setting in settings:  # a cap counts dollars: without a price it cannot apply
            if setting["label"] == "Cost cap":
                setting["value"] = f"{setting['value']} (not applied: no price)"
    return settings


def _setting_text(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "no limit"
    if name in ("default_tool_timeout", "run_timeout_seconds"):
        return f"{value} s"
    if name == "cost_cap_usd":
        return format_usd(Decimal(value))
    if name in MODE_CHOICES and value in MODE_CHOICES[name].values:
        label = str(MODE_CHOICES[name](value).label).removesuffix(" (default)")
        return label[:1].lower() + label[1:]
    return str(value).replace("_", " ")


def _lane_counts(run: Run) -> dict[str, int]:
    # One prepared query for the three counts: the header is rendered again for every
    # live batch.
    found = prepared.rows("lane_counts", _lane_counts_query, run.pk)
    counted = found[0] if found else {"rows": 0, "running": 0, "errors": 0}
    not_executed = _not_executed_count(run)
    return {"calls": counted["rows"] + not_executed, "not_executed": not_executed,
            "running": counted["running"], "errors": counted["errors"]}


def _lane_counts_query(run_pk: Any) -> QuerySet[ToolCall, Any]:
    return ToolCall.objects.filter(run=run_pk).order_by().values("run").annotate(
        rows=Count("pk"), running=Count("pk", filter=Q(state=ToolCallState.STARTED)),
        errors=Count("pk", filter=Q(is_error=True)))


def _not_executed_count(run: Run) -> int:
    """Only the last round of a finished run can hold calls that never ran."""
    if not run.is_terminal or not run.rounds_count:
        return 0
    last = Round.objects.filter(run=run).order_by("-index").values(
        "id", "index", "status", "response").first()
    if last is None:
        return 0
    recorded = ToolCall.objects.filter(round_id=last["id"]).count()
    return len(unexecuted_requests(dict(last), recorded))


def _stopping_call(run: Run) -> dict[str, Any] | None:
    if not run.error_type:
        return None
    stopping = ToolCall.objects.filter(run=run, stopped_run=True)
    call = (stopping.order_by("round__index", "call_index")
            .values("pk", "tool_name", "round__index", "error_type").first())
    if call is None:
        return None
    return {"dom_id": f"call-{call['pk']}", "tool_name": call["tool_name"],
            "round": call["round__index"] + 1, "error_type": call["error_type"]}
