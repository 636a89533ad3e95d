"""Retention: `manage.py prune_runs` deletes old finished runs and everything they
stored, in batches, and never a run in progress."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from tests.runs.support import execute, start
from tools_app.models import (
    ErrorPolicy,
    Round,
    Run,
    RunEvent,
    RunStatus,
    ToolCall,
    ToolRegistration,
)
from tools_app.runs.debugger.run_files import export_run
from tools_app.runs.store.retention import parse_age
from tools_app.runs.tasks import prune_old_runs

pytestmark = pytest.mark.both

ONE_CALL = [{"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}]},
            {"text": "done: {last_result}"}]


@pytest.fixture
def runs(make_endpoint: Any, tools: dict[str, ToolRegistration],
         policy: ErrorPolicy) -> dict[str, Run]:
    """Finished runs 40 days old (succeeded, failed, cancelled), a recent one, and old
    runs that are not finished (queued, running, interrupted)."""
    endpoint = make_endpoint(ONE_CALL)
    made: dict[str, Run] = {}
    for name in ("old_succeeded", "old_failed", "old_cancelled", "recent", "old_queued",
                 "old_running", "old_interrupted"):
        run = start(endpoint, [tools["lookup"]], policy, name)
        assert execute(run) == "succeeded"
        made[name] = run
    old = timezone.now() - timedelta(days=40)
    Run.objects.exclude(pk=made["recent"].pk).update(finished_at=old, created_at=old)
    for name, status in (("old_failed", RunStatus.FAILED), ("old_cancelled", RunStatus.CANCELLED),
                         ("old_queued", RunStatus.QUEUED), ("old_running", RunStatus.RUNNING),
                         ("old_interrupted", RunStatus.INTERRUPTED)):
        Run.objects.filter(pk=made[name].pk).update(status=status)
    return made


def prune(*args: str) -> str:
    out = io.StringIO()
    call_command("prune_runs", *args, stdout=out)
    return out.getvalue()


def left(runs: dict[str, Run]) -> set[str]:
    kept = {str(pk) for pk in Run.objects.values_list("pk", flat=True)}
    return {name for name, run in runs.items() if str(run.pk) in kept}


def test_old_finished_runs_go_with_everything_they_stored(runs: dict[str, Run]) -> None:
    output = prune("--older-than", "30d", "--batch-size", "2")

    assert left(runs) == {"recent", "old_queued", "old_running", "old_interrupted"}
    assert "Deleted 3 finished runs" in output
    assert "(2 batches)" in output
    remaining = set(Run.objects.values_list("pk", flat=True))
    for model in (Round, ToolCall, RunEvent):
        assert set(model.objects.values_list("run_id", flat=True)) <= remaining


def test_failed_runs_can_be_kept_and_a_dry_run_deletes_nothing(runs: dict[str, Run]) -> None:
    assert "Would delete 3 finished runs" in prune("--older-than", "30d", "--dry-run")
    assert len(left(runs)) == 7

    prune("--older-than", "30d", "--keep-failed")

    assert left(runs) == {"recent", "old_failed", "old_queued", "old_running",
                          "old_interrupted"}


def test_nothing_is_younger_than_the_age(runs: dict[str, Run]) -> None:
    assert "Deleted 0 finished runs" in prune("--older-than", "60d")
    assert len(left(runs)) == 7


def test_the_task_prunes_like_the_command(runs: dict[str, Run]) -> None:
    assert prune_old_runs.call("30d", keep_failed=True).startswith("Deleted 2 finished runs")
    assert "old_failed" in left(runs)


@pytest.mark.parametrize("age", ["30", "30 days", "0d", "-3d", "1w", "1.5h", ""])
def test_a_bad_age_is_refused_saying_how_to_write_one(age: str) -> None:
    with pytest.raises(CommandError, match="like 30d, 12h or 90m"):
        prune(f"--older-than={age}")


def test_ages_in_days_hours_and_minutes() -> None:
    assert parse_age("30d") == timedelta(days=30)
    assert parse_age("12h") == timedelta(hours=12)
    assert parse_age("90m") == timedelta(minutes=90)


def test_a_run_imported_recently_is_kept_whatever_the_original_ended(
    runs: dict[str, Run], tmp_path: Any,
) -> None:
    original = Run.objects.get(pk=runs["old_succeeded"].pk)  # ended 40 days ago
    path = tmp_path / "run.json"
    path.write_text(json.dumps(export_run(original)), encoding="utf-8")
    call_command("import_run", str(path), stdout=io.StringIO())
    imported = Run.objects.get(snapshot__imported__isnull=False)
    assert original.finished_at is not None
    assert imported.finished_at == original.finished_at
    assert original.finished_at < timezone.now() - timedelta(days=30)

    prune("--older-than", "30d")

    assert Run.objects.filter(pk=imported.pk).exists()
    assert "old_succeeded" not in left(runs)
