"""bench_product_path's workload and what a scenario gives: the fake model's rounds,
parallel calls and latency (so a run's ideal wall time), the scenarios' sizes and
repeats, the scale-out's workers, the waits' bounds, and `Outcome`, one scenario's
measurements.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ROUNDS, PARALLEL, LATENCY_MS = 5, 2, 200
MODEL = f"fake-k{ROUNDS}-p{PARALLEL}-l{LATENCY_MS}"
MODEL_CALLS = ROUNDS + 1
IDEAL_MS = MODEL_CALLS * LATENCY_MS
ENDPOINT = "bench-product"
TOOLS = ["get_weather"]
SINGLE_REPEATS = 3
WARM_UP_WAVES = 10
# The largest scenario is repeated too, its runs pooled: one 100-run scenario's from
# emit p95 varies widely for the same code (the runs move in step, so its events'
# delays come in correlated bursts).
LARGE_RUNS, LARGE_REPEATS = 100, 3
WORKERS, WORKER_CONCURRENCY = 2, 50
DEFAULT_RUNS = (1, 20, 50, 100)

# Upper bounds of waits, never measured durations.
START_TIMEOUT = 40.0
SCENARIO_TIMEOUT = 120.0
POLL_S = 0.5

TERMINAL = {"succeeded", "failed", "cancelled"}


@dataclass
class Outcome:
    runs: int
    walls_ms: list[float] = field(default_factory=list)
    queued_ms: list[float] = field(default_factory=list)  # created -> started (claimed)
    from_emit_ms: list[float] = field(default_factory=list)
    cpu_s: dict[str, float] = field(default_factory=dict)
    others_s: dict[str, float] = field(default_factory=dict)
    machine: tuple[int, int] = (0, 0)  # busy and total clock ticks of the machine
    peak_mb: dict[str, float] = field(default_factory=dict)
    finished: int = 0
    failed: int = 0
    rounds: int = 0
    load: tuple[float, float] = (0.0, 0.0)
    start_errors: list[str] = field(default_factory=list)
    # From emit p95 of each scenario pooled here (a repeated scenario's).
    each_p95_ms: list[float] = field(default_factory=list)


# A configuration's outcomes, its "database is locked" lines and its processes' exits.
Result = tuple[list[Outcome], int, list[str]]
