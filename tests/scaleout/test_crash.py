"""SIGKILL of a `db_worker` process in the middle of a run (reliability plan A1, A2).

django-tasks-db leaves the killed worker's task RUNNING forever; the Run row's lease
is what recovers the run: another worker's reaper (at its start, then every second)
sees the expired lease, marks the run interrupted, re-enqueues it, and a worker resumes
it from the stored history. A model call in flight is simply asked again; a tool call
in flight is re-executed only if its tool is idempotent, otherwise it becomes
UNKNOWN_OUTCOME and that error goes to the model.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tools_app.fake_llm import BackgroundServer
from tools_app.models import ErrorPolicy, Round, Run, RunStatus, ToolCall, ToolRegistration

from .conftest import (
    RUN_TIMEOUT,
    WorkerPool,
    assert_seqs_complete,
    counted,
    fake_endpoint,
    start_run,
    statuses,
    steps_requested,
    tasks_of,
    wait_terminal,
    wait_until,
)

pytestmark = [pytest.mark.scaleout, pytest.mark.django_db(transaction=True)]

UNKNOWN_OUTCOME = ("The outcome of tool 'slow_transfer' is unknown: its worker stopped while "
                   "it ran, and the tool is not idempotent, so it was not run again")


def assert_resumed_once(run: Run, killed: str, resumer: str) -> None:
    """Finished after exactly one takeover, with a gapless history."""
    assert run.status == RunStatus.SUCCEEDED, (run.error_type, run.error_message)
    assert run.resume_count == 1
    assert statuses(run) == ["queued", "interrupted", "succeeded"]
    assert_seqs_complete(run)
    tasks = tasks_of(run)
    assert [(t.status, t.worker_ids) for t in tasks] == [
        ("RUNNING", [killed]),  # django-tasks-db never learns its worker died
        ("SUCCESSFUL", [resumer]),
    ]


def test_sigkill_during_a_model_call_resumes_on_another_worker(
    workers: WorkerPool, counter_dir: Path,
    fake_llm: Callable[[dict[str, Any]], BackgroundServer],
    slow_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    server = fake_llm({"scripts": {"slow-first": {"steps": [
        {"tool_calls": [{"name": "tally", "arguments": {"tag": "once"}}], "latency_ms": 3000},
        {"text": "Finished: {last_result}"},
    ]}}})
    run = start_run(fake_endpoint(server, "slow-first"), [slow_tools["tally"]], policy)

    a = workers.start("w-a")
    wait_until(lambda: Round.objects.filter(run=run, index=0, status="requested").exists(),
               RUN_TIMEOUT, "round 0 to be requested", workers)
    wait_until(lambda: steps_requested(server) == [0], RUN_TIMEOUT,
               "the model call to reach the provider", workers)
    a.sigkill()

    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING  # what the dead worker left behind
    workers.start("w-b")
    run = wait_terminal(run, workers)

    assert_resumed_once(run, "w-a", "w-b")
    assert run.final_text == "Finished: tallied once"
    assert steps_requested(server) == [0, 0, 1]  # the call in flight was asked again
    assert counted(counter_dir, "tally") == ["once"]
    assert Round.objects.filter(run=run).count() == 2


@pytest.mark.parametrize(
    ("tool_name", "arguments"),
    [("slow_transfer", {"to": "acct-1", "seconds": 30}),
     ("slow_lookup", {"key": "k1", "seconds": 2})],
    ids=["not-idempotent", "idempotent"],
)
def test_sigkill_during_a_tool_call(
    tool_name: str, arguments: dict[str, Any], workers: WorkerPool, counter_dir: Path,
    make_endpoint: Any, slow_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    endpoint = make_endpoint([
        {"tool_calls": [{"name": tool_name, "arguments": arguments}]},
        {"text": "Tool said: {last_result}"},
    ], name=f"kill in {tool_name}")
    run = start_run(endpoint, [slow_tools[tool_name]], policy)

    a = workers.start("w-a")
    wait_until(lambda: counted(counter_dir, tool_name), RUN_TIMEOUT,
               "the tool to start", workers)
    wait_until(lambda: ToolCall.objects.filter(run=run, state="started").exists(),
               RUN_TIMEOUT, "the call to be recorded as started", workers)
    a.sigkill()

    workers.start("w-b")
    run = wait_terminal(run, workers)

    assert_resumed_once(run, "w-a", "w-b")
    [call] = ToolCall.objects.filter(run=run)
    argument = next(iter(arguments.values()))
    if tool_name == "slow_lookup":
        assert counted(counter_dir, tool_name) == [argument, argument]  # ran again
        assert (call.state, call.attempts, call.is_error) == ("succeeded", 2, False)
        assert run.final_text == "Tool said: value of k1"
    else:
        assert counted(counter_dir, tool_name) == [argument]  # never run twice
        assert call.state == "unknown_outcome"
        assert call.is_error
        assert call.error_type == "ToolUnknownOutcomeError"
        assert call.result_text == UNKNOWN_OUTCOME
        assert run.final_text == f"Tool said: {UNKNOWN_OUTCOME}"  # the model was told
        assert run.errors_count == 1


def test_a_poison_run_fails_as_worker_lost_and_other_runs_still_finish(
    workers: WorkerPool, counter_dir: Path, make_endpoint: Any,
    slow_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    """Its tool kills every worker that runs it: after AGENTFORGE_MAX_RESUMES resumes the
    reaper fails it as worker lost instead of feeding it to worker after worker."""
    poison = start_run(make_endpoint([
        {"tool_calls": [{"name": "crash_worker", "arguments": {"reason": "poison"}}]},
        {"text": "never reached"},
    ], name="poison"), [slow_tools["crash_worker"]], policy)
    healthy = start_run(make_endpoint([
        {"tool_calls": [{"name": "tally", "arguments": {"tag": "healthy"}}]},
        {"text": "Fine: {last_result}"},
    ], name="healthy"), [slow_tools["tally"]], policy)

    def supervise() -> bool:
        """A process supervisor: start a new worker whenever none is alive."""
        if Run.objects.filter(pk__in=[poison.pk, healthy.pk],
                              status__in=[RunStatus.SUCCEEDED, RunStatus.FAILED]).count() == 2:
            return True
        if not any(w.alive() for w in workers.workers):
            assert len(workers.workers) < 4, "the poison run was fed to worker after worker"
            workers.start(f"w-{len(workers.workers) + 1}", AGENTFORGE_MAX_RESUMES="1")
        return False

    wait_until(supervise, RUN_TIMEOUT, "both runs to finish", workers, interval=0.1)

    poison.refresh_from_db()
    healthy.refresh_from_db()
    assert healthy.status == RunStatus.SUCCEEDED
    assert healthy.final_text == "Fine: tallied healthy"
    assert poison.status == RunStatus.FAILED
    assert poison.error_type == "WorkerLost"
    assert "stopped 2 times" in poison.error_message
    assert poison.resume_count == 1
    assert statuses(poison) == ["queued", "interrupted", "failed"]
    assert_seqs_complete(poison)
    assert counted(counter_dir, "crash_worker") == ["poison", "poison"]  # two workers died
    assert [w.process.returncode for w in workers.workers[:2]] == [3, 3]
    assert len(workers.workers) == 3
