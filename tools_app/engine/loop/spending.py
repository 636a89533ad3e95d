"""What one chat's model calls cost, and the cost cap checked before each call.

`Spending` keeps the dollars spent so far (a resumed run's stored rounds too), the
last model call's input tokens (the cap's estimate of the next call) and the current
round's cost, which the round's tool calls share (pricing.call_shares). The rules
themselves (prices, the cap's estimate) are engine/pricing.py.
"""

from __future__ import annotations

from decimal import Decimal

from ..errors import CostCapExceededError
from ..messages import ChatResponse
from ..pricing import CostCap, TokenPrice, call_shares, round_cost
from .contract import ResumeState


class Spending:
    """The cost side of one chat() call (ChatRun keeps one)."""

    def __init__(self, price: TokenPrice | None, cap: CostCap | None) -> None:
        self.price = price
        self.cap = cap
        self.spent = Decimal(0)
        self.last_input_tokens = 0
        self.round_cost: Decimal | None = None

    def resume(self, resume: ResumeState) -> None:
        """Go on from what the stored rounds cost. A pending round's cost is in
        `cost_spent` already; its calls still share it."""
        self.spent, self.last_input_tokens = resume.cost_spent, resume.last_input_tokens
        if resume.pending_response is not None:
            self.round_cost = round_cost(resume.pending_response.usage, self.price)

    def check_cap(self, round_index: int) -> None:
        """Stop before a model call that would take the run past its cost cap."""
        cap = self.cap
        if cap is not None and cap.would_exceed(self.spent, self.last_input_tokens):
            raise CostCapExceededError(
                spent_usd=self.spent, limit_usd=cap.limit_usd,
                next_minimum_usd=cap.next_call_minimum(self.last_input_tokens),
                round_index=round_index)

    def count(self, response: ChatResponse) -> Decimal | None:
        """The model call's cost, counted in what the run spent."""
        cost = self.round_cost = round_cost(response.usage, self.price)
        if cost is not None:
            self.spent += cost
        if response.usage is not None and response.usage.input_tokens is not None:
            self.last_input_tokens = response.usage.input_tokens
        return cost

    def call_shares(self, calls: int) -> list[Decimal | None]:
        """The current round's cost shared among its `calls` tool calls."""
        return call_shares(self.round_cost, calls)
