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
play an offline script, so a run started on one works like any other.
"""

from __future__ import annotations

import hashlib
import json
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.management.color import no_style
from django.db import connection, models, transaction
from django.db.models import DateTimeField, JSONField, UUIDField
from django.utils import timezone

from tools_app.models import (
    DemoKind,
    DemoRecord,
    ErrorPolicy,
    ModelEndpoint,
    ProviderKind,
    Round,
    Run,
    RunStatus,
    ToolCall,
    ToolKind,
    ToolRegistration,
)
from tools_app.tools.registry import sync_tools

# Named after models to vary the lists, but all of them the offline scripted model
# (engine.providers.scripted): a run someone starts on one succeeds, with no key and no
# network. The playground ticks the tool the script calls.
ENDPOINTS = (("gpt-4o (demo)", "gpt-4o"), ("claude-sonnet (demo)", "claude-sonnet-4"),
             ("gemini-flash (demo)", "gemini-2.0-flash"), ("local llama (demo)", "llama3.1:8b"))
DEMO_SCRIPT = [
    {"text": "Let me look that up.",
     "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
    {"text": "(A demo endpoint of seed_audit, answering offline.) {last_results}"},
]
POLICIES = ("Default (demo)", "Strict arguments (demo)", "Lenient (demo)")
MOCK_TOOLS = ("search_docs", "read_file", "sql_query")
EXAMPLE_TOOLS = ("get_weather", "calculator", "convert_units", "always_fails", "slow_tool",
                 "lookup_order")
HALLUCINATED = "get_stock_price"
USERS = 20
# The limits timed-out calls report ("timed out after 10 s"); their durations exceed them.
TIMEOUTS_S = (5, 10, 30)
CITIES = ("Paris", "Hangzhou", "London", "Zürich", "São Paulo", "Lagos", "Oslo", "Kyoto",
          "Lima", "Reykjavík", "Nairobi", "Toronto")
WORDS = ("invoice", "refund", "shipment", "latency", "quota", "migration", "backup",
         "kubernetes", "postgres", "forecast", "budget", "contract", "release", "rollback")
# (stored state, weight, error type, handler); weights are per thousand calls.
OUTCOMES = (("succeeded", 880, "", ""),
            ("execution_error", 45, "ToolExecutionError", "policy_execution_to_model"),
            ("arguments_error", 25, "ToolArgumentsError", "policy_arguments_to_model"),
            ("timed_out", 20, "ToolTimeoutError", "policy_execution_to_model"),
            ("hallucinated", 10, "HallucinatedToolError", "tell_model_available_tools"),
            ("rejected", 10, "ToolRejectedError", "policy_execution_to_model"),
            ("unknown_outcome", 5, "UnknownOutcomeError", "policy_execution_to_model"),
            ("cancelled", 5, "CancelledError", ""))  # in cancelled runs only
STATUSES = (("succeeded", 820), ("failed", 110), ("cancelled", 30), ("interrupted", 20),
            ("running", 15), ("queued", 5))
RUN_ERRORS = (("ProviderError", "HTTP 429 from the provider: rate limit exceeded"),
              ("ProviderError", "HTTP 500 from the provider: internal error"),
              ("MaxRoundTripsExceededError", "stopped after the maximum number of rounds"),
              ("ToolArgumentsError", "invalid arguments, the policy stops the run"),
              ("WorkerLost", "the worker was lost too many times"))


@dataclass
class World:
    """What the rows point at: users, endpoints, policies, tool names."""

    users: list[Any]
    endpoints: list[ModelEndpoint]
    policies: list[ErrorPolicy]
    tools: list[str]
    hashes: dict[str, str] = field(default_factory=dict)


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
        world = _world()
        _mark_runs(seed, runs)
        end = timezone.now().replace(microsecond=0)
        start = end - timedelta(days=30 * options["months"])
        step = (end - start) / runs
        made = 0
        for offset in range(0, runs, batch):
            count = min(batch, runs - offset)
            made += _write_batch(rng, world, [
                (run_id(seed, n), start + step * n) for n in range(offset, offset + count)],
                per_run)
        _reset_sequences()
        self.stdout.write(f"seed_audit: {runs} runs, {made} tool calls "
                          f"(seed {options['seed']})")


@transaction.atomic
def _world() -> World:
    """The users, endpoints, policies and tools the runs point at: created if missing,
    and marked when created here (what already existed is used as it is, unmarked)."""
    made: list[tuple[DemoKind, Any]] = []
    synced = sync_tools(["tools_app.tools.example_tools"])
    made += [(DemoKind.TOOL, pk) for pk in ToolRegistration.objects.filter(
        name__in=synced.created).values_list("pk", flat=True)]
    for name in MOCK_TOOLS:
        tool, created = ToolRegistration.objects.get_or_create(name=name, defaults={
            "kind": ToolKind.MOCK, "description": f"Seeded mock tool {name}",
            "json_schema": {"type": "object"},
            "version_hash": hashlib.sha256(name.encode()).hexdigest()})
        if created:
            made.append((DemoKind.TOOL, tool.pk))
    hashes = dict(ToolRegistration.objects.values_list("name", "version_hash"))
    endpoints = []
    for name, model in ENDPOINTS:
        endpoint, created = ModelEndpoint.objects.get_or_create(name=name, defaults={
            "kind": ProviderKind.SCRIPTED, "model": model, "script": DEMO_SCRIPT})
        endpoints.append(endpoint)
        if created:
            made.append((DemoKind.ENDPOINT, endpoint.pk))
    policies = []
    for name in POLICIES:
        policy, created = ErrorPolicy.objects.get_or_create(name=name)
        policies.append(policy)
        if created:
            made.append((DemoKind.POLICY, policy.pk))
    users = []
    for index in range(USERS):
        user, created = _user(index)
        users.append(user)
        if created:
            made.append((DemoKind.USER, user.pk))
    DemoRecord.objects.bulk_create([DemoRecord(kind=kind, key=str(pk)) for kind, pk in made],
                                   ignore_conflicts=True)
    return World(users, endpoints, policies, [*EXAMPLE_TOOLS, *MOCK_TOOLS], hashes)


def _user(index: int) -> tuple[Any, bool]:
    """A demo user: no staff rights, and no password anyone could log in with."""
    user, created = get_user_model().objects.get_or_create(username=f"audit-user-{index:02d}")
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user, created


def _mark_runs(seed: int, runs: int) -> None:
    """Mark a seed's runs before writing them, so a seed stopped half-way is removable
    too; the count only grows (runs removed by hand may be seeded again)."""
    record, created = DemoRecord.objects.get_or_create(
        kind=DemoKind.RUNS, key=str(seed), defaults={"count": runs})
    if not created and record.count < runs:
        record.count = runs
        record.save(update_fields=["count"])


# Removing demo data: a seed's runs in batches (with their rounds, calls and events), then
# the users (None: the user model), endpoints, policies and tools it made, and the marks.
CLEAR_BATCH = 500
CLEARED: tuple[tuple[DemoKind, type[models.Model] | None, str], ...] = (
    (DemoKind.USER, None, "users"), (DemoKind.ENDPOINT, ModelEndpoint, "endpoints"),
    (DemoKind.POLICY, ErrorPolicy, "policies"), (DemoKind.TOOL, ToolRegistration, "tools"))


def clear() -> str:
    """Remove what the seed made, by its marks; says what was removed."""
    marks = list(DemoRecord.objects.all())
    if not marks:
        return "seed_audit: no seeded data to remove"
    removed = {"runs": sum(_clear_runs(int(m.key), m.count)
                           for m in marks if m.kind == DemoKind.RUNS)}
    with transaction.atomic():
        for kind, model, label in CLEARED:
            keys = [m.key for m in marks if m.kind == kind]
            rows = (model or get_user_model())._default_manager.filter(pk__in=keys)
            removed[label] = rows.count()
            rows.delete()
        DemoRecord.objects.filter(pk__in=[m.pk for m in marks]).delete()
    return "seed_audit: removed " + ", ".join(f"{n} {label}" for label, n in removed.items())


def _clear_runs(seed: int, count: int) -> int:
    removed = 0
    for start in range(0, count, CLEAR_BATCH):
        ids = [run_id(seed, n) for n in range(start, min(start + CLEAR_BATCH, count))]
        with transaction.atomic():
            batch = Run.objects.filter(pk__in=ids)
            removed += batch.count()
            batch.delete()
    return removed


def run_id(seed: int, number: int) -> uuid.UUID:
    """The id of a seed's n-th run: the same seed gives the same ids."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"agentforge-seed-audit:{seed}:{number}")


def _write_batch(rng: random.Random, world: World, runs_at: list[tuple[uuid.UUID, datetime]],
                 per_run: int) -> int:
    runs, rounds, calls = [], [], []
    for pk, moment in runs_at:
        run, run_rounds, run_calls = _run(rng, world, pk, moment, per_run)
        runs.append(run)
        rounds.extend(run_rounds)
        calls.extend(run_calls)
    with transaction.atomic():
        _number(Round, rounds)
        for call in calls:
            call.round_id = call.round.pk
        _number(ToolCall, calls)
        for model, rows in ((Run, runs), (Round, rounds), (ToolCall, calls)):
            _insert(model, rows)
    return len(calls)


def _number(model: type[Round] | type[ToolCall], rows: list[Any]) -> None:
    """Ids given here, after the highest stored (a seed is the only writer while it
    runs), so calls can name their rounds without reading the ids back."""
    highest = model.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    for number, row in enumerate(rows, start=highest + 1):
        row.pk = number


def _insert(model: type[Run] | type[Round] | type[ToolCall], rows: list[Any]) -> None:
    """One INSERT statement executed for every row (executemany): what
    bulk_create does minus its per-value compilation, which cost more than the writes.
    No save(), so no signals; every column is given (defaults were set by __init__)."""
    fields = model._meta.concrete_fields
    quote = connection.ops.quote_name
    sql = (f"INSERT INTO {quote(model._meta.db_table)} "  # noqa: S608  (model names only)
           f"({', '.join(quote(f.column or f.attname) for f in fields)}) "
           f"VALUES ({', '.join(['%s'] * len(fields))})")
    prepare = [_preparer(f) for f in fields]
    values = [tuple(p(getattr(row, f.attname)) for p, f in zip(prepare, fields, strict=True))
              for row in rows]
    with connection.cursor() as cursor:
        for start in range(0, len(values), 5000):
            cursor.executemany(sql, values[start:start + 5000])


def _preparer(field: Any) -> Callable[[Any], Any]:
    """How a value of this field is written (what the field's get_db_prep_save does,
    for the field types these models use)."""
    if isinstance(field, JSONField):
        return lambda v: None if v is None else json.dumps(v, ensure_ascii=False)
    if isinstance(field, DateTimeField):
        return connection.ops.adapt_datetimefield_value
    if isinstance(field, UUIDField) or (field.is_relation and isinstance(
            field.target_field, UUIDField)):
        native = connection.features.has_native_uuid_field
        return lambda v: None if v is None else (v if native else v.hex)
    return lambda v: v


def _reset_sequences() -> None:
    """PostgreSQL's id sequences continue after the ids given here (SQLite's
    AUTOINCREMENT follows by itself)."""
    statements = connection.ops.sequence_reset_sql(no_style(), [Round, ToolCall])
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


def _pick(rng: random.Random, weighted: tuple[tuple[Any, ...], ...]) -> tuple[Any, ...]:
    return rng.choices(weighted, weights=[row[1] for row in weighted])[0]


def _run(rng: random.Random, world: World, pk: uuid.UUID, created: datetime,
         per_run: int) -> tuple[Run, list[Round], list[ToolCall]]:
    status = _pick(rng, STATUSES)[0]
    endpoint, policy = rng.choice(world.endpoints), rng.choice(world.policies)
    tools = rng.sample(world.tools, k=rng.randint(1, 4))
    user = rng.choice(world.users) if rng.random() < 0.85 else None  # else started by API
    question = _question(rng)
    run = Run(id=pk, created_by=user, endpoint=endpoint, policy=policy,
              title=question[:200], status=status, created_at=created,
              started_at=created + timedelta(milliseconds=rng.randint(5, 400)),
              snapshot=_snapshot(world, endpoint, policy, tools, question))
    rounds, calls, ended = _rounds(rng, run, tools, per_run)
    _finish(rng, run, rounds, calls, ended)
    return run, rounds, calls


def _question(rng: random.Random) -> str:
    templates = (
        "What's the weather in {c} and in {d}?",
        "Convert 12 {w} figures for {c} and summarise the {x} report",
        "Find order #{n} and check the {w} status",
        "Why did the {w} job fail last night in {c}?",
        "Compute the {x} budget: {n} * 1.2 + 300",
    )
    return rng.choice(templates).format(c=rng.choice(CITIES), d=rng.choice(CITIES),
                                        w=rng.choice(WORDS), x=rng.choice(WORDS),
                                        n=rng.randint(1000, 99999))


def _snapshot(world: World, endpoint: ModelEndpoint, policy: ErrorPolicy, tools: list[str],
              question: str) -> dict[str, Any]:
    return {
        "version": 1,
        "endpoint": {"id": str(endpoint.pk), "name": endpoint.name, "kind": endpoint.kind,
                     "model": endpoint.model},
        "tools": [{"name": name, "version_hash": world.hashes.get(name, "")}
                  for name in tools],
        "policy": {"id": policy.pk, "name": policy.name},
        "messages": [{"type": "user", "text": question}],
        "parameters": {},
    }


def _rounds(rng: random.Random, run: Run, tools: list[str],
            per_run: int) -> tuple[list[Round], list[ToolCall], datetime]:
    """The run's rounds and calls, timed as a run goes: a round's calls start once its
    model call answered, all at once, and the next model call follows the slowest of
    them. Returns the moment the last of it ended too."""
    rounds: list[Round] = []
    calls: list[ToolCall] = []
    at = run.started_at or run.created_at
    while len(calls) < per_run or not rounds:
        latency = rng.uniform(300, 4000)
        answered = at + timedelta(milliseconds=latency)
        round_ = Round(run=run, index=len(rounds), status="completed", started_at=at,
                       finished_at=answered, latency_ms=latency, finish_reason="tool_calls",
                       input_tokens=rng.randint(200, 6000), output_tokens=rng.randint(10, 600))
        rounds.append(round_)
        at = answered
        for index in range(min(rng.randint(1, 4), per_run - len(calls))):
            call = _call(rng, run, round_, index, tools, answered)
            calls.append(call)
            at = max(at, call.finished_at or call.started_at or answered)
        at += timedelta(milliseconds=rng.randint(1, 40))
        if per_run == 0:
            break
    rounds[-1].finish_reason = "stop"
    rounds[-1].ai_text = "Here is what I found."
    return rounds, calls, at


def _call(rng: random.Random, run: Run, round_: Round, index: int, tools: list[str],
          answered: datetime) -> ToolCall:
    state, _, error_type, handler = _pick(rng, OUTCOMES)
    if state == "cancelled" and run.status != RunStatus.CANCELLED:
        state, _, error_type, handler = OUTCOMES[0]  # a call is cancelled with its run
    name = HALLUCINATED if state == "hallucinated" else rng.choice(tools)
    if name == "always_fails" and state == "succeeded":
        state, _, error_type, handler = OUTCOMES[1]  # it never succeeds
    arguments = _arguments(rng, name)
    raw = json.dumps(arguments, ensure_ascii=False)
    limit = rng.choice(TIMEOUTS_S)
    duration = _duration(rng, state, name, limit)
    ok = state == "succeeded"
    call = ToolCall(run=run, round=round_, call_index=index,
                    call_id=f"call_{rng.getrandbits(48):012x}", tool_name=name,
                    arguments_raw=raw, arguments=arguments, state=state,
                    is_error=not ok and state != "cancelled", error_type=error_type,
                    handled_by=handler, attempts=1, duration_ms=duration)
    if state not in NOT_STARTED:
        call.started_at = answered + timedelta(milliseconds=rng.uniform(0.1, 5))
    if duration is not None and call.started_at is not None:
        call.finished_at = call.started_at + timedelta(milliseconds=duration)
    if ok:
        call.result_text = _result(rng, name, arguments)
    elif error_type:
        call.error_message = _error_message(rng, state, name, limit)
        call.result_text = call.error_message
    return call


# Never executed: nothing ran, so no start and no duration.
NOT_STARTED = frozenset({"hallucinated", "rejected"})


def _duration(rng: random.Random, state: str, name: str, limit: int) -> float | None:
    """How long a call of this outcome took, in milliseconds (None: it never ran, or its
    end is unknown)."""
    if state in NOT_STARTED or state == "unknown_outcome":
        return None
    if state == "timed_out":  # stopped at its limit, noticed a little later
        return round(limit * 1000 + rng.uniform(1, 80), 3)
    if state == "arguments_error":  # refused by validation, before running
        return round(rng.uniform(0.05, 2), 3)
    if name == "slow_tool":  # sleeps 1.5 s unless told otherwise
        return round(1500 + rng.lognormvariate(2, 1), 3)
    return round(min(rng.lognormvariate(4.5, 1.2), 4000), 3)


def _arguments(rng: random.Random, name: str) -> dict[str, Any]:
    if name == "get_weather":
        return {"city": rng.choice(CITIES), "unit": rng.choice(("celsius", "fahrenheit"))}
    if name == "calculator":
        return {"expression": f"{rng.randint(1, 999)} * {rng.randint(1, 99)} + "
                              f"{rng.randint(0, 50)}"}
    if name == "convert_units":
        return {"value": rng.randint(1, 500), "from_unit": "km", "to_unit": "mi"}
    if name == "lookup_order":
        return {"order_id": f"ORD-{rng.randint(10000, 99999)}"}
    if name == "sql_query":
        table, row = rng.choice(WORDS), rng.randint(1, 9999)
        return {"sql": f"SELECT * FROM {table} WHERE id = {row}"}  # noqa: S608  (a sample)
    if name == "read_file":
        return {"path": f"/srv/{rng.choice(WORDS)}/{rng.choice(WORDS)}.log",
                "lines": rng.randint(10, 400)}
    # search_docs, always_fails, slow_tool, the hallucinated one: free text, some long
    words = rng.choices(WORDS, k=rng.choice((2, 4, 8, 40)))
    return {"query": " ".join(words), "city": rng.choice(CITIES)}


def _result(rng: random.Random, name: str, arguments: dict[str, Any]) -> str:
    size = rng.choices((1, 5, 40, 400), weights=(60, 25, 12, 3))[0]  # up to ~20 KB
    start = rng.randrange(len(_LINES) - size)
    return json.dumps({"tool": name, "input": arguments, "rows": _LINES[start:start + size]},
                      ensure_ascii=False)


# Result lines are slices of one fixed pool: drawing every word anew cost more than
# writing the rows. Built from its own seed, so every --seed shares it.
_pool = random.Random(0)  # noqa: S311  (sample text)
_LINES = [f"{_pool.choice(WORDS)} {_pool.choice(CITIES)} {_pool.randint(0, 10**6)}"
          for _ in range(5000)]


def _error_message(rng: random.Random, state: str, name: str, limit: int) -> str:
    messages = {
        "execution_error": f"{rng.choice(('ConnectionError', 'KeyError', 'ValueError'))}: "
                           f"{rng.choice(WORDS)} service unavailable in {rng.choice(CITIES)}",
        "arguments_error": f"Invalid arguments for tool '{name}': field required",
        "timed_out": f"Tool '{name}' timed out after {limit} s",
        "hallucinated": f"The model called a tool that does not exist: {name}",
        "rejected": f"tool {name} requires approval; no approver is configured",
        "unknown_outcome": "the worker was lost while the call ran; not re-executed",
        "cancelled": "the run was cancelled",
    }
    return messages.get(state, "error")


def _finish(rng: random.Random, run: Run, rounds: list[Round], calls: list[ToolCall],
            ended: datetime) -> None:
    """The run's totals and ending, from what it holds: it ends just after the last
    thing it did."""
    run.rounds_count, run.tool_calls_count = len(rounds), len(calls)
    run.errors_count = sum(call.is_error for call in calls)
    run.input_tokens = sum(r.input_tokens or 0 for r in rounds)
    run.output_tokens = sum(r.output_tokens or 0 for r in rounds)
    run.total_tokens = run.input_tokens + run.output_tokens
    run.last_seq = len(rounds) * 4 + len(calls) * 3
    if run.status in (RunStatus.QUEUED, RunStatus.RUNNING):
        return
    started = run.started_at or run.created_at
    run.finished_at = ended + timedelta(milliseconds=rng.randint(1, 50))
    run.wall_ms = (run.finished_at - started).total_seconds() * 1000
    if run.status == RunStatus.SUCCEEDED:
        run.final_text = f"Done: {rng.choice(WORDS)} in {rng.choice(CITIES)} looks fine."
    elif run.status == RunStatus.FAILED:
        run.error_type, run.error_message = rng.choice(RUN_ERRORS)
