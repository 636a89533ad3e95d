"""A run imported from a file (`manage.py import_run`) shows who imported it and when,
and the original run's own times, on its page, in /runs/ and in the API (issue 43,
bug 6)."""

from __future__ import annotations

import io
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AbstractUser
from django.core.management import call_command
from django.test import Client

from tests.web.support import Api, start_run
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, ToolRegistration
from tools_app.runs import tasks
from tools_app.runs.debugger.run_files import export_run
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db

# The original ran long before the import: its times must not read as the import's.
STARTED, FINISHED = "2025-03-01T10:00:00+00:00", "2025-03-01T10:00:07.500000+00:00"


@pytest.fixture
def exported(bob: AbstractUser, weather_endpoint: ModelEndpoint,
             demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
             tmp_path: Path) -> tuple[str, str]:
    """A run's file, dated 2025-03-01 (and its run deleted: this database only has the
    import); returns the file's path and the original run's id."""
    run = start_run(bob, weather_endpoint, [demo_tools["get_weather"]], policy)
    assert async_to_sync(tasks.execute_run.acall)(str(run.pk)) == "succeeded"
    run.refresh_from_db()
    fixture: dict[str, Any] = export_run(run)
    fixture["run"].update(created_at="2025-03-01T09:59:59+00:00", started_at=STARTED,
                          finished_at=FINISHED, wall_ms=7500.0)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(fixture), encoding="utf-8")
    original = str(run.pk)
    run.delete()
    return str(path), original


def import_run(path: str, *options: str) -> Run:
    call_command("import_run", path, *options, stdout=io.StringIO())
    return Run.objects.get()


def test_the_run_page_shows_the_importer_the_import_and_the_original_times(
    exported: tuple[str, str], bob_client: Client,
) -> None:
    run = import_run(exported[0], "--user", "bob")
    assert run.status == "succeeded"

    page = bob_client.get(f"/runs/{run.pk}/").content.decode()
    assert "(api)" not in page
    assert "Started by" not in page
    assert f"Imported by bob · {run.created_at:%Y-%m-%d %H:%M:%S}" in page
    assert "Started 2025-03-01 10:00:00" in page
    assert "finished 2025-03-01 10:00:07" in page
    assert '<dt>Duration</dt><dd data-total="duration">7.50 s</dd>' in page  # the original's


def test_without_a_user_the_page_says_it_came_from_a_file(
    exported: tuple[str, str], alice_client: Client,
) -> None:
    run = import_run(exported[0])

    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert "(api)" not in page
    assert (f"Imported from a file with manage.py import_run · "
            f"{run.created_at:%Y-%m-%d %H:%M:%S}") in page
    assert "Started 2025-03-01 10:00:00" in page


def test_the_runs_list_shows_the_importer_and_the_original_start(
    exported: tuple[str, str], bob_client: Client,
) -> None:
    run = import_run(exported[0], "--user", "bob")

    page = bob_client.get("/runs/").content.decode()
    row = page[page.index(f'id="run-row-{run.pk}"'):]
    row = row[:row.index("</tr>")]
    assert "Imported by bob" in row
    assert "2025-03-01 10:00:00" in row
    assert f"imported {run.created_at:%Y-%m-%d %H:%M}" in row
    assert "(api)" not in row


def test_the_api_carries_the_original_times_and_the_import(
    exported: tuple[str, str], bob: AbstractUser,
) -> None:
    path, original = exported
    run = import_run(path, "--user", "bob")
    api = Api(create_token(bob, "ci")[1])

    detail = api.get(f"/api/runs/{run.pk}").json()
    [listed] = api.get("/api/runs").json()["runs"]

    for record in (detail, listed):
        assert datetime.fromisoformat(record["started_at"]) == datetime.fromisoformat(STARTED)
        assert datetime.fromisoformat(record["finished_at"]) == datetime.fromisoformat(
            FINISHED)
        assert record["wall_ms"] == 7500.0
        assert datetime.fromisoformat(record["created_at"]) == run.created_at
        assert record["imported"] == {
            "from": original, "exported_at": record["imported"]["exported_at"],
            "imported_by": "bob", "imported_at": run.created_at.isoformat(),
            "via": "manage.py import_run"}
        assert record["imported"]["exported_at"]


def test_an_ordinary_run_has_no_import_in_the_api(
    bob: AbstractUser, weather_endpoint: ModelEndpoint,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    run = start_run(bob, weather_endpoint, [demo_tools["get_weather"]], policy)

    assert Api(create_token(bob, "ci")[1]).get(f"/api/runs/{run.pk}").json()["imported"] is None
