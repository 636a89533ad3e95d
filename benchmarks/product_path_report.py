"""bench_product_path's report: a row per scenario (efficiency, from-emit delays,
queueing, CPU per round, memory, load), the notes (failures, locks, exits, the variant
measured) and the markdown written to docs/benchmarks/.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass

from benchmarks.common import percentile
from benchmarks.product_path_workload import (
    IDEAL_MS,
    LARGE_REPEATS,
    LARGE_RUNS,
    LATENCY_MS,
    MODEL,
    MODEL_CALLS,
    PARALLEL,
    ROUNDS,
    SCENARIO_TIMEOUT,
    SINGLE_REPEATS,
    WORKER_CONCURRENCY,
    WORKERS,
    Outcome,
    Result,
)


def describe(o: Outcome) -> str:
    wall = statistics.median(o.walls_ms) if o.walls_ms else float("nan")
    return (f"wall {wall:.0f} ms, efficiency {IDEAL_MS / wall:.0%}, from emit p95 "
            f"{percentile(o.from_emit_ms, 95):.0f} ms, finished {o.finished}")


def row(label: str, o: Outcome) -> str:
    wall = statistics.median(o.walls_ms) if o.walls_ms else float("nan")
    worst = max(o.walls_ms) if o.walls_ms else float("nan")
    emit = o.from_emit_ms
    cpu_ms = sum(o.cpu_s.values()) * 1000 / max(1, o.rounds)
    by_process = ", ".join(f"{k} {v * 1000 / max(1, o.rounds):.1f}" for k, v in o.cpu_s.items())
    memory = ", ".join(f"{k} {v:.0f}" for k, v in o.peak_mb.items())
    others = ", ".join(f"{k} {v * 1000 / max(1, o.rounds):.1f}" for k, v in o.others_s.items()
                       if v > 0)
    busy = o.machine[0] / o.machine[1] if o.machine[1] else float("nan")
    return (f"| {label} | {o.runs} | {o.finished - o.failed} / {o.finished} "
            f"| {wall:,.0f} ms | **{IDEAL_MS / wall:.0%}** ({IDEAL_MS / worst:.0%}) "
            f"| {percentile(emit, 50):.0f} ms | **{percentile(emit, 95):.0f} ms** "
            f"| {max(emit) if emit else float('nan'):,.0f} ms "
            f"| {percentile(o.queued_ms, 50):.0f} / {percentile(o.queued_ms, 95):.0f} ms "
            f"| {cpu_ms:.1f} ms ({by_process}) | {others or '-'} | {busy:.0%} | {memory} "
            f"| {o.load[0]:.1f} / {o.load[1]:.1f} |")


HEADER = ("| configuration | concurrent runs | succeeded / finished | median run wall "
          "| efficiency (worst run) | from emit p50 | from emit p95 | from emit max "
          "| queued p50 / p95 | server CPU per round (by process) "
          "| other CPU per round, ms | machine busy | peak RSS MB | load |\n"
          + "|---" * 14 + "|")


def headroom_note(busy: int) -> str:
    if not busy:
        return ""
    return (f"\n**Headroom run** (`--busy-cores {busy}`): {busy} other process(es) kept "
            f"{busy} of the {os.cpu_count()} CPUs busy for the whole benchmark, so the "
            "product, its services and the client had that much less of the machine.\n")


def report(results: dict[str, Result | str], elapsed: float, busy: int = 0) -> str:
    rows: list[str] = []
    notes: list[str] = variant_notes()
    for name, result in results.items():
        if isinstance(result, str):
            notes.append(f"{name}: {result}")
            continue
        outcomes, locked, exits = result
        rows += [row(name, o) for o in outcomes]
        notes.append(f"{name}: {locked} \"database is locked\" lines in the server logs")
        notes += [f"{name}: {e}" for e in exits]
        for o in outcomes:
            if o.start_errors:
                notes.append(f"{name}, {o.runs} runs: {len(o.start_errors)} POST /api/runs "
                             f"failed: {', '.join(sorted(set(o.start_errors)))}")
            if o.runs >= LARGE_RUNS and len(o.each_p95_ms) > 1:
                notes.append(f"{name}, {o.runs} runs: from emit p95 of each scenario "
                             + ", ".join(f"{p:.0f}" for p in o.each_p95_ms) + " ms")
            if o.finished < o.runs:
                notes.append(f"{name}, {o.runs} runs: only {o.finished} finished within "
                             f"{SCENARIO_TIMEOUT:g} s")
    return f"""
## The product path: runs started with POST /api/runs

Runs started with `POST /api/runs` against the product's fake OpenAI-compatible server
(`python -m tools_app.fake_llm`, its own process), model `{MODEL}`: {ROUNDS} rounds of
{PARALLEL} parallel `get_weather` calls and a text answer, each model reply after
{LATENCY_MS} ms, so a run's ideal wall time is {MODEL_CALLS} x {LATENCY_MS} =
{IDEAL_MS:,} ms. All the runs of a scenario are started at once. **Efficiency** = ideal /
the run's wall time (`Run.wall_ms`), median over the runs (the worst run in brackets);
1 run is repeated {SINGLE_REPEATS} times, {LARGE_RUNS} runs {LARGE_REPEATS} times (their runs
pooled: one such scenario's p95 varies by tens of ms for the same code; each one's is
in the notes). **From emit** = `RunEvent.created_at` - the engine event's own time
(`at`), over every event that has one. **Queued** = the run's
`started_at` - its `created_at`: how long it waited for a worker to claim it (not in its
wall time). **Server CPU per round**
= the user + system CPU of daphne (and the db_workers) during the scenario / the model
calls made ({MODEL_CALLS} per run); **other CPU per round** the same for the machine's
other work on the scenario (the fake provider, PostgreSQL's and Redis's processes), and
**machine busy** the share of the {os.cpu_count()} CPUs busy during the scenario (all
processes, from its first POST to its last run's end, whatever else the host ran).
Each configuration starts with runs not counted, 2 at a time until every process
that executes runs has run one (its first run imports and connects). **Peak RSS** =
each process's high-water mark after the scenario. Embedded: SQLite (WAL), the
in-memory channel layer, the worker inside daphne. Scale-out: PostgreSQL, Redis, one
daphne and {WORKERS} `db_worker --concurrency {WORKER_CONCURRENCY}` (their default poll
interval, 1 s: an enqueue wakes them). Everything (the fake server, PostgreSQL, Redis,
the client) shares one machine ({os.cpu_count()} CPUs, shared with other work: the
1-minute load average before / after each scenario is given).
{headroom_note(busy)}
{HEADER}
{chr(10).join(rows)}

{chr(10).join(f"- {n}" for n in notes)}
- Total benchmark time {elapsed:.0f} s.
"""


@dataclass(frozen=True)
class Variant:
    """A switch the servers read from their environment (inherited from this process):
    the hand-built part it replaces with its plain alternative."""

    label: str
    values: dict[str, str]  # value -> what it measures; the default first

    def chosen(self, name: str) -> str:
        return os.environ.get(name, "").strip().lower() or next(iter(self.values))


VARIANTS = {
    "AGENTFORGE_WRITE_PATH": Variant("Write path", {
        "sql": "the hand-built SQL (store/sql/rowsql.py, store/sql/prepared.py), the default",
        "orm": "the ORM variants (AGENTFORGE_WRITE_PATH=orm: store/sql/rowsql_orm.py, "
               "store/sql/prepared_orm.py)",
    }),
    "AGENTFORGE_GROUP_COMMIT": Variant("Group commit", {
        "on": "several runs' batches and first claims in one transaction "
              "(runs/loops/loop_groups.py), the default",
        "off": "each run's batch and first claim alone, in its own transaction "
               "(AGENTFORGE_GROUP_COMMIT=off)",
    }),
    "AGENTFORGE_ASGI_HANDLER": Variant("HTTP handler", {
        "onehop": "the one-hop handler on kept threads (agentforge_web/handler.py), "
                  "the default",
        "django": "Django's own ASGIHandler (AGENTFORGE_ASGI_HANDLER=django)",
    }),
}


def chosen_variants() -> dict[str, str]:
    """Each switch's value in this process's environment, as the servers read it."""
    return {name: variant.chosen(name) for name, variant in VARIANTS.items()}


def unknown_variants() -> list[str]:
    """What is wrong with the switches' values (the servers would refuse to start)."""
    return [f"{name} must be one of {', '.join(VARIANTS[name].values)}"
            for name, value in chosen_variants().items()
            if value not in VARIANTS[name].values]


def variant_notes() -> list[str]:
    return [f"{VARIANTS[name].label}: {VARIANTS[name].values[value]}."
            for name, value in chosen_variants().items()]
