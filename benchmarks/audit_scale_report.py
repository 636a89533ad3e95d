"""audit_scale's report: per database, each request's p50 / p95 / max against the
target, its query count at both sizes, and the export's time and memory; the markdown
written to docs/benchmarks/audit.md.
"""

from __future__ import annotations

import argparse
from typing import Any

TARGET_MS = 200.0


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    parts = [f"""
## The audit log at scale

`benchmarks/audit_scale.py` (`make bench-audit`): `seed_audit` fills each database with
{args.runs:,} runs and {args.runs * args.calls_per_run:,} tool calls ({args.calls_per_run} per
run, over six months, 20 users, 4 endpoints, 3 policies, 9 tools); every request goes
through Django's test Client (middleware, templates, views) as a staff user (sees
everything) and as an ordinary user (sees about 1/20), {args.repeat} times after a
warm-up; `q` is a count of the request's SQL queries, taken at {args.small_runs:,} runs and
at {args.runs:,}. Target: p95 < {TARGET_MS:.0f} ms. Machine: 2 cores shared with other
work (the load average while measuring is given per database: above 2, every figure
includes waiting for a core), SQLite file in WAL mode, PostgreSQL 15 on loopback; DEBUG
off; planner statistics fresh (ANALYZE after seeding).
"""]
    for result in results:
        parts.append(_database_section(result))
    return "\n".join(parts)


def _database_section(result: dict[str, Any]) -> str:
    small, full = result["phases"][0], result["phases"][-1]
    small_queries = {(r["who"], r["label"]): r["queries"] for r in small["requests"]}
    note = (" The small size's figures come from a separate run on a database of that "
            "size, with the same code; the full size's from a database seeded once and kept."
            if small.get("same_code") else
            " The small size's figures come from a first measurement, taken with earlier "
            "code; the full size's with the current code."
            if full.get("remeasured") else "")
    load = full["requests"][0].get("load") if full["requests"] else None
    lines = [f"### {result['database']}: {full['runs']:,} runs, {full['calls']:,} calls", "",
             f"Load average while measuring: {load[0]:.1f} -> {load[1]:.1f}." if load else "",
             "",
             "| who | request | p50 ms | p95 ms | max ms | q at "
             f"{small['runs'] // 1000}k / {full['runs'] // 1000}k | target |",
             "|---|---|---|---|---|---|---|"]
    missed = 0
    for row in full["requests"]:
        ok = row["p95"] < TARGET_MS
        missed += not ok
        lines.append(f"| {row['who']} | {row['label']} | {row['p50']:.0f} | {row['p95']:.0f} "
                     f"| {row['max']:.0f} | {small_queries.get((row['who'], row['label']), '-')} / "
                     f"{row['queries']} | {'ok' if ok else '**missed**'} |")
    grew = [r["label"] for r in full["requests"]
            if small_queries.get((r["who"], r["label"])) not in (None, r["queries"])]
    lines += ["", f"{len(full['requests']) - missed} of {len(full['requests'])} requests meet "
              f"the target; queries per request "
              f"{'the same at both sizes' if not grew else 'changed for: ' + ', '.join(grew)}."
              f"{note}", ""]
    for phase in (small, full):
        export = phase["export"]
        if export is None:
            continue
        lines.append(f"Export of {export['rows']:,} calls (JSON Lines, {export['mib']:.0f} "
                     f"MiB): {export['seconds']:.0f} s, resident memory grew by "
                     f"{export['rss_growth_mib']:.1f} MiB (from "
                     f"{export['rss_before_mib']:.0f} MiB).")
    return "\n".join(lines) + "\n"
