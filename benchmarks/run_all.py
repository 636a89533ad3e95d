"""Run every benchmark, then assemble docs/benchmarks.md from docs/benchmarks/*.md.

    make bench                                    (installs first, then this)
    .venv/bin/python -m benchmarks.run_all        every benchmarks/bench_*.py
    .venv/bin/python -m benchmarks.run_all bench_providers bench_render
    .venv/bin/python -m benchmarks.run_all --assemble-only

Each benchmark runs as `python -m benchmarks.<name>` in its own process (they set up
Django, servers and event loops of their own), bounded by a timeout, and writes its
result to docs/benchmarks/<name minus "bench_">.md. A benchmark that fails does not
stop the others; the exit status says whether all passed. Benchmarks are never part of
the test suite.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import RESULTS, ROOT

BENCHMARKS = Path(__file__).resolve().parent
SUMMARY = ROOT / "docs" / "benchmarks.md"
TIMEOUT_S = 900

HEADER = """# Benchmarks

Run on demand, never as part of the test suite: `make bench` runs every benchmark
(`.venv/bin/python -m benchmarks.run_all`, or a few by name:
`.venv/bin/python -m benchmarks.run_all bench_providers`), and one alone runs with
`.venv/bin/python -m benchmarks.<name>`. Each writes `docs/benchmarks/<name>.md` (the
latest results and the command that made them); this file is assembled from those by
`benchmarks/run_all.py`. Edit neither by hand, except each file's "What moved these
results" list (one line per commit), which a new run keeps. Absolute times depend on
the machine and on its load (each section says what it ran on); ratios measured in the
same invocation carry over better.
"""


def discover() -> list[str]:
    return sorted(path.stem for path in BENCHMARKS.glob("bench_*.py"))


def run(name: str) -> tuple[bool, float]:
    print(f"== {name}", flush=True)
    started = time.perf_counter()
    try:
        completed = subprocess.run([sys.executable, "-m", f"benchmarks.{name}"], cwd=ROOT,
                                   timeout=TIMEOUT_S, check=False)
        ok = completed.returncode == 0
    except subprocess.TimeoutExpired:
        print(f"{name}: no result within {TIMEOUT_S} s", file=sys.stderr)
        ok = False
    elapsed = time.perf_counter() - started
    print(f"== {name}: {'done' if ok else 'FAILED'} in {elapsed:.0f} s", flush=True)
    return ok, elapsed


def assemble() -> Path:
    sections = [path.read_text().strip() for path in sorted(RESULTS.glob("*.md"))]
    SUMMARY.write_text(HEADER + "".join(f"\n{section}\n" for section in sections))
    return SUMMARY


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the benchmarks, then assemble "
                                                 "docs/benchmarks.md.")
    parser.add_argument("names", nargs="*", help="benchmark modules (default: all)")
    parser.add_argument("--assemble-only", action="store_true",
                        help="only rebuild docs/benchmarks.md from docs/benchmarks/*.md")
    args = parser.parse_args(argv)
    known = discover()
    unknown = sorted(set(args.names) - set(known))
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(known)}")
    failed = []
    if not args.assemble_only:
        for name in args.names or known:
            ok, _ = run(name)
            if not ok:
                failed.append(name)
    path = assemble()
    print(f"wrote {path.relative_to(ROOT)}")
    if failed:
        print(f"failed: {', '.join(failed)} (their previous results, if any, were kept)",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
