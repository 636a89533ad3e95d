"""Server time to compare two runs of 1,000 tool calls each (target: < 1 s), page and API.

Builds the runs through the real recorder path (the engine driving rounds of parallel
calls of a mock tool with the scripted model; arguments of about 200 bytes, results of
about 1.5 KB of JSON), then times `GET /runs/compare` (Django's test client: middleware,
template, SQLite) and `GET /api/runs/compare` (a bearer token) after one warm-up
request each. Runs of 100 rounds x 10 calls:

- a run and its replaying rerun (model and tools answered from the recording, which its
  snapshot holds): nothing differs;
- the run and its rerun with today's configuration, where 10 of the 100 rounds asked one
  call with other arguments (the common case: mostly the same);
- the run and an unrelated run whose every call has other arguments;

and two unrelated runs of 10 rounds x 100 calls whose every call differs (wide rounds:
what a round's alignment costs grows with its calls).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from benchmarks.common import setup_django, summary, write_result

if TYPE_CHECKING:
    from tools_app.models import Run  # imported where used, once Django is set up

ROUNDS, CALLS_PER_ROUND, REPEATS = 100, 10, 7
WIDE_ROUNDS, WIDE_CALLS = 10, 100
TARGET_MS = 1000.0
DIFFERING_ROUNDS = range(5, ROUNDS, ROUNDS // 10)  # 10 rounds, one call each

SCHEMA = {"type": "object", "properties": {
    "customer_id": {"type": "string"}, "query": {"type": "string"},
    "fields": {"type": "array", "items": {"type": "string"}},
    "limit": {"type": "integer"}}, "required": ["customer_id", "query"]}
# About 1.5 KB once filled: ten invoice records naming the customer and the query.
RESULT = {"customer": "{customer_id}", "query": "{query}", "total": 10, "records": [
    {"id": f"INV-{1000 + n}", "amount": 120.5 + n, "currency": "EUR",
     "due": f"2026-03-{n + 1:02d}", "status": "open" if n % 3 else "paid",
     "note": "Net 30; reminder sent once"} for n in range(10)]}


def _arguments(round_index: int, call: int, variant: str) -> dict[str, Any]:
    return {"customer_id": f"C-{round_index:03d}{call:03d}{variant}",
            "query": f"open invoices for March above {100 + call} EUR, newest first",
            "fields": ["id", "amount", "currency", "due", "status", "note"], "limit": 20}


def _script(variant: str, *, differing: range | None = None, rounds: int = ROUNDS,
            calls: int = CALLS_PER_ROUND) -> list[dict[str, Any]]:
    """`rounds` steps of `calls` calls, then a text; `variant` marks every call's
    arguments, or (with `differing`) only the first call of those rounds."""
    steps: list[dict[str, Any]] = []
    for r in range(rounds):
        step = []
        for c in range(calls):
            mark = variant if differing is None or (r in differing and c == 0) else ""
            step.append({"name": "find_invoices", "arguments": _arguments(r, c, mark)})
        steps.append({"tool_calls": step})
    return [*steps, {"text": f"Found the invoices ({variant or 'first'})."}]


def build_runs() -> dict[str, str]:
    from django.contrib.auth import get_user_model

    from tools_app.models import ErrorPolicy, ModelEndpoint
    from tools_app.runs import services
    from tools_app.runs.debugger.rerun import ReplayOptions, run_rerun
    from tools_app.tools.importing import import_tools

    [tool] = import_tools([{"name": "find_invoices", "description": "Invoices of a customer",
                            "input_schema": SCHEMA}], kind="mock",
                          default_config={"result": RESULT, "template": True})
    policy = ErrorPolicy.objects.create(name="bench", max_round_trips=ROUNDS + 1)
    user = get_user_model().objects.create_user("bench", is_staff=True)

    def run_on(name: str, script: list[dict[str, Any]]) -> Run:
        endpoint = ModelEndpoint.objects.create(name=name, kind="scripted", script=script)
        return _finished(services.run_create(
            user=user, endpoint=endpoint, tools=[tool], policy=policy,
            messages=services.conversation(user_message="Invoices?")))

    first = run_on("bench", _script(""))
    ModelEndpoint.objects.filter(name="bench").update(
        script=_script("x", differing=DIFFERING_ROUNDS))
    replay = _finished(run_rerun(run=first, user=user, mode="as_it_was",
                                 replay=ReplayOptions(model="recorded", tools="recorded")))
    rerun = _finished(run_rerun(run=first, user=user, mode="current"))
    runs = {"first": first, "replay": replay, "rerun": rerun,
            "other": run_on("bench other", _script("y")),
            "wide": run_on("bench wide", _script("", rounds=WIDE_ROUNDS, calls=WIDE_CALLS)),
            "wide other": run_on("bench wide other",
                                 _script("z", rounds=WIDE_ROUNDS, calls=WIDE_CALLS))}
    for run in runs.values():
        assert run.tool_calls_count == ROUNDS * CALLS_PER_ROUND, run.tool_calls_count
    return {name: str(run.pk) for name, run in runs.items()}


def _finished[R: Run](run: R) -> R:
    # TASK_BACKEND=immediate (see main): the run executed on commit, when it was queued.
    run.refresh_from_db()
    assert run.status == "succeeded", (run.status, run.error_message)
    return run


def measure(client: Any, path: str, headers: dict[str, str]) -> dict[str, float]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    first = client.get(path, headers=headers)
    assert first.status_code == 200, (path, first.status_code, first.content[:300])
    timings = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        response = client.get(path, headers=headers)
        timings.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200
    with CaptureQueriesContext(connection) as queries:
        client.get(path, headers=headers)
    return summary(timings) | {"queries": float(len(queries)),
                               "kib": len(response.content) / 1024}


def main() -> str:
    os.environ["TASK_BACKEND"] = "immediate"
    setup_django()
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import override_settings

    from tools_app.web.api.tokens import create_token

    runs = build_runs()
    user = get_user_model().objects.get(username="bench")
    client = Client()
    client.force_login(user)
    bearer = {"Authorization": f"Bearer {create_token(user, 'bench')[1]}"}
    cases = [("a run and its replay: nothing differs", "first", "replay"),
             ("a run and its rerun: 10 rounds differ", "first", "rerun"),
             ("two unrelated runs: every call differs", "first", "other"),
             (f"{WIDE_ROUNDS} rounds x {WIDE_CALLS} calls: every call differs", "wide",
              "wide other")]
    rows = []
    load_before = os.getloadavg()[0]
    with override_settings(ALLOWED_HOSTS=["testserver"]):
        for label, a, b in cases:
            query = f"?a={runs[a]}&b={runs[b]}"
            for what, path, headers in (("page", f"/runs/compare{query}", {}),
                                        ("API", f"/api/runs/compare{query}", bearer)):
                stats = measure(client, path, headers)
                verdict = "ok" if stats["p95"] < TARGET_MS else "MISSES"
                rows.append(f"| {label} | {what} | {stats['p50']:.0f} ms | {stats['p95']:.0f} ms"
                            f" | {stats['max']:.0f} ms | {stats['queries']:.0f} | "
                            f"{stats['kib']:.0f} KiB | {verdict} |")
                print(rows[-1], flush=True)
    load = os.getloadavg()[0]
    table = "\n".join(rows)
    return write_result("compare", f"""
## Compare two runs of 1,000 tool calls each

{ROUNDS} rounds x {CALLS_PER_ROUND} parallel calls of a mock tool in each run (the last
case: {WIDE_ROUNDS} x {WIDE_CALLS}), arguments of about 200 bytes, results of about 1.5 KB
of JSON, built through the recorder. Each request through Django's test client
(middleware, view, template; the API with a bearer token), SQLite, {REPEATS} requests
after a warm-up; queries counted on one more. 2 cores shared with other work (load
average {load_before:.1f} -> {load:.1f} while measuring).

| runs compared | request | p50 | p95 | max | queries | response | target < {TARGET_MS:.0f} ms |
|---|---|---|---|---|---|---|---|
{table}
""").read_text()


if __name__ == "__main__":
    print(main())
