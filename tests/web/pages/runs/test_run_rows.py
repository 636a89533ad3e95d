"""The runs list keeps its statuses current: a row whose run is still in progress polls
its own URL every 2 s and is replaced by the row as it is now; a finished run's row has
no trigger, so polling stops when the run ends."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from tests.web.support import Tree
from tools_app.models import Run, RunStatus

pytestmark = pytest.mark.django_db


def test_rows_of_runs_in_progress_poll_and_finished_ones_do_not(
    alice_client: Client, filter_world: dict[str, Run],
) -> None:
    html = alice_client.get("/runs/").content.decode()
    tree = Tree(html)
    queued = tree.by_id(f"run-row-{filter_world['queued'].pk}")
    assert queued.attrs["hx-get"] == f"/runs/{filter_world['queued'].pk}/row/"
    assert (queued.attrs["hx-trigger"], queued.attrs["hx-swap"]) == ("every 2s", "outerHTML")
    for name in ("weather", "broken"):
        assert "hx-get" not in tree.by_id(f"run-row-{filter_world[name].pk}").attrs


def test_a_row_comes_back_as_the_run_is_now(alice_client: Client,
                                            filter_world: dict[str, Run]) -> None:
    run = filter_world["queued"]
    row = alice_client.get(f"/runs/{run.pk}/row/").content.decode()
    assert row.lstrip().startswith(f'<tr id="run-row-{run.pk}"')
    assert 'hx-trigger="every 2s"' in row
    assert "Queued" in row
    assert "<html" not in row

    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
    assert 'badge status-running">Running<' in alice_client.get(f"/runs/{run.pk}/row/"
                                                                ).content.decode()
    Run.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED)
    done = alice_client.get(f"/runs/{run.pk}/row/").content.decode()
    assert 'badge status-cancelled">Cancelled<' in done
    assert "hx-trigger" not in done  # polling stops


def test_a_row_is_only_for_those_who_may_see_the_run(
    bob_client: Client, client: Client, filter_world: dict[str, Run],
) -> None:
    charlies = filter_world["queued"]
    assert bob_client.get(f"/runs/{charlies.pk}/row/").status_code == 404
    assert client.get(f"/runs/{charlies.pk}/row/").status_code == 302
    assert re.search(r"status-succeeded", bob_client.get(
        f"/runs/{filter_world['weather'].pk}/row/").content.decode())
