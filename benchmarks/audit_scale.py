"""The audit log at scale: every list page, filter, search, tool page and API list with
100,000 runs and 1,000,000 tool calls (target p95 < 200 ms each), the queries each
request makes (must not grow with the data: also measured at 10,000 runs), and an
export of every call streamed with flat memory.

For each database (a SQLite file, and a PostgreSQL database, `agentforge_bench` unless
--postgres-db names another, created and dropped here), in a process of its own:
migrate, `seed_audit` the small size, measure, seed the rest up to the full size,
measure again, export (unless --skip-export). Requests go through Django's
test Client (middleware, templates, the real views) as a logged-in staff user and as an
ordinary user (who sees about 1/20 of the runs); API requests carry a bearer token.
Each request is made once to warm up, then REPEAT times; its queries are counted on
one more request. The export is read to its end as a client would, sampling the
process's resident memory (VmRSS) as it goes.

Run: .venv/bin/python -m benchmarks.audit_scale     (make bench-audit; ~1 hour on 2 cores)
     .venv/bin/python -m benchmarks.audit_scale --runs 20000 --small-runs 2000 --databases sqlite
Results: docs/benchmarks/audit.md (the report: audit_scale_report.py)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks.audit_scale_report import report
from benchmarks.common import ROOT, setup_django, summary, write_result

POSTGRES_ADMIN = ["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-qAtc"]
POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/{name}"
# Two of seed_audit's users; the seed gives none staff rights, this benchmark's database
# makes the first one staff (_make_staff).
STAFF, USER = "audit-user-00", "audit-user-01"


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# -- what is measured ---------------------------------------------------------------------


def requests_to_measure(staff: bool) -> list[tuple[str, str, dict[str, str]]]:
    """(label, path, query) of every request, for a staff user or an ordinary one."""
    from django.utils import timezone

    from tools_app.models import ToolRegistration

    now = timezone.now()
    month_ago = (now - timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%S")
    five_months_ago = (now - timedelta(days=150)).strftime("%Y-%m-%dT%H:%M:%S")
    version = ToolRegistration.objects.get(name="calculator").version_hash
    order = _an_order_id()
    common = {"status": "failed", "endpoint": "gemini-flash (demo)", "tool": "calculator",
              "user": "audit-user-03" if staff else USER, "q": "kubernetes",
              "since": month_ago, "until": five_months_ago}
    run_filters = common | {"tool_version": version, "policy": "Strict arguments (demo)",
                            "error_type": "ProviderError", "has_errors": "true"}
    call_filters = common | {"state": "timeout", "min_ms": "1000", "max_ms": "10",
                             "handler": "tell_model_available_tools"}
    found: list[tuple[str, str, dict[str, str]]] = [
        ("/runs/ first page", "/runs/", {}),
        ("/runs/ deep page", "/runs/", {"cursor": _deep_run_cursor(staff)}),
        *[(f"/runs/ {_label(k, v)}", "/runs/", {k: v}) for k, v in run_filters.items()],
        ("/runs/ has_errors=false", "/runs/", {"has_errors": "false"}),
        ("/runs/ search 2 words", "/runs/", {"q": "zürich invoice"}),
        ("/runs/ search an order id", "/runs/", {"q": order}),
        # try-it runs shown (the page leaves them out by default), and sorted (each
        # sort's index; a status sorted in memory when its count allows)
        ("/runs/ tryit=any", "/runs/", {"tryit": "any"}),
        *[(f"/runs/ sort={sort}", "/runs/", {"sort": sort})
          for sort in ("started", "duration", "-duration", "errors", "-errors")],
        ("/runs/ sort=-duration deep page", "/runs/",
         {"sort": "-duration", "cursor": _deep_sorted_run_cursor(staff, "-duration")}),
        ("/runs/ status=failed sort=-duration", "/runs/",
         {"status": "failed", "sort": "-duration"}),
        ("/calls/ first page", "/calls/", {}),
        ("/calls/ deep page", "/calls/", {"cursor": _deep_call_cursor(staff)}),
        *[(f"/calls/ {_label(k, v)}", "/calls/", {k: v}) for k, v in call_filters.items()],
        ("/calls/ search 2 words", "/calls/", {"q": "zürich invoice"}),
        ("/calls/ search an order id", "/calls/", {"q": order}),
        # sorted (each sort's index; a rare outcome sorted in memory, as its count allows)
        *[(f"/calls/ sort={sort}", "/calls/", {"sort": sort})
          for sort in ("started", "-started", "duration", "-duration", "tool", "-tool")],
        ("/calls/ sort=-started deep page", "/calls/",
         {"sort": "-started", "cursor": _deep_sorted_call_cursor(staff, "-started")}),
        ("/calls/ tool=calculator sort=-duration", "/calls/",
         {"tool": "calculator", "sort": "-duration"}),
        ("/calls/ state=timeout sort=duration", "/calls/",
         {"state": "timeout", "sort": "duration"}),
        ("/calls/ status=failed sort=-duration", "/calls/",
         {"status": "failed", "sort": "-duration"}),
        # the calls list's totals, a request of their own
        *[(f"/calls/totals/ {_label(k, v)}", "/calls/totals/", {k: v} if k else {})
          for k, v in (("", ""), ("status", "failed"), ("state", "timeout"),
                       ("q", "kubernetes"))],
        ("/tools/", "/tools/", {}),
        ("/tools/calculator/", "/tools/calculator/", {}),
        ("GET /api/runs", "/api/runs", {}),
        ("GET /api/calls", "/api/calls", {}),
    ]
    return found


def _an_order_id() -> str:
    """A specific word, as people search for one: an order id the seed's lookup_order
    calls used (in a handful of calls, where the seeded vocabulary's words are in a
    third of them)."""
    from tools_app.models import ToolCall

    arguments = ToolCall.objects.filter(tool_name="lookup_order").order_by("pk").values_list(
        "arguments", flat=True).first()
    return str(arguments["order_id"]) if arguments else "ORD-00000"


def _label(name: str, value: str) -> str:
    """The same label at both sizes (the time bounds are relative to now)."""
    shown = {"since": "30 days ago", "until": "150 days ago", "tool_version": "<hash>"}
    return f"{name}={shown.get(name, value)}" if name else "no filter"


def _deep_run_cursor(staff: bool) -> str:
    from django.contrib.auth import get_user_model

    from tools_app.audit.run_filters import _encode_cursor
    from tools_app.runs.store import selectors

    user = get_user_model().objects.get(username=STAFF if staff else USER)
    runs = selectors.run_list_for_user(user).order_by("-created_at", "-pk")
    middle = runs[runs.count() // 2]
    return _encode_cursor(middle)


def _deep_sorted_run_cursor(staff: bool, sort: str) -> str:
    """The cursor of a page halfway down the runs page's runs in `sort`'s order."""
    from django.contrib.auth import get_user_model

    from tools_app.audit.run_filters import SORTS, _encode_sorted_cursor, matching_runs
    from tools_app.runs.store import selectors

    user = get_user_model().objects.get(username=STAFF if staff else USER)
    key = SORTS[sort]
    runs = matching_runs(selectors.run_list_for_user(user), {"tryit": "false"}).alias(
        sort_key=key.key()).order_by(*(("-sort_key", "-pk") if key.descending
                                       else ("sort_key", "pk")))
    return _encode_sorted_cursor(key, runs[runs.count() // 2])


def _deep_call_cursor(staff: bool) -> str:
    from django.contrib.auth import get_user_model

    from tools_app.audit.call_filters import _encode_cursor
    from tools_app.audit.selectors import calls_for_user

    user = get_user_model().objects.get(username=STAFF if staff else USER)
    calls = calls_for_user(user).order_by("-pk")
    return _encode_cursor(calls[calls.count() // 2])


def _deep_sorted_call_cursor(staff: bool, sort: str) -> str:
    """The cursor of a page halfway down the calls in `sort`'s order."""
    from django.contrib.auth import get_user_model

    from tools_app.audit.call_sorts import SORTS, encode_sorted_cursor
    from tools_app.audit.selectors import calls_for_user

    user = get_user_model().objects.get(username=STAFF if staff else USER)
    calls = calls_for_user(user).order_by("-pk")
    return encode_sorted_cursor(SORTS[sort], calls[calls.count() // 2])


def measure_requests(repeat: int) -> list[dict[str, Any]]:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from tools_app.web.api.tokens import create_token

    results: list[dict[str, Any]] = []
    load_before = os.getloadavg()[0]
    _make_staff()
    for who in (STAFF, USER):
        user = get_user_model().objects.get(username=who)
        client = Client()
        client.force_login(user)
        token = create_token(user, "bench")[1]
        for label, path, query in requests_to_measure(user.is_staff):
            headers = {"Authorization": f"Bearer {token}"} if path.startswith("/api/") else {}

            def get(path: str = path, query: dict[str, str] = query,
                    headers: dict[str, str] = headers, client: Client = client) -> Any:
                return client.get(path, query, headers=headers)

            first = get()
            assert first.status_code == 200, (label, first.status_code, first.content[:300])
            timings = []
            for _ in range(repeat):
                started = time.perf_counter()
                get()
                timings.append((time.perf_counter() - started) * 1000)
            with CaptureQueriesContext(connection) as queries:
                get()
            results.append({"who": "staff" if user.is_staff else "user", "label": label,
                            "queries": len(queries), **summary(timings)})
            print(f"  {results[-1]['who']:5} {label:40} p50 {results[-1]['p50']:7.1f} "
                  f"p95 {results[-1]['p95']:7.1f} q {len(queries)}", flush=True)
    # The machine's load while measuring: the figures depend on it as much as on the data.
    results[0]["load"] = [load_before, os.getloadavg()[0]]
    return results


def _make_staff() -> None:
    """The staff side of the measurements: seed_audit's first user, made staff here."""
    from django.contrib.auth import get_user_model

    get_user_model().objects.filter(username=STAFF).update(is_staff=True)


def measure_export() -> dict[str, Any]:
    """Every call, streamed as JSON Lines through the API, read to the end."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from tools_app.web.api.tokens import create_token

    _make_staff()
    user = get_user_model().objects.get(username=STAFF)
    token = create_token(user, "export")[1]
    client = Client()
    before = rss_kib()
    peak, rows, size = before, 0, 0
    started = time.perf_counter()
    response = client.get("/api/calls/export.jsonl",
                          headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    samples = []
    for chunk in response.streaming_content:  # type: ignore[attr-defined]  # a streaming export
        rows += 1
        size += len(chunk)
        if rows % 10_000 == 0:
            now = rss_kib()
            peak = max(peak, now)
            samples.append((rows, now))
    seconds = time.perf_counter() - started
    peak = max(peak, rss_kib())
    return {"rows": rows, "mib": size / 2**20, "seconds": seconds,
            "rss_before_mib": before / 1024, "rss_growth_mib": (peak - before) / 1024,
            "samples": samples}


# -- one database, in its own process ---------------------------------------------------


def child(database: str, args: argparse.Namespace) -> dict[str, Any]:
    os.environ["LOG_LEVEL"] = "ERROR"
    previous = _previous(args.reuse, database)
    name = args.postgres_db
    if database == "postgres":
        url = POSTGRES_URL.format(name=name)
        if previous is None:
            _postgres(f"DROP DATABASE IF EXISTS {name}")
            _postgres(f"CREATE DATABASE {name}")
    else:
        url = f"sqlite:///{Path(args.workdir) / 'audit.sqlite3'}"
        if previous is None:
            Path(args.workdir, "audit.sqlite3").unlink(missing_ok=True)
    setup_django(url)  # a kept database gets the migrations added since
    result: dict[str, Any] = {"database": database, "phases": []}
    if previous is not None:  # re-measure the kept full-size database only
        _analyze()
        full = previous["phases"][-1]
        if full["export"] is None:  # stopped before its first measurement
            from tools_app.models import Run, ToolCall

            full = {"runs": Run.objects.count(), "calls": ToolCall.objects.count(),
                    "seed_s": float("nan"),
                    "export": None if args.skip_export else measure_export()}
        result["phases"] = [previous["phases"][0], {
            **full, "requests": measure_requests(args.repeat), "remeasured": True}]
    else:
        done = 0
        for size, seed in ((args.small_runs, 1), (args.runs, 2)):
            result["phases"].append(_seed_and_measure(database, size, done, seed, args))
            done = size
    if database == "postgres" and not args.keep:
        from django.db import connections

        connections.close_all()
        # Closed connections go back to the process's pool, which still holds them open:
        # PostgreSQL refuses to drop a database in use.
        for connection in connections.all(initialized_only=True):
            close_pool = getattr(connection, "close_pool", None)
            if close_pool is not None:
                close_pool()
        _postgres(f"DROP DATABASE IF EXISTS {name}")
    return result


def _previous(path: str | None, database: str) -> dict[str, Any] | None:
    if not path:
        return None
    if path.endswith(".log"):
        return _from_log(Path(path).read_text(), database)
    loaded: dict[str, Any] = json.loads(Path(path).read_text())
    assert loaded["database"] == database, "--reuse takes the same database's figures"
    return loaded


def _from_log(text: str, database: str) -> dict[str, Any]:
    """The small size's figures as an interrupted run printed them (its progress lines):
    p50, p95 and queries per request; no export (it printed none). For a run stopped
    after seeding, so the full size is measured once, with the current code."""
    requests, runs = [], 0
    for line in text.splitlines():
        if " runs seeded in " in line:
            if runs:
                break
            runs = int(line.split(": ")[1].split()[0])
            continue
        parts = line.split()
        if runs and len(parts) > 6 and parts[0] in ("staff", "user") and parts[-2] == "q":
            label = line[len("  staff "):line.index(" p50 ")].strip()
            requests.append({"who": parts[0], "label": label, "p50": float(parts[-5]),
                             "p95": float(parts[-3]), "max": float("nan"),
                             "queries": int(parts[-1])})
    return {"database": database, "phases": [
        {"runs": runs, "calls": 0, "seed_s": 0.0, "requests": requests, "export": None},
        {"runs": 0, "calls": 0, "seed_s": 0.0, "requests": [], "export": None}]}


def _seed_and_measure(database: str, size: int, done: int, seed: int,
                      args: argparse.Namespace) -> dict[str, Any]:
    from django.core.management import call_command

    started = time.perf_counter()
    call_command("seed_audit", runs=size - done, calls_per_run=args.calls_per_run, seed=seed,
                 verbosity=0)
    seeded = time.perf_counter() - started
    _analyze()
    print(f"{database}: {size} runs seeded in {seeded:.0f} s; measuring", flush=True)
    return _measure(size, args, seeded)


def _measure(size: int, args: argparse.Namespace, seeded: float) -> dict[str, Any]:
    return {"runs": size, "calls": size * args.calls_per_run, "seed_s": seeded,
            "requests": measure_requests(args.repeat),
            "export": None if args.skip_export else measure_export()}


def _postgres(statement: str) -> None:
    subprocess.run([*POSTGRES_ADMIN, statement], check=True, timeout=120)


def _analyze() -> None:
    """Fresh planner statistics after a bulk load, as autovacuum would have by then."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--small-runs", type=int, default=10_000)
    parser.add_argument("--calls-per-run", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--databases", default="sqlite,postgres")
    parser.add_argument("--save", help="also keep the figures as JSON in this file")
    parser.add_argument("--report-from", nargs="*",
                        help="write the report from JSON files --save kept, measuring nothing")
    parser.add_argument("--workdir", default=tempfile.gettempdir(),
                        help="where the SQLite database file is (kept)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the PostgreSQL database for a later --reuse")
    parser.add_argument("--reuse", help="measure the kept database again (after a fix): "
                        "the JSON --save kept, whose small-size figures are reused")
    parser.add_argument("--postgres-db", default="agentforge_bench",
                        help="the PostgreSQL database to use (created and dropped here)")
    parser.add_argument("--skip-export", action="store_true",
                        help="measure the requests only, not the export")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        result = child(args.child, args)
        Path(args.out).write_text(json.dumps(result))
        return 0
    if args.report_from:
        results = [json.loads(Path(name).read_text()) for name in args.report_from]
    else:
        results = [_in_child(database, args) for database in args.databases.split(",")]
    if args.save:
        Path(args.save).write_text(json.dumps(results[0] if len(results) == 1 else results))
    path = write_result("audit", report(results, args))
    print(path.read_text())
    return 0


def _in_child(database: str, args: argparse.Namespace) -> dict[str, Any]:
    forwarded = [f"--{name.replace('_', '-')}={value}" for name, value in vars(args).items()
                 if name in ("runs", "small_runs", "calls_per_run", "repeat", "workdir",
                             "reuse", "postgres_db") and value is not None]
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([sys.executable, "-m", "benchmarks.audit_scale", "--child", database,
                        "--out", out.name, *forwarded, *(["--keep"] if args.keep else []),
                        *(["--skip-export"] if args.skip_export else [])],
                       cwd=ROOT, check=True)
        loaded: dict[str, Any] = json.loads(Path(out.name).read_text())
        return loaded


if __name__ == "__main__":
    sys.exit(main())
