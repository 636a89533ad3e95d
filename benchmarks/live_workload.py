"""bench_live's workload and what a scenario gives: the script every run plays, the
scenarios' runs and clients, the target, the waits' bounds, and `Outcome`, one
scenario's deliveries.
"""

from __future__ import annotations

from dataclasses import dataclass

# The script every run plays: a warm-up round (the watchers connect while it sleeps),
# then ROUNDS rounds of CALCS parallel calculator calls plus one slow_tool of SLOW_S,
# then a final answer: about 17 events per round, spread out by the slow tool.
WARMUP_S, ROUNDS, CALCS, SLOW_S = 2.0, 8, 4, 0.05
ENDPOINT = "bench-live"
# (c): a db_worker with one slot takes the 20 queued runs one after another, so the
# watchers are connected long before all but the first starts: no warm-up needed.
ENDPOINT_QUEUED = "bench-live-queued"
# (a): one watcher connects at once, so a short warm-up; the run is repeated for samples.
ENDPOINT_SINGLE, WARMUP_SINGLE_S, SINGLE_REPEATS = "bench-live-single", 0.5, 3
TOOLS = ["calculator", "slow_tool"]
TARGET_MS = 50.0

RUNS, CLIENTS = 20, 50

# Upper bounds of waits, never measured durations.
START_TIMEOUT = 30.0
EMBEDDED_TIMEOUT = 45.0
SCALE_OUT_TIMEOUT = 60.0
TAIL_S = 0.5  # after a client sees a terminal status, how long it waits for the last seq


@dataclass
class Outcome:
    runs: int
    clients: int
    latencies_ms: list[float]  # arrival - created_at, per (event, client)
    emitted_ms: list[float]  # arrival - the engine's event time, per (event, client)
    events: int  # events created while watched, summed over runs
    messages: int
    window_s: float  # first to last measured event's created_at
    runs_finished: int
    events_per_run: float  # all the events of a run, watched or not
    errors: list[str]
    unfinished: int  # clients that did not see their run finish
    load: tuple[float, float]  # 1-minute load average before and after
