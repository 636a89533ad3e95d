"""The rows of seed_audit's runs, built in memory: varied as real use is (every call
outcome with its error type and handler, users and API runs, dates and timings,
arguments and results from a few bytes to kilobytes) and timed as a run goes. The same
random generator gives the same rows.
"""

from __future__ import annotations

import json
import random
import uuid
from datetime import datetime, timedelta
from typing import Any

from tools_app.management.seeding.demo_data import World
from tools_app.models import ErrorPolicy, ModelEndpoint, Round, Run, RunStatus, ToolCall

HALLUCINATED = "get_stock_price"
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


def _pick(rng: random.Random, weighted: tuple[tuple[Any, ...], ...]) -> tuple[Any, ...]:
    return rng.choices(weighted, weights=[row[1] for row in weighted])[0]


def build_run(rng: random.Random, world: World, pk: uuid.UUID, created: datetime,
              per_run: int) -> tuple[Run, list[Round], list[ToolCall]]:
    """One run dated `created` with about `per_run` calls, its rounds and its calls."""
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
