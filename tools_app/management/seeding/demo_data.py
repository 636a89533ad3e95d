"""The demo world seed_audit's runs point at (users, endpoints, policies, tools), the
marks (`DemoRecord`) on everything the seed creates, and `clear`, which removes by
those marks. What existed before a seed is used as it is and never marked.

The users are no staff and have no usable password; the endpoints play an offline
script, so a run started on one works like any other.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.db import models, transaction

from tools_app.models import (
    DemoKind,
    DemoRecord,
    ErrorPolicy,
    ModelEndpoint,
    ProviderKind,
    Run,
    ToolKind,
    ToolRegistration,
)
from tools_app.tools.registry import sync_tools

# Named after models to vary the lists, but all of them the offline scripted model
# (engine.providers.scripted): a run someone starts on one succeeds, with no key and no
# network. The playground ticks the tool the script calls.
ENDPOINTS = (("gpt-4o (demo)", "gpt-4o"), ("claude-sonnet (demo)", "claude-sonnet-4"),
             ("gemini-flash (demo)", "gemini-2.0-flash"), ("local llama (demo)", "llama3.1:8b"))
DEMO_SCRIPT = [
    {"text": "Let me look that up.",
     "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
    {"text": "(A demo endpoint of seed_audit, answering offline.) {last_results}"},
]
POLICIES = ("Default (demo)", "Strict arguments (demo)", "Lenient (demo)")
MOCK_TOOLS = ("search_docs", "read_file", "sql_query")
EXAMPLE_TOOLS = ("get_weather", "calculator", "convert_units", "always_fails", "slow_tool",
                 "lookup_order")
USERS = 20


@dataclass
class World:
    """What the rows point at: users, endpoints, policies, tool names."""

    users: list[Any]
    endpoints: list[ModelEndpoint]
    policies: list[ErrorPolicy]
    tools: list[str]
    hashes: dict[str, str] = field(default_factory=dict)


@transaction.atomic
def demo_world() -> World:
    """The users, endpoints, policies and tools the runs point at: created if missing,
    and marked when created here (what already existed is used as it is, unmarked)."""
    made: list[tuple[DemoKind, Any]] = []
    synced = sync_tools(["tools_app.tools.example_tools"])
    made += [(DemoKind.TOOL, pk) for pk in ToolRegistration.objects.filter(
        name__in=synced.created).values_list("pk", flat=True)]
    for name in MOCK_TOOLS:
        tool, created = ToolRegistration.objects.get_or_create(name=name, defaults={
            "kind": ToolKind.MOCK, "description": f"Seeded mock tool {name}",
            "json_schema": {"type": "object"},
            "version_hash": hashlib.sha256(name.encode()).hexdigest()})
        if created:
            made.append((DemoKind.TOOL, tool.pk))
    hashes = dict(ToolRegistration.objects.values_list("name", "version_hash"))
    endpoints = []
    for name, model in ENDPOINTS:
        endpoint, created = ModelEndpoint.objects.get_or_create(name=name, defaults={
            "kind": ProviderKind.SCRIPTED, "model": model, "script": DEMO_SCRIPT})
        endpoints.append(endpoint)
        if created:
            made.append((DemoKind.ENDPOINT, endpoint.pk))
    policies = []
    for name in POLICIES:
        policy, created = ErrorPolicy.objects.get_or_create(name=name)
        policies.append(policy)
        if created:
            made.append((DemoKind.POLICY, policy.pk))
    users = []
    for index in range(USERS):
        user, created = _user(index)
        users.append(user)
        if created:
            made.append((DemoKind.USER, user.pk))
    DemoRecord.objects.bulk_create([DemoRecord(kind=kind, key=str(pk)) for kind, pk in made],
                                   ignore_conflicts=True)
    return World(users, endpoints, policies, [*EXAMPLE_TOOLS, *MOCK_TOOLS], hashes)


def _user(index: int) -> tuple[Any, bool]:
    """A demo user: no staff rights, and no password anyone could log in with."""
    user, created = get_user_model().objects.get_or_create(username=f"audit-user-{index:02d}")
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user, created


def mark_runs(seed: int, runs: int) -> None:
    """Mark a seed's runs before writing them, so a seed stopped half-way is removable
    too; the count only grows (runs removed by hand may be seeded again)."""
    record, created = DemoRecord.objects.get_or_create(
        kind=DemoKind.RUNS, key=str(seed), defaults={"count": runs})
    if not created and record.count < runs:
        record.count = runs
        record.save(update_fields=["count"])


# Removing demo data: a seed's runs in batches (with their rounds, calls and events), then
# the users (None: the user model), endpoints, policies and tools it made, and the marks.
CLEAR_BATCH = 500
CLEARED: tuple[tuple[DemoKind, type[models.Model] | None, str], ...] = (
    (DemoKind.USER, None, "users"), (DemoKind.ENDPOINT, ModelEndpoint, "endpoints"),
    (DemoKind.POLICY, ErrorPolicy, "policies"), (DemoKind.TOOL, ToolRegistration, "tools"))


def clear() -> str:
    """Remove what the seed made, by its marks; says what was removed."""
    marks = list(DemoRecord.objects.all())
    if not marks:
        return "seed_audit: no seeded data to remove"
    removed = {"runs": sum(_clear_runs(int(m.key), m.count)
                           for m in marks if m.kind == DemoKind.RUNS)}
    with transaction.atomic():
        for kind, model, label in CLEARED:
            keys = [m.key for m in marks if m.kind == kind]
            rows = (model or get_user_model())._default_manager.filter(pk__in=keys)
            removed[label] = rows.count()
            rows.delete()
        DemoRecord.objects.filter(pk__in=[m.pk for m in marks]).delete()
    return "seed_audit: removed " + ", ".join(f"{n} {label}" for label, n in removed.items())


def _clear_runs(seed: int, count: int) -> int:
    removed = 0
    for start in range(0, count, CLEAR_BATCH):
        ids = [run_id(seed, n) for n in range(start, min(start + CLEAR_BATCH, count))]
        with transaction.atomic():
            batch = Run.objects.filter(pk__in=ids)
            removed += batch.count()
            batch.delete()
    return removed


def run_id(seed: int, number: int) -> uuid.UUID:
    """The id of a seed's n-th run: the same seed gives the same ids."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"agentforge-seed-audit:{seed}:{number}")
