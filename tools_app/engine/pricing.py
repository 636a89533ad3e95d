"""What a model call costs in dollars, from the tokens its provider reported.

A `TokenPrice` is one price revision: dollars per million input, cached input and
output tokens, as `Decimal` (never float: cents must add up). `round_cost` prices one
model call's usage; `call_shares` splits a round's cost among its tool calls; `run_cost`
adds up rounds. A `CostCap` stops a run before a model call that would take it past its
limit (loop/spending.py). Everything here is plain Python: the worker passes prices in
through the run's snapshot.

The rules, stated once:
- cached input tokens are a part of the input tokens (OpenAI's
  `prompt_tokens_details.cached_tokens`, Anthropic's `cache_read_input_tokens`,
  Gemini's `cachedContentTokenCount`): they are priced at the cached price, the rest of
  the input at the input price. Anthropic's cache writes are priced as input.
- a cost is rounded to `COST_QUANTUM` (a millionth of a cent), half-even.
- a round's cost is shared among its tool calls in equal parts, rounded down to the
  quantum, the remainder (less than one quantum per call) going to the first call, so
  the shares add up to the round's cost exactly. A round without calls keeps its cost.
- a usage the provider did not report (None) has no cost (None); an unknown count
  within a reported usage counts as 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import ROUND_DOWN, ROUND_HALF_EVEN, Decimal

from .messages import TokenUsage

COST_QUANTUM = Decimal("0.00000001")
"""The unit costs are rounded to: 10^-8 dollars."""
PER_MILLION = Decimal(1_000_000)


@dataclass(frozen=True)
class TokenPrice:
    """Dollars per million tokens. `cached_input_per_million` None: cached input is
    priced as input. `revision` names where the price came from (a price revision's id),
    for the record; the engine does not read it."""

    input_per_million: Decimal
    output_per_million: Decimal
    cached_input_per_million: Decimal | None = None
    revision: int | None = None

    @property
    def cached_rate(self) -> Decimal:
        if self.cached_input_per_million is None:
            return self.input_per_million
        return self.cached_input_per_million

    @property
    def cheapest_input_rate(self) -> Decimal:
        return min(self.input_per_million, self.cached_rate)


def round_cost(usage: TokenUsage | None, price: TokenPrice | None) -> Decimal | None:
    """The dollars one model call cost; None when its usage or the price is unknown."""
    if usage is None or price is None:
        return None
    input_tokens = usage.input_tokens or 0
    cached = min(usage.cached_input_tokens or 0, input_tokens)
    dollars = ((input_tokens - cached) * price.input_per_million
               + cached * price.cached_rate
               + (usage.output_tokens or 0) * price.output_per_million) / PER_MILLION
    return dollars.quantize(COST_QUANTUM, rounding=ROUND_HALF_EVEN)


def call_shares(cost: Decimal | None, calls: int) -> list[Decimal | None]:
    """A round's cost shared among its `calls` tool calls (see the module's rules): the
    shares add up to `cost` exactly. An unknown cost gives unknown shares."""
    if calls <= 0:
        return []
    if cost is None:
        return [None] * calls
    share = (cost / calls).quantize(COST_QUANTUM, rounding=ROUND_DOWN)
    first = cost - share * (calls - 1)
    return [first, *([share] * (calls - 1))]


def run_cost(round_costs: Iterable[Decimal | None]) -> Decimal | None:
    """A run's cost from its rounds' costs: their sum, the unpriced (None) left out, as
    SQL's SUM does; None when no round is priced (shown as "no price", never $0)."""
    known = [cost for cost in round_costs if cost is not None]
    return sum(known, Decimal(0)) if known else None


@dataclass(frozen=True)
class CostCap:
    """At most `limit_usd` dollars a run, priced with `price`: before each model call the
    loop stops (CostCapExceededError) if what the run spent has reached the limit, or
    would pass it with the least the next call can cost. The least: the next prompt
    holds the whole previous one, so its input tokens at the cheaper of the input and
    cached prices."""

    limit_usd: Decimal
    price: TokenPrice

    def next_call_minimum(self, last_input_tokens: int) -> Decimal:
        dollars = last_input_tokens * self.price.cheapest_input_rate / PER_MILLION
        return dollars.quantize(COST_QUANTUM, rounding=ROUND_DOWN)

    def would_exceed(self, spent: Decimal, last_input_tokens: int) -> bool:
        """Whether the next model call would take the run past its limit (a run that
        has reached its limit already stops too)."""
        return (spent >= self.limit_usd
                or spent + self.next_call_minimum(last_input_tokens) > self.limit_usd)
