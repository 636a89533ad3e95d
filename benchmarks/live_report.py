"""bench_live's report: a row per scenario (latency from commit and from emit,
events, deliveries, messages, rate, load), whether each meets its target, what went
wrong; for (e) a row per channel and the efficiency watched and unwatched; and the
markdown written to docs/benchmarks/live.md.
"""

from __future__ import annotations

import os
import statistics

from benchmarks.common import summary
from benchmarks.live_workload import (
    CALCS,
    EFFICIENCY_SHARE,
    FOLLOWED_IDEAL_MS,
    FOLLOWED_MODEL,
    LOAD_TARGET_MS,
    ROUNDS,
    SINGLE_REPEATS,
    SLOW_S,
    TARGET_MS,
    WARM_UP_RUNS,
    WARMUP_S,
    WARMUP_SINGLE_S,
    Followed,
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


def verdict(label: str, o: Outcome, target: float) -> str:
    p95 = summary(o.latencies_ms)["p95"]
    return (f"{label} {'meets' if p95 < target else 'MISSES'} p95 < {target:g} ms "
            f"(p95 {ms(p95)})")


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


Watched = tuple[Outcome, Outcome, Outcome | str, Outcome | str]  # (a), (b), (c), (d)


def render(watched: Watched | None,
           followed: tuple[Followed, Followed | str, Followed] | None, elapsed: float) -> str:
    """The report of the scenarios run ((a)-(d), (e) or both; a scale-out one may be
    the reason it was skipped)."""
    parts = []
    if watched is not None:
        parts.append(render_watched(*watched))
    if followed is not None:
        parts.append(render_followed(*followed))
    return "\n".join(parts) + f"\nTotal benchmark time {elapsed:.0f} s.\n"


def render_watched(one: Outcome, many: Outcome, serial: Outcome | str,
                   concurrent: Outcome | str) -> str:
    rows = [row(f"(a) embedded, {SINGLE_REPEATS} runs in turn", one), row("(b) embedded", many)]
    verdicts = [verdict("(a)", one, TARGET_MS), verdict("(b)", many, LOAD_TARGET_MS)]
    notes = problems("(a)", one) + problems("(b)", many)
    for label, outcome in (("(c)", serial), ("(d)", concurrent)):
        if isinstance(outcome, Outcome):
            name = "one run at a time" if outcome is serial else "concurrent"
            rows.append(row(f"{label} scale-out, {name}", outcome))
            target = TARGET_MS if outcome is serial else LOAD_TARGET_MS
            verdicts.append(verdict(label, outcome, target))
            notes += problems(label, outcome)
        else:
            notes.append(f"{label} scale-out: {outcome}")
    per_run = many.events_per_run
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
{SCALE_OUT_NOTE}
"events": events created while watched; "deliveries": (event, client) pairs measured;
"messages": WebSocket messages (one covers every event committed since the previous one).

Targets: p95 < {TARGET_MS:g} ms for one run watched at a time ((a), (c)); p95 <
{LOAD_TARGET_MS:g} ms under load ((b), (d): 20 concurrent runs, 50 viewers). By scenario:
{"; ".join(verdicts)}.
{chr(10).join(f"- {n}" for n in notes)}
"""


def efficiency(walls_ms: list[float]) -> float:
    """Ideal / the median run's wall, as bench_product_path reports it."""
    return FOLLOWED_IDEAL_MS / statistics.median(walls_ms) if walls_ms else float("nan")


def followed_rows(label: str, f: Followed) -> tuple[list[str], list[str], list[str]]:
    """The rows of one configuration's (e), its verdicts and its notes."""
    watched, unwatched = efficiency(f.watched_walls_ms), efficiency(f.unwatched_walls_ms)
    delivered = len(f.sse.latencies_ms) + len(f.ws.latencies_ms)
    cpu_ms = f.cpu_s[1] * 1000 / delivered if delivered else float("nan")
    extra_ms = (f.cpu_s[1] - f.cpu_s[0]) * 1000 / delivered if delivered else float("nan")
    rows = [row(f"(e) {label}, SSE", f.sse), row(f"(e) {label}, WebSocket", f.ws)]
    effs = (f"| (e) {label} | {f.runs} | {unwatched:.0%} ({len(f.unwatched_walls_ms)} runs) "
            f"| {watched:.0%} ({len(f.watched_walls_ms)} runs) | **{watched / unwatched:.0%}** "
            f"| {f.cpu_s[0]:.2f} s / {f.cpu_s[1]:.2f} s | {cpu_ms:.2f} ms | {extra_ms:.2f} ms |")
    verdicts = [verdict(f"(e) {label} SSE", f.sse, LOAD_TARGET_MS),
                verdict(f"(e) {label} WebSocket", f.ws, LOAD_TARGET_MS),
                f"(e) {label} efficiency watched / unwatched {watched / unwatched:.0%} "
                f"{'meets' if watched >= EFFICIENCY_SHARE * unwatched else 'MISSES'} "
                f">= {EFFICIENCY_SHARE:.0%}"]
    notes = problems(f"(e) {label} SSE", f.sse) + problems(f"(e) {label} WebSocket", f.ws)
    return [*rows, effs], verdicts, notes


EFFICIENCY_HEADER = ("| configuration | runs | efficiency unwatched | efficiency watched "
                     "| watched / unwatched | product CPU unwatched / watched "
                     "| CPU per delivered event | extra CPU per delivered event |\n"
                     + "|---" * 8 + "|")


def render_followed(embedded: Followed, scale_out: Followed | str, floor: Followed) -> str:
    rows, verdicts, notes = followed_rows("embedded", embedded)
    latency, effs = rows[:2], rows[2:]
    floor_rows, _, floor_notes = followed_rows("embedded, batches not rendered", floor)
    if isinstance(scale_out, Followed):
        more, verdicts_s, notes_s = followed_rows("scale-out", scale_out)
        latency, effs = latency + more[:2], effs + more[2:]
        verdicts, notes = verdicts + verdicts_s, notes + notes_s
    else:
        notes.append(f"(e) scale-out: {scale_out}")
    return f"""
## Live delivery to API clients and viewers together: {embedded.runs} runs, each followed twice

{embedded.runs} runs started at once on the product path's workload (the fake provider's
`{FOLLOWED_MODEL}`: 6 model calls of 200 ms, 2 parallel `get_weather` calls a round; ideal
wall {FOLLOWED_IDEAL_MS} ms); right after its POST each run is followed by one Server-Sent
Events client (GET /api/runs/<id>/events/stream from seq 0, the API token) and one
WebSocket viewer (as above). Latency as above, per channel: an SSE message is one event
(its `id:` is the seq), counted from when the client sent its request. Before that, on the
same server (after {WARM_UP_RUNS} warm-up runs), the same number of runs unwatched: **efficiency** =
ideal / the median run's wall (`wall_ms`), as bench_product_path reports it. **CPU per
delivered event** = the product's CPU time (daphne, and the db_worker in scale-out; from
/proc) during the watched runs / the (event, client) pairs delivered live; **extra** is
that minus the same runs' CPU unwatched: what following costs.

{HEADER}
{chr(10).join(latency)}
{chr(10).join(floor_rows[:2])}

{EFFICIENCY_HEADER}
{chr(10).join(effs)}
{floor_rows[2]}

"Batches not rendered": the embedded server again (a fresh one), with its live batches
read but not rendered (benchmarks/live_floor_app.py: each WebSocket message is the seq
it reaches and the run's status, no template); the SSE stream is unchanged. What the
live path costs on this machine before any rendering: the WebSocket rows above minus
these are the rendering's share; a target below these rows is below the floor of one
server process running and serving these runs here.
{chr(10).join(f"- {n}" for n in floor_notes)}

Targets (issue 44): p95 < {LOAD_TARGET_MS:g} ms on both channels, and the watched runs'
efficiency >= {EFFICIENCY_SHARE:.0%} of the unwatched. By scenario: {"; ".join(verdicts)}.
{chr(10).join(f"- {n}" for n in notes)}
"""
