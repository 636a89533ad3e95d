"""bench_live's workload and what a scenario gives: the script every run plays, the
scenarios' runs and clients, the targets, the waits' bounds, `Outcome`, one
scenario's deliveries, and `Followed`, the runs followed over SSE and WebSocket.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks.product_path_workload import IDEAL_MS, MODEL

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
TARGET_MS = 50.0  # one run's events, watched one run at a time: (a), (c)
LOAD_TARGET_MS = 100.0  # under load (issue 44): (b), (d), (e)

# (e): runs on the product path's workload (the fake provider: 6 model calls of 200 ms,
# 2 parallel get_weather calls a round; ideal wall IDEAL_MS), each followed by one SSE
# client and one WebSocket viewer; the same number of runs unwatched beforehand, on the
# same server, for the efficiency (IDEAL_MS / the run's wall, as bench_product_path).
ENDPOINT_FOLLOWED, FOLLOWED_MODEL, FOLLOWED_TOOLS = "bench-live-followed", MODEL, ["get_weather"]
FOLLOWED_RUNS, FOLLOWED_IDEAL_MS = 50, IDEAL_MS
EFFICIENCY_SHARE = 0.9  # watched efficiency at least this share of the unwatched one
WARM_UP_RUNS = 2  # unmeasured, first: a process's first run imports and connects
# The server lets one API user hold this many event streams at once (the default is 10).
STREAMS_PER_USER = 64

RUNS, CLIENTS = 20, 50

# Upper bounds of waits, never measured durations.
START_TIMEOUT = 30.0
EMBEDDED_TIMEOUT = 45.0
SCALE_OUT_TIMEOUT = 60.0
FOLLOWED_TIMEOUT = 60.0
POLL_S = 0.5  # waiting for unwatched runs to end: one GET per run at most this often
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


@dataclass
class Followed:
    """(e): the same number of runs unwatched, then each followed over SSE and WebSocket."""

    runs: int
    ws: Outcome
    sse: Outcome
    watched_walls_ms: list[float] = field(default_factory=list)
    unwatched_walls_ms: list[float] = field(default_factory=list)
    cpu_s: tuple[float, float] = (0.0, 0.0)  # the product's CPU: unwatched, watched
