"""`manage.py seed_audit --runs N --calls-per-run M [--seed S]`: fill a database with
finished-looking runs for the audit log (benchmarks, demos of the lists and tool pages);
`manage.py seed_audit --clear` removes all of it again.

Varied as real use is: several endpoints and policies, the example tools plus a few
mock ones and a hallucinated name, every call outcome with its error type and handler,
users (and API runs with none), dates spread over months, arguments and results from a
few bytes to kilobytes. Fast: rows are built in memory and written with bulk_create in
batches, one transaction per batch (no save(), no signals, no events: the audit log
reads runs, rounds and calls only). The same --seed gives the same rows; the run ids
derive from it, so a second identical command finds its runs and adds nothing, while
another seed adds another set.

Demo data, marked as such: every user, endpoint, policy and tool the seed creates (never
one that already existed) and every seed's set of runs gets a DemoRecord, which is what
`--clear` removes by. The users are no staff and have no usable password; the endpoints
play an offline script, so a run started on one works like any other. The work is in
tools_app/management/seeding/ (demo_data, rows, bulk_write).
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from tools_app.management.seeding.bulk_write import reset_sequences, write_batch
from tools_app.management.seeding.demo_data import clear, demo_world, mark_runs, run_id
from tools_app.models import Run


class Command(BaseCommand):
    help = "Fill the database with varied runs and tool calls for the audit log."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, help="Required unless --clear.")
        parser.add_argument("--calls-per-run", type=int, help="Required unless --clear.")
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--months", type=int, default=6,
                            help="Runs are dated over this many months before now.")
        parser.add_argument("--batch", type=int, default=1000, help="Runs per transaction.")
        parser.add_argument("--clear", action="store_true",
                            help="Remove everything seed_audit made (runs of every seed, "
                                 "users, endpoints, policies, tools) and nothing else.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["clear"]:
            self.stdout.write(clear())
            return
        runs, per_run, batch = options["runs"], options["calls_per_run"], options["batch"]
        if runs is None or per_run is None:
            raise CommandError("--runs and --calls-per-run are required (or --clear)")
        if not (1 <= runs <= 10_000_000 and 0 <= per_run <= 1000 and 1 <= batch <= 100_000):
            raise CommandError("--runs 1..10,000,000, --calls-per-run 0..1,000, --batch "
                               "1..100,000")
        if options["months"] < 1:
            raise CommandError("--months must be at least 1")
        seed = options["seed"]
        rng = random.Random(seed)  # noqa: S311  (repeatable data, not secrets)
        if Run.objects.filter(pk=run_id(seed, 0)).exists():
            self.stdout.write(f"seed_audit: seed {options['seed']} is already here; "
                              "nothing added")
            return
        world = demo_world()
        mark_runs(seed, runs)
        end = timezone.now().replace(microsecond=0)
        start = end - timedelta(days=30 * options["months"])
        step = (end - start) / runs
        made = 0
        for offset in range(0, runs, batch):
            count = min(batch, runs - offset)
            made += write_batch(rng, world, [
                (run_id(seed, n), start + step * n) for n in range(offset, offset + count)],
                per_run)
        reset_sequences()
        self.stdout.write(f"seed_audit: {runs} runs, {made} tool calls "
                          f"(seed {options['seed']})")
