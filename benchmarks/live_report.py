"""bench_live's report: a row per scenario (latency from commit and from emit,
events, deliveries, messages, rate, load), whether each meets the target, what went
wrong, and the markdown written to docs/benchmarks/live.md.
"""

from __future__ import annotations

import os

from benchmarks.common import summary
from benchmarks.live_workload import (
    CALCS,
    ROUNDS,
    SINGLE_REPEATS,
    SLOW_S,
    TARGET_MS,
    WARMUP_S,
    WARMUP_SINGLE_S,
    Outcome,
)

HEADER = ("| scenario | runs / clients | p50 | p95 | max | from emit p50 / p95 | events "
          "| deliveries | messages | events/s | load |\n" + "|---" * 11 + "|")


def ms(value: float) -> str:
    return f"{value:.0f} ms" if value >= 100 else f"{value:.1f} ms"


def row(label: str, o: Outcome) -> str:
    live, emit = summary(o.latencies_ms), summary(o.emitted_ms)
    rate = o.events / o.window_s if o.window_s > 0 else float("nan")
    return (f"| {label} | {o.runs} / {o.clients} | **{ms(live['p50'])}** | **{ms(live['p95'])}** "
            f"| {ms(live['max'])} | {ms(emit['p50'])} / {ms(emit['p95'])} | {o.events} "
            f"| {len(o.latencies_ms)} | {o.messages} | {rate:.0f} "
            f"| {o.load[0]:.1f} / {o.load[1]:.1f} |")


def verdict(label: str, o: Outcome) -> str:
    p95 = summary(o.latencies_ms)["p95"]
    return f"{label} {'meets' if p95 < TARGET_MS else 'MISSES'} it (p95 {ms(p95)})"


def problems(label: str, o: Outcome) -> list[str]:
    notes = [f"{label}: a client saw {error}" for error in o.errors]
    if o.runs_finished < o.runs:
        notes.append(f"{label}: only {o.runs_finished} of {o.runs} runs finished within the "
                     "time bound; the figures cover what was delivered until then")
    if o.unfinished:
        notes.append(f"{label}: {o.unfinished} of {o.clients} clients did not see their run "
                     "finish within the time bound")
    return notes


SCALE_OUT_NOTE = """(c), (d): the scale-out configuration, in separate processes: PostgreSQL, the
Redis channel layer, daphne and one `manage.py db_worker` (TASK_BACKEND=database); the 50
clients are spread over the 20 runs as in (b). In (c) the worker has one slot
(`--concurrency 1`, the default), so the 20 runs (no warm-up step) ran one after another
and at any moment only one run's 2-3 watchers received events: it shows the cost of one
event's path (PostgreSQL commits in the worker, the Redis hop, PostgreSQL reads in
daphne). In (d) the worker has a slot per run (`--concurrency 20`): the runs execute at
once, as tasks of the worker's one event loop (docs/ARCHITECTURE.md). On this machine
everything shares 2 CPUs (PostgreSQL, Redis, the worker, daphne and the clients): in (d)
the latency is mostly queueing for the CPU; the configuration is meant for several
machines."""


def render(one: Outcome, many: Outcome, serial: Outcome | str, concurrent: Outcome | str,
           elapsed: float) -> str:
    """The report of the four scenarios (a scale-out one is a reason it was skipped)."""
    rows = [row(f"(a) embedded, {SINGLE_REPEATS} runs in turn", one), row("(b) embedded", many)]
    verdicts = [verdict("(a)", one), verdict("(b)", many)]
    notes = problems("(a)", one) + problems("(b)", many)
    for label, outcome in (("(c)", serial), ("(d)", concurrent)):
        if isinstance(outcome, Outcome):
            name = "one run at a time" if outcome is serial else "concurrent"
            rows.append(row(f"{label} scale-out, {name}", outcome))
            verdicts.append(verdict(label, outcome))
            notes += problems(label, outcome)
        else:
            notes.append(f"{label} scale-out: {outcome}")
    scale_note = SCALE_OUT_NOTE
    per_run = many.events_per_run
    met = all(summary(o.latencies_ms)["p95"] < TARGET_MS for o in (one, many))
    return f"""
## Live latency: event commit -> arrival in a WebSocket client

A real `daphne` server on loopback, runs started with POST /api/runs (so they execute in
the server's worker), aiohttp WebSocket clients logged in with a session cookie, sending
the page's Origin and `resume` message. Each run plays a scripted model: a {WARMUP_S:g} s
warm-up call (the watchers connect meanwhile), then {ROUNDS} rounds of {CALCS} parallel
`calculator` calls + one `slow_tool` of {SLOW_S:g} s, then an answer: {per_run:.0f} events per
run, in bursts (the parallel calls' proposed / started / finished events come together).
In (a) the warm-up is {WARMUP_SINGLE_S:g} s and {SINGLE_REPEATS} runs are watched one after
another, for more samples.

**Latency** = arrival (client clock) - `RunEvent.created_at`, for every event a message
newly covers (a message covers the seqs after the previous one's `run-seq` up to its own),
counted only for events created after the client sent `resume` (the rest is catch-up).
`created_at` is stamped at the RunEvent insert, inside the event's transaction just before
the commit, so this includes the rest of that transaction and the commit: a slight
over-estimate of commit -> arrival. **From emit** = arrival - the engine event's own time
(`at`), which adds the wait for the database write (lock, queue) before the insert: what
a user watching the page experiences. Server and clients share one machine
({os.cpu_count()} CPUs) and one clock; the machine is shared with other work, so the load
average (1 min, before / after each scenario) is given.

{HEADER}
{chr(10).join(rows)}

(a), (b): the embedded configuration (SQLite WAL, the in-memory channel layer, the
in-process worker inside daphne); in (b) the 50 clients are spread 3/3/.../2 over the 20
runs, which all start within a fraction of a second and so burst together.
{scale_note}
"events": events created while watched; "deliveries": (event, client) pairs measured;
"messages": WebSocket messages (one covers every event committed since the previous one).
Total benchmark time {elapsed:.0f} s.

Target p95 < {TARGET_MS:g} ms for 1 run and for 20 concurrent runs watched by 50 clients, on
the default (embedded) configuration: {"met" if met else "NOT met"}. By scenario:
{"; ".join(verdicts)}.
{chr(10).join(f"- {n}" for n in notes)}
"""
