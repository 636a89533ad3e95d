"""bench_providers' workload and what it compares: the task (one prompt, one tool),
the two phases' shapes and targets, the variants measured in each, and one worker's
sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PROMPT = "What is the weather in a few cities?"
API_KEY = "sk-bench-0123456789abcdef"
SEQ_ROUNDS = 20
SEQ_PARALLEL = (1, 4)
CONC_RUNS, CONC_ROUNDS, CONC_PARALLEL, CONC_LATENCY_MS = 100, 5, 2, 50
IDEAL_S = (CONC_ROUNDS + 1) * CONC_LATENCY_MS / 1000
SEQ_TARGET, CONC_TARGET = 1.2, 0.75
WORKER_TIMEOUT_S = 150

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


async def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"Sunny, 21C in {city}"


@dataclass(frozen=True)
class Variant:
    name: str
    label: str
    kind: str  # "bare", "adapter" (OpenAIChatModel in a hand loop), "service", "observed"
    stack: str  # "httpx", "shipped", "raw_aiohttp"


SHIPPED = "httpx AsyncClient on aiohttp's pool (httpx-aiohttp transport)"
# The bare loops' HTTP clients; none but "shipped" involves product code.
STACK_LABELS = {"httpx": "httpx AsyncClient on httpx's own pool (httpcore)",
                "shipped": f"the product's client: {SHIPPED} (clients.new_client)",
                "raw_aiohttp": "aiohttp's own ClientSession, no httpx, no product code"}
SAME_STACK = "bare_shipped"


def seq_variants() -> list[Variant]:
    return [
        Variant("bare_httpx", f"bare loop, {STACK_LABELS['httpx']}", "bare", "httpx"),
        Variant(SAME_STACK, f"bare loop, {STACK_LABELS['shipped']}", "bare", "shipped"),
        Variant("adapter", "OpenAIChatModel in the bare loop, no ToolService "
                           "(attribution only)", "adapter", "shipped"),
        Variant("service", "ToolService + OpenAIChatModel, shipped", "service", "shipped"),
    ]


def conc_variants() -> list[Variant]:
    variants = [Variant(f"bare_{stack}", f"bare loop, {STACK_LABELS[stack]}", "bare", stack)
                for stack in ("raw_aiohttp", "shipped", "httpx")]
    variants.append(Variant("adapter", "OpenAIChatModel in the bare loop, no ToolService "
                                       "(attribution only)", "adapter", "shipped"))
    variants.append(Variant("service", "ToolService + OpenAIChatModel, shipped", "service",
                            "shipped"))
    variants.append(Variant("service_observed",
                            "ToolService + OpenAIChatModel with an observer "
                            "(every event built; attribution only)", "observed", "shipped"))
    return variants


@dataclass
class Sample:
    variant: Variant
    phase: str
    result: dict[str, Any]
    server_cpu_us_per_request: float
    error: str | None = None
    """Why the worker failed (its last line of stderr); a failed sample is reported, not
    averaged in."""
