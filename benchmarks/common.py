"""Helpers shared by the benchmarks: Django set-up on a throwaway database, stats."""

from __future__ import annotations

import os
import secrets
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "benchmarks"
# The benchmarks' models make the same calls round after round (a workload, not a loop):
# loop health still checks every round (its cost is measured) but flags none, so the
# default policy neither adds notes nor stops the runs at their fifth identical call.
LOOP_CHECKS_UNFLAGGED = {"loop_repeat_at": 100, "loop_repeat_stop_at": None,
                         "loop_ping_pong_at": 100, "loop_ping_pong_stop_at": None,
                         "loop_no_progress_at": 100, "loop_no_progress_stop_at": None}
UNFLAG_LOOPS_CODE = ("from tools_app.models import ErrorPolicy\n"
                     f"ErrorPolicy.objects.update(**{LOOP_CHECKS_UNFLAGGED!r})\n")
"""The same for a `manage.py shell -c` set-up (after seed_demo made its policy)."""


def setup_django(database_url: str | None = None, *,
                 allowed_hosts: str = "testserver") -> Path:
    """Configure Django as deployed (DEBUG off: no query log; a throwaway SECRET_KEY, so
    it runs outside the Makefile too) on a fresh SQLite file (unless a URL is given),
    serving `allowed_hosts` (Django's test client's by default), and migrate."""
    workdir = Path(tempfile.mkdtemp(prefix="agentforge-bench-"))
    os.environ.update({"DEBUG": "0", "SECRET_KEY": secrets.token_urlsafe(40),
                       "ALLOWED_HOSTS": allowed_hosts})
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentforge_web.settings")
    os.environ["DATABASE_URL"] = database_url or f"sqlite:///{workdir / 'bench.sqlite3'}"
    os.environ["AGENTFORGE_EMBEDDED_WORKER"] = "0"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    return workdir


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(values: list[float]) -> dict[str, float]:
    return {"p50": percentile(values, 50), "p95": percentile(values, 95),
            "mean": statistics.fmean(values) if values else float("nan"),
            "max": max(values) if values else float("nan"), "n": float(len(values))}


# The hand-kept list (one line per commit) of what moved a file's results: carried over
# from the file a benchmark replaces, so a new measurement keeps it.
MOVED_HEADING = "### What moved these results"


def command_line() -> str:
    """How this process was started, as a reader would type it again."""
    module = Path(sys.argv[0]).stem
    return " ".join([".venv/bin/python -m", f"benchmarks.{module}", *sys.argv[1:]])


def write_result(name: str, markdown: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.md"
    text = f"{markdown.rstrip()}\n\nCommand: `{command_line()}`\n"
    if path.exists():
        previous = path.read_text()
        if MOVED_HEADING in previous:
            text += "\n" + previous[previous.index(MOVED_HEADING):].rstrip() + "\n"
    path.write_text(text)
    return path
