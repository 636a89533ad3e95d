"""Migration 0006 backfills tool versions: each registration's current definition, and
the earlier definitions its runs froze in their snapshots (dated by the first run that
used them), never with a secret from a tool's config."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.migration_support import migrate

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("tools_app", "0005_moved_modules")]
AFTER = [("tools_app", "0006_audit_tool_versions")]
OLD_RUN = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)


def snapshot_tool(pk: str, digest: str, description: str) -> dict[str, object]:
    return {"id": pk, "name": "lookup", "description": description,
            "json_schema": {"type": "object"}, "kind": "mock", "python_path": "",
            "config": {"token": "t0ps3cret", "reply": "ok"}, "return_behavior": "to_llm",
            "strict": False, "timeout_seconds": None, "requires_approval": False,
            "idempotent": False, "version_hash": digest}


def test_versions_are_backfilled_from_registrations_and_snapshots() -> None:
    old_state = migrate(BEFORE).loader.project_state(BEFORE)
    registration = old_state.apps.get_model("tools_app", "ToolRegistration")
    run = old_state.apps.get_model("tools_app", "Run")
    tool = registration.objects.create(name="lookup", kind="mock", description="Now",
                                       json_schema={"type": "object"}, version_hash="b" * 64,
                                       config={"api_key": "k3y", "reply": "ok"})
    for created, digest, description in ((OLD_RUN, "a" * 64, "Before"),
                                         (OLD_RUN.replace(day=2), "a" * 64, "Before"),
                                         (OLD_RUN.replace(day=3), "b" * 64, "Now")):
        row = run.objects.create(title="old", status="succeeded", snapshot={
            "tools": [snapshot_tool(str(tool.pk), digest, description),
                      snapshot_tool("9" * 8, "c" * 64, "a deleted tool")]})
        run.objects.filter(pk=row.pk).update(created_at=created)
    try:
        new_state = migrate(AFTER).loader.project_state(AFTER)
        version = new_state.apps.get_model("tools_app", "ToolVersion")
        found = list(version.objects.order_by("created_at").values_list(
            "version_hash", "created_at", "definition"))
        assert [(digest[0], created) for digest, created, _ in found] == [
            ("a", OLD_RUN), ("b", OLD_RUN.replace(day=3))]
        assert found[0][2]["description"] == "Before"
        assert found[0][2]["config"] == {"token": "[redacted]", "reply": "ok"}
        assert "version_hash" not in found[0][2]
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def test_a_registration_no_run_used_gets_its_current_version() -> None:
    old_state = migrate(BEFORE).loader.project_state(BEFORE)
    registration = old_state.apps.get_model("tools_app", "ToolRegistration")
    registration.objects.create(name="fresh", kind="mock", json_schema={"type": "object"},
                                version_hash="d" * 64, config={"api_key": "k3y"})
    try:
        new_state = migrate(AFTER).loader.project_state(AFTER)
        version = new_state.apps.get_model("tools_app", "ToolVersion").objects.get()
        assert version.version_hash == "d" * 64
        assert version.definition["config"] == {"api_key": "[redacted]"}
        assert version.definition["name"] == "fresh"
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
