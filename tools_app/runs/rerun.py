"""Rerunning a run: as it was (its frozen snapshot again) or with the current
configuration (its endpoint, tools and policy as they are now, the differences from
the snapshot listed on the new run). The conversation and request parameters are the
original's; the new run's parent is the original."""

from __future__ import annotations

import copy
from typing import Any, Literal

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction

from ..engine import ChatRequestParameters
from ..models import Run, ToolRegistration
from .lifecycle import create_queued
from .selectors import default_policy
from .snapshot import ENDPOINT_FIELDS, build_snapshot, snapshot_messages
from .tasks import enqueue_run

RerunMode = Literal["as_it_was", "current"]
RERUN_MODES: tuple[RerunMode, ...] = ("as_it_was", "current")


class RerunError(ValueError):
    """The run cannot be rerun as asked; the message says why."""


def run_rerun(*, run: Run, user: AbstractBaseUser | AnonymousUser | None,
              mode: RerunMode) -> Run:
    """A new queued run repeating `run`, enqueued after commit."""
    if mode not in RERUN_MODES:
        raise RerunError(f"mode must be one of {', '.join(RERUN_MODES)}, not {mode!r}")
    if mode == "as_it_was":
        snapshot = copy.deepcopy(run.snapshot)
        snapshot.pop("rerun", None)
        differences: list[str] = []
    else:
        snapshot = _current_snapshot(run)
        differences = snapshot_differences(run.snapshot, snapshot)
    snapshot["rerun"] = {"of": str(run.pk), "mode": mode, "differences": differences}
    with transaction.atomic():
        new = create_queued(
            created_by=user if user is not None and user.is_authenticated else None,
            endpoint=run.endpoint, policy=run.policy, parent=run, title=run.title,
            snapshot=snapshot,
        )
        transaction.on_commit(lambda: enqueue_run(str(new.pk)))
    return new


def _current_snapshot(run: Run) -> dict[str, Any]:
    old = run.snapshot
    if run.endpoint is None:
        raise RerunError(f"the endpoint {old['endpoint']['name']!r} no longer exists: rerun "
                         "the run as it was, or start a new one")
    names = [tool["name"] for tool in old["tools"]]
    found = {t.name: t for t in ToolRegistration.objects.filter(name__in=names)}
    missing = [name for name in names if name not in found]
    disabled = [name for name in names if name in found and not found[name].enabled]
    if missing or disabled:
        problems = ([f"no longer registered: {', '.join(missing)}"] if missing else []) + (
            [f"disabled: {', '.join(disabled)}"] if disabled else [])
        raise RerunError(f"tools {'; '.join(problems)}: rerun the run as it was instead")
    policy = run.policy or default_policy()
    if policy is None:
        raise RerunError("the run's error policy no longer exists and there is no default")
    return build_snapshot(
        endpoint=run.endpoint, tools=[found[name] for name in names], policy=policy,
        messages=snapshot_messages(old),
        parameters=ChatRequestParameters.model_validate(old["parameters"]))


def snapshot_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What a rerun with the current configuration changes, in words."""
    changes: list[str] = []
    for field in ENDPOINT_FIELDS:
        before, after = old["endpoint"].get(field), new["endpoint"].get(field)
        if before != after:
            changes.append(f"endpoint {field}: {_short(before)} → {_short(after)}")
    old_tools = {t["name"]: t for t in old["tools"]}
    for tool in new["tools"]:
        if tool["version_hash"] != old_tools[tool["name"]]["version_hash"]:
            changes.append(f"tool {tool['name']}: definition changed "
                           f"({old_tools[tool['name']]['version_hash'][:12]} → "
                           f"{tool['version_hash'][:12]})")
    for field, after in new["policy"].items():
        before = old["policy"].get(field)
        if field != "id" and before != after:
            changes.append(f"policy {field}: {_short(before)} → {_short(after)}")
    return changes


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
