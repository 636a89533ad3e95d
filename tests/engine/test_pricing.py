"""Costs in dollars (engine/pricing.py): a round's cost from its usage, the calls' shares,
a run's sum, and the cost cap stopping a run before the model call that would pass it."""

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pytest

from tools_app.engine import (
    AiMessage,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    CostCapExceededError,
    FinishReason,
    FunctionChatModel,
    TokenPrice,
    TokenUsage,
    ToolExecutionRequest,
    ToolService,
    call_shares,
    round_cost,
    run_cost,
)
from tools_app.engine.events import ChatFailed, ModelResponseReceived, ToolCallProposed

from .support import WeatherTools, user

PRICE = TokenPrice(input_per_million=Decimal("2.50"), cached_input_per_million=Decimal("1.25"),
                   output_per_million=Decimal("10"), revision=7)


def test_a_round_costs_its_input_cached_input_and_output_tokens_at_their_prices() -> None:
    usage = TokenUsage(input_tokens=1000, cached_input_tokens=400, output_tokens=50)
    # 600 input at $2.50/M + 400 cached at $1.25/M + 50 output at $10/M
    assert round_cost(usage, PRICE) == Decimal("0.0015") + Decimal("0.0005") + Decimal("0.0005")


def test_cached_input_without_a_cached_price_is_priced_as_input() -> None:
    price = TokenPrice(input_per_million=Decimal(3), output_per_million=Decimal(15))
    usage = TokenUsage(input_tokens=1_000_000, cached_input_tokens=500_000, output_tokens=0)
    assert round_cost(usage, price) == Decimal(3)


def test_no_usage_or_no_price_is_no_cost_never_zero() -> None:
    assert round_cost(None, PRICE) is None
    assert round_cost(TokenUsage(input_tokens=10, output_tokens=1), None) is None
    assert run_cost([None, None]) is None
    assert run_cost([]) is None


@pytest.mark.parametrize(("cost", "calls"), [(Decimal("0.00000010"), 3), (Decimal("1"), 7),
                                             (Decimal("0.12345678"), 4), (Decimal(0), 2)])
def test_the_calls_shares_add_up_to_their_rounds_cost(cost: Decimal, calls: int) -> None:
    shares = call_shares(cost, calls)
    assert len(shares) == calls
    assert sum(s for s in shares if s is not None) == cost
    assert max(s for s in shares if s is not None) - min(
        s for s in shares if s is not None) < Decimal("0.00000001") * calls


def test_a_run_costs_the_sum_of_its_priced_rounds() -> None:
    assert run_cost([Decimal("0.1"), None, Decimal("0.25")]) == Decimal("0.35")


def _tool_round(index: int) -> AiMessage:
    return AiMessage(tool_execution_requests=(
        ToolExecutionRequest(id=f"c{index}a", name="get_weather", arguments='{"city": "A"}'),
        ToolExecutionRequest(id=f"c{index}b", name="get_weather", arguments='{"city": "B"}'),
        ToolExecutionRequest(id=f"c{index}c", name="get_weather", arguments='{"city": "C"}')))


def _paid_model(rounds_with_calls: int, usage: TokenUsage) -> FunctionChatModel:
    """Calls tools `rounds_with_calls` times, then answers; every call reports `usage`."""

    def answer(messages: Sequence[ChatMessage], request: ChatRequest) -> ChatResponse:
        asked = sum(1 for m in messages if isinstance(m, AiMessage))
        message = _tool_round(asked) if asked < rounds_with_calls else AiMessage(text="done")
        finish = (FinishReason.TOOL_EXECUTION if message.tool_execution_requests
                  else FinishReason.STOP)
        return ChatResponse(ai_message=message, finish_reason=finish, usage=usage)

    return FunctionChatModel(answer)


class Events(list[Any]):
    def __call__(self, event: Any) -> None:
        self.append(event)


async def test_each_round_reports_its_cost_and_revision_and_each_call_its_share() -> None:
    usage = TokenUsage(input_tokens=1000, output_tokens=10, total_tokens=1010)
    events = Events()
    service = ToolService(price=PRICE, loop_health=None).tools(WeatherTools())
    # (the weather tool's three calls a round repeat; loop health is off)

    await service.chat(_paid_model(2, usage), [user()], observers=[events])

    responses = [e for e in events if isinstance(e, ModelResponseReceived)]
    assert [e.cost for e in responses] == [Decimal("0.0026")] * 3
    assert {e.price_revision for e in responses} == {7}
    for index in (0, 1):
        shares = [e.cost for e in events
                  if isinstance(e, ToolCallProposed) and e.round_index == index]
        assert len(shares) == 3
        assert sum(shares) == Decimal("0.0026")


async def test_without_a_price_nothing_is_priced() -> None:
    events = Events()
    service = ToolService().tools(WeatherTools())
    await service.chat(_paid_model(1, TokenUsage(input_tokens=5, output_tokens=5)), [user()],
                       observers=[events])
    assert all(e.cost is None for e in events
               if isinstance(e, (ModelResponseReceived, ToolCallProposed)))


async def test_the_cost_cap_stops_the_run_before_the_model_call_that_would_pass_it() -> None:
    # Each call costs $0.0026 and sends at least 1000 input tokens ($0.00125 at the
    # cached price): after two calls ($0.0052) a third would pass $0.006.
    usage = TokenUsage(input_tokens=1000, output_tokens=10)
    model = _paid_model(10, usage)
    events = Events()
    service = ToolService(price=PRICE, cost_cap_usd=Decimal("0.006"),
                          loop_health=None).tools(WeatherTools())

    with pytest.raises(CostCapExceededError) as stopped:
        await service.chat(model, [user()], observers=[events])

    assert stopped.value.spent_usd == Decimal("0.0052")
    assert stopped.value.round_index == 2
    assert sum(isinstance(e, ModelResponseReceived) for e in events) == 2
    [failed] = [e for e in events if isinstance(e, ChatFailed)]
    assert failed.error_type == "CostCapExceededError"
    assert "cost cap of $0.006" in failed.message
    assert "$0.0052" in failed.message


async def test_a_cap_the_run_stays_under_changes_nothing() -> None:
    service = ToolService(price=PRICE, cost_cap_usd=Decimal("0.02"),
                          loop_health=None).tools(WeatherTools())
    result = await service.chat(_paid_model(2, TokenUsage(input_tokens=1000, output_tokens=10)),
                                [user()])
    assert result.final_response.ai_message.text == "done"


def test_a_cap_needs_a_price() -> None:
    with pytest.raises(ValueError, match="needs a price"):
        ToolService(cost_cap_usd=Decimal(1))
