"""The snapshot model (version 2) reads what version 1 stored: a real version-1 snapshot
(data/snapshot_v1.json, written by the code before the model existed) loads, runs, reruns
and replays, and every optional section keeps its shape through a rerun."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tests.runs.support import calls, execute
from tools_app.models import Run, RunStatus
from tools_app.runs.debugger.rerun import ReplayOptions, run_rerun
from tools_app.runs.snapshot.model import SNAPSHOT_VERSION, RunSnapshot, snapshot_of
from tools_app.runs.store.lifecycle import create_queued

pytestmark = pytest.mark.both

V1 = Path(__file__).parent / "data" / "snapshot_v1.json"


def v1_snapshot() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(V1.read_text())
    assert data["version"] == 1
    return data


def queued_v1_run() -> Run:
    return create_queued(created_by=None, endpoint=None, policy=None, parent=None,
                         title="stored before the snapshot model", snapshot=v1_snapshot())


def test_a_version_1_snapshot_loads_as_the_model_and_stores_the_same_fields() -> None:
    stored = v1_snapshot()
    snapshot = RunSnapshot.load(stored)

    assert snapshot.version == SNAPSHOT_VERSION == 2
    assert snapshot.endpoint.kind == "scripted"
    assert snapshot.tool_names() == ["get_weather"]
    assert snapshot.idempotent_tools() == frozenset({"get_weather"})
    assert snapshot.policy.max_round_trips == stored["policy"]["max_round_trips"]
    assert snapshot.request_parameters().temperature == 0.2
    assert [m.text for m in snapshot.chat_messages()] == ["Weather in Hangzhou and Paris?"]
    assert snapshot.stored() == stored | {"version": 2}


@pytest.mark.django_db(transaction=True)
def test_a_version_1_run_runs_reruns_and_replays() -> None:
    run = queued_v1_run()
    assert execute(run) == RunStatus.SUCCEEDED
    assert [c.tool_name for c in calls(run)] == ["get_weather", "get_weather"]
    assert "Hangzhou" in (run.final_text or "")

    again = run_rerun(run=run, user=None, mode="as_it_was")
    assert execute(again) == RunStatus.SUCCEEDED
    assert again.snapshot["version"] == 2
    assert again.snapshot["rerun"]["of"] == str(run.pk)
    assert again.final_text == run.final_text

    replayed = run_rerun(run=run, user=None, mode="as_it_was",
                         replay=ReplayOptions(model="recorded", tools="recorded"))
    assert execute(replayed) == RunStatus.SUCCEEDED
    assert snapshot_of(replayed).replay is not None
    assert [(c.tool_name, c.result_text) for c in calls(replayed)] == [
        (c.tool_name, c.result_text) for c in calls(run)]


SECTIONS: dict[str, Any] = {
    "replay": {"model": "recorded", "tools": "mock", "on_divergence": "stop",
               "source": None, "rounds": []},
    "fork": {"of": "a1", "round": 2, "inherited": 3, "inherited_rounds": 1,
             "marks": ["inherited", "edited", "added"], "removed": 0, "changes": []},
    "splice": {"of": "a1", "call": 7, "call_id": "call_1", "tool": "get_weather",
               "round": 1, "execution": 2, "by": "alice",
               "original": {"arguments": {"city": "Paris"}, "text": "old", "is_error": False},
               "spliced": {"arguments": {"city": "Lyon"}, "text": "new", "is_error": False,
                           "state": "ok", "tool_version_hash": "abc"}},
    "tryit": {"tool": "get_weather", "arguments": {"city": "Paris"}},
    "imported": {"from": "b2", "exported_at": "2026-01-02T03:04:05+00:00"},
    "rerun": {"of": "a1", "mode": "as_it_was", "differences": [], "fork_round": 2},
    "breakpoints": [{"kind": "before_tool", "tool": "get_weather"}],
    "policy_changed": ["parallel"],
}


@pytest.mark.parametrize("name", list(SECTIONS))
def test_each_optional_section_is_typed_and_kept_as_stored(name: str) -> None:
    stored = v1_snapshot() | {name: SECTIONS[name]}
    snapshot = RunSnapshot.load(stored)

    assert getattr(snapshot, name) not in (None, [])
    assert snapshot.stored()[name] == SECTIONS[name]


def test_a_section_keeps_fields_this_version_does_not_declare() -> None:
    stored = v1_snapshot()
    stored["tools"][0]["added_later"] = {"kept": True}

    assert RunSnapshot.load(stored).stored()["tools"][0]["added_later"] == {"kept": True}


def test_a_version_this_app_does_not_read_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="snapshot version 3 is not one this app reads"):
        RunSnapshot.load(v1_snapshot() | {"version": 3})


def test_a_malformed_section_is_a_validation_error() -> None:
    with pytest.raises(ValidationError, match="fork"):
        RunSnapshot.load(v1_snapshot() | {"fork": {"round": "second"}})


@pytest.mark.django_db(transaction=True)
def test_a_run_whose_snapshot_does_not_load_fails_saying_why() -> None:
    run = create_queued(created_by=None, endpoint=None, policy=None, parent=None,
                        title="broken", snapshot=v1_snapshot() | {"version": 3})

    assert execute(run) == RunStatus.FAILED
    assert "snapshot version 3" in run.error_message
