"""ReturnBehavior (seed 3.2.5): when a round's tool results end the run at once."""

import pytest

from tools_app.engine import (
    ReturnBehavior,
    ToolErrorHandlerResult,
    ToolExecutionResult,
    ToolService,
    ToolSpecification,
    should_return_immediately,
    tool,
)

from .support import call, calls, final, scripted, user

TO_LLM = ReturnBehavior.TO_LLM
IMMEDIATE = ReturnBehavior.IMMEDIATE
IF_LAST = ReturnBehavior.IMMEDIATE_IF_LAST


@pytest.mark.parametrize(
    ("behaviors", "returns"),
    [
        ([], False),
        ([TO_LLM], False),
        ([TO_LLM, TO_LLM], False),
        ([TO_LLM, IMMEDIATE], False),
        ([IMMEDIATE, TO_LLM], False),
        ([IF_LAST, TO_LLM], False),
        ([IMMEDIATE], True),
        ([IMMEDIATE, IMMEDIATE], True),
        ([IF_LAST], True),
        ([IMMEDIATE, IF_LAST], True),
        ([IMMEDIATE, IMMEDIATE, IF_LAST], True),
        ([IF_LAST, IMMEDIATE], False),
        ([IF_LAST, IF_LAST], False),
    ],
)
def test_the_seeds_return_behavior_table(
    behaviors: list[ReturnBehavior], returns: bool
) -> None:
    assert should_return_immediately(behaviors) is returns


@tool(return_behavior=IMMEDIATE)
def book_flight(flight: str) -> dict[str, str]:
    return {"booked": flight}


@tool(return_behavior=IF_LAST)
def send_email(to: str) -> str:
    return f"sent to {to}"


@tool
def lookup(key: str) -> str:
    return f"value of {key}"


@tool(return_behavior=IMMEDIATE)
def fragile() -> str:
    raise RuntimeError("temporarily down")


def service() -> ToolService:
    return ToolService().tools([book_flight, send_email, lookup, fragile])


async def test_an_immediate_tool_ends_the_run_with_its_result() -> None:
    model = scripted(calls(call("book_flight", {"flight": "MU5101"})))
    result = await service().chat(model, [user()])
    assert model.calls == 1
    assert result.returned_immediately is True
    assert result.final_response.ai_message.tool_execution_requests[0].name == "book_flight"
    assert result.intermediate_responses == []
    [execution] = result.tool_executions
    assert execution.result.result == {"booked": "MU5101"}
    assert result.messages[-1].text == '{"booked": "MU5101"}'  # type: ignore[union-attr]


async def test_immediate_if_last_alone_ends_the_run() -> None:
    model = scripted(calls(call("send_email", {"to": "bob@example.com"})))
    result = await service().chat(model, [user()])
    assert model.calls == 1
    assert result.returned_immediately is True
    assert result.tool_executions[0].result_text == "sent to bob@example.com"


async def test_immediate_tools_together_end_the_run() -> None:
    model = scripted(
        calls(call("book_flight", {"flight": "MU5101"}), call("send_email", {"to": "bob"}))
    )
    result = await service().chat(model, [user()])
    assert model.calls == 1
    assert result.returned_immediately is True
    assert len(result.tool_executions) == 2


@pytest.mark.parametrize(
    "round_calls",
    [
        [("book_flight", {"flight": "MU5101"}), ("lookup", {"key": "k"})],
        [("send_email", {"to": "bob"}), ("book_flight", {"flight": "MU5101"})],
    ],
    ids=["immediate-with-to-llm", "immediate-if-last-not-last"],
)
async def test_mixed_rounds_that_do_not_qualify_go_back_to_the_model(
    round_calls: list[tuple[str, dict[str, str]]],
) -> None:
    model = scripted(calls(*(call(name, args) for name, args in round_calls)), final("summary"))
    result = await service().chat(model, [user()])
    assert model.calls == 2
    assert result.returned_immediately is False
    assert result.final_response.ai_message.text == "summary"
    assert len(model.tool_results(1)) == 2


async def test_a_tool_error_forces_another_round_even_if_every_tool_is_immediate() -> None:
    model = scripted(
        calls(call("book_flight", {"flight": "MU5101"}), call("fragile")),
        final("I booked the flight but could not finish"),
    )
    result = await service().chat(model, [user()])
    assert model.calls == 2
    assert result.returned_immediately is False
    errors = [m for m in model.tool_results(1) if m.is_error]
    assert [m.tool_name for m in errors] == ["fragile"]
    assert "temporarily down" in errors[0].text


async def test_an_error_result_from_a_custom_executor_also_forces_another_round() -> None:
    refusing = ToolService().tool(
        ToolSpecification(name="refuse"),
        lambda request: ToolExecutionResult.failure("not allowed"),
        return_behavior=IMMEDIATE,
    )
    model = scripted(calls(call("refuse")), final("ok, I will not"))
    result = await refusing.chat(model, [user()])
    assert model.calls == 2
    assert model.tool_results(1)[0].is_error is True
    assert result.final_response.ai_message.text == "ok, I will not"


async def test_a_handled_arguments_error_also_forces_another_round() -> None:
    tolerant = ToolService(
        arguments_error_handler=lambda error, context: ToolErrorHandlerResult.text("bad args"),
    ).tools([book_flight])
    model = scripted(calls(call("book_flight", {})), final("retry later"))
    result = await tolerant.chat(model, [user()])
    assert model.calls == 2
    assert result.returned_immediately is False
    assert model.tool_results(1)[0].text == "bad args"


async def test_return_behavior_can_be_set_at_registration() -> None:
    svc = ToolService().tool(lookup, return_behavior=IMMEDIATE)
    model = scripted(calls(call("lookup", {"key": "k"})))
    result = await svc.chat(model, [user()])
    assert result.returned_immediately is True
    assert model.calls == 1
