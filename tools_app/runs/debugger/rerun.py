"""Rerunning a run: as it was (its frozen snapshot again) or with the current
configuration (its endpoint, tools and policy as they are now, the differences from
the snapshot listed on the new run). The conversation and request parameters are the
original's; the new run's parent is the original.

Replay modes: the model and/or the tools may answer from the original's recording
(`ReplayOptions`; the recording is copied into the new snapshot's replay section, see
runs/debugger/replay.py). Where a recorded answer no longer fits, the new run stops there
(failed, saying at which round and call) or goes on live, as asked."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from tools_app.engine import ChatRequestParameters
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, ToolRegistration
from tools_app.runs.debugger.replay import (
    DIVERGENCE_MODES,
    MODEL_MODES,
    TOOLS_MODES,
    replay_section,
)
from tools_app.runs.debugger.run_files import recording_of, unregistered_tool_code
from tools_app.runs.snapshot.frozen import ENDPOINT_FIELDS, build_snapshot
from tools_app.runs.snapshot.model import (
    ModelMode,
    OnDivergence,
    RerunSection,
    RunSnapshot,
    ToolsMode,
    snapshot_of,
)
from tools_app.runs.store.selectors import default_policy
from tools_app.runs.tasks import queue_run

RerunMode = Literal["as_it_was", "current"]
RERUN_MODES: tuple[RerunMode, ...] = ("as_it_was", "current")


class RerunError(ValueError):
    """The run cannot be rerun as asked; the message says why."""


@dataclass(frozen=True)
class ReplayOptions:
    """Which parts of a rerun answer from the original's recording."""

    model: ModelMode = "live"
    tools: ToolsMode = "live"
    on_divergence: OnDivergence = "stop"

    @property
    def replays(self) -> bool:
        return self.model != "live" or self.tools != "live"

    def check(self) -> None:
        for name, value, allowed in (("model", self.model, MODEL_MODES),
                                     ("tools", self.tools, TOOLS_MODES),
                                     ("on_divergence", self.on_divergence, DIVERGENCE_MODES)):
            if value not in allowed:
                raise RerunError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")

    def as_dict(self) -> dict[str, str]:
        return {"model": self.model, "tools": self.tools, "on_divergence": self.on_divergence}


LIVE = ReplayOptions()


def run_rerun(*, run: Run, user: AbstractBaseUser | AnonymousUser | None,
              mode: RerunMode, replay: ReplayOptions = LIVE,
              snapshot_changes: Mapping[str, Any] | None = None,
              endpoint: ModelEndpoint | None = None,
              policy: ErrorPolicy | None = None, title: str | None = None) -> Run:
    """A new queued run repeating `run`, enqueued after commit. `snapshot_changes`
    replaces sections of the new snapshot, by attribute name (a fork's conversation, and
    its endpoint and policy when the fork chose others: runs/debugger/fork.py); `endpoint`
    and `policy` are then the new row's, so lists and filters show what it really used;
    `title` the new run's (a fork's own request), else the run's."""
    if mode not in RERUN_MODES:
        raise RerunError(f"mode must be one of {', '.join(RERUN_MODES)}, not {mode!r}")
    replay.check()
    original = snapshot_of(run)
    if mode == "as_it_was":
        snapshot = original.copy_deep()
        # An imported run's mark stays: a rerun of its rerun is as untrusted. A fork's
        # stays too: its conversation holds the rounds it inherited.
        snapshot.rerun = snapshot.replay = None
        differences: list[str] = []
    else:
        snapshot = _current_snapshot(run, original)
        differences = snapshot_differences(original, snapshot)
    if original.imported is not None:
        _check_imported(original, mode, replay,
                        own_endpoint="endpoint" in (snapshot_changes or {}))
    if replay.replays:
        snapshot.replay = replay_section(recording_of(run), source=str(run.pk),
                                         model=replay.model, tools=replay.tools,
                                         on_divergence=replay.on_divergence)
    for name, value in (snapshot_changes or {}).items():
        setattr(snapshot, name, value)
    snapshot.rerun = RerunSection(of=str(run.pk), mode=mode, differences=differences)
    if snapshot_changes and snapshot_changes.get("fork") is not None:
        snapshot.rerun.fork_round = snapshot_changes["fork"].round
    if replay.replays:
        snapshot.rerun.replay = replay.as_dict()
    return queue_run(
        created_by=user if user is not None and user.is_authenticated else None,
        endpoint=endpoint or run.endpoint, policy=policy or run.policy, parent=run,
        title=run.title if title is None else title, snapshot=snapshot.stored(),
    )


def _check_imported(snapshot: RunSnapshot, mode: RerunMode, replay: ReplayOptions, *,
                    own_endpoint: bool = False) -> None:
    """An imported run's snapshot came from a file (or a trace): its tools' import paths
    and its endpoint are not this server's. Its code runs only if registered here; its
    endpoint (where a key would be sent) is only asked if it is the scripted model, or
    not at all when a fork chose one of this server's endpoints (`own_endpoint`)."""
    if mode == "current":
        return  # the current configuration is this server's own
    live_code = replay.tools == "live" or (replay.tools == "recorded"
                                           and replay.on_divergence == "live")
    if live_code and (foreign := unregistered_tool_code(snapshot)):
        raise RerunError(f"this run was imported and its tools {', '.join(foreign)} are not "
                         "registered here: rerun it with recorded or mock tools")
    live_model = replay.model == "live" or replay.on_divergence == "live"
    if live_model and not own_endpoint and snapshot.endpoint.kind != "scripted":
        raise RerunError("this run was imported and its endpoint is not this server's: "
                         "rerun it with the recorded model, stopping where it diverges")


def _current_snapshot(run: Run, old: RunSnapshot) -> RunSnapshot:
    if old.tryit is not None:  # its model is built in: no endpoint's current configuration
        raise RerunError("a try-it run has no endpoint to take the current configuration "
                         "from: rerun it as it was, or try the tool again from its page")
    if run.endpoint is None:
        raise RerunError(f"the endpoint {old.endpoint.name!r} no longer exists: rerun "
                         "the run as it was, or start a new one")
    names = old.tool_names()
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
    snapshot = build_snapshot(
        endpoint=run.endpoint, tools=[found[name] for name in names], policy=policy,
        messages=old.chat_messages(),
        parameters=ChatRequestParameters.model_validate(old.parameters))
    # The conversation holds the inherited rounds (and a spliced result): still true.
    if old.fork is not None:
        snapshot.fork = old.fork.model_copy(deep=True)
    if old.splice is not None:
        snapshot.splice = old.splice.model_copy(deep=True)
    return snapshot


def snapshot_differences(old: RunSnapshot, new: RunSnapshot) -> list[str]:
    """What a rerun with the current configuration changes, in words."""
    changes: list[str] = []
    for field in ENDPOINT_FIELDS:
        before, after = getattr(old.endpoint, field), getattr(new.endpoint, field)
        if before != after:
            changes.append(f"endpoint {field}: {_short(before)} → {_short(after)}")
    old_hashes = {t.name: t.version_hash for t in old.tools}
    for tool in new.tools:
        if tool.version_hash != old_hashes[tool.name]:
            changes.append(f"tool {tool.name}: definition changed "
                           f"({old_hashes[tool.name][:12]} → {tool.version_hash[:12]})")
    before_policy = old.policy.model_dump()
    for field, after in new.policy.model_dump().items():
        before = before_policy.get(field)
        if field != "id" and before != after:
            changes.append(f"policy {field}: {_short(before)} → {_short(after)}")
    return changes


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
