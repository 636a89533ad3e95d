"""A whole starting conversation in the OpenAI Chat Completions format: parsed into
engine messages, every problem named by its message, and written back the same way."""

from __future__ import annotations

from typing import Any

import pytest

from tools_app.engine import (
    AiMessage,
    SystemMessage,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from tools_app.engine.conversation import (
    ConversationError,
    parse_conversation,
    to_openai_messages,
)

CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris and Oslo?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "c2", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
    {"role": "tool", "tool_call_id": "c2", "content": "Oslo: 3 C"},
    {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "Paris: "},
                                                       {"type": "text", "text": "18 C"}]},
    {"role": "assistant", "content": "Paris 18 C, Oslo 3 C."},
    {"role": "user", "content": "And in Rome?"},
]


def test_every_message_kind_becomes_its_engine_message() -> None:
    messages = parse_conversation(CONVERSATION)

    assert messages == [
        SystemMessage(text="Be brief."),
        UserMessage(text="Weather in Paris and Oslo?"),
        AiMessage(tool_execution_requests=(
            ToolExecutionRequest(id="c1", name="get_weather", arguments='{"city": "Paris"}'),
            ToolExecutionRequest(id="c2", name="get_weather", arguments='{"city": "Oslo"}'))),
        ToolExecutionResultMessage(id="c2", tool_name="get_weather", text="Oslo: 3 C"),
        ToolExecutionResultMessage(id="c1", tool_name="get_weather", text="Paris: 18 C"),
        AiMessage(text="Paris 18 C, Oslo 3 C."),
        UserMessage(text="And in Rome?"),
    ]


def test_the_openai_form_reads_back_the_same() -> None:
    messages = parse_conversation(CONVERSATION)
    assert parse_conversation(to_openai_messages(messages)) == messages


def test_a_tool_result_may_say_it_is_an_error_and_keeps_saying_so() -> None:
    raw = [*CONVERSATION[:3],
           {"role": "tool", "tool_call_id": "c1", "content": "timeout", "is_error": True},
           {"role": "tool", "tool_call_id": "c2", "content": "Oslo: 3 C"}]
    messages = parse_conversation(raw)

    assert messages[3] == ToolExecutionResultMessage(id="c1", tool_name="get_weather",
                                                     text="timeout", is_error=True)
    assert not messages[4].is_error  # type: ignore[union-attr]
    assert to_openai_messages(messages, error_flags=True) == [
        *raw[:2], raw[2] | {"content": None}, *raw[3:]]
    # The plain OpenAI form (exports, displays) has no such flag.
    assert "is_error" not in to_openai_messages(messages)[3]


def test_a_conversation_may_end_with_tool_results() -> None:
    messages = parse_conversation(CONVERSATION[:5])
    assert isinstance(messages[-1], ToolExecutionResultMessage)


def _with(index: int, **changes: Any) -> list[dict[str, Any]]:
    changed = [dict(m) for m in CONVERSATION]
    changed[index] = changed[index] | changes
    return changed


@pytest.mark.parametrize(("conversation", "field", "words"), [
    ("hello", "messages", "messages must be a list"),
    ([], "messages", "messages is empty"),
    (["hi"], "messages[0]", "messages[0] must be an object with a 'role'"),
    ([{"role": "robot", "content": "x"}], "messages[0]",
     "messages[0]: role must be one of system, developer, user, assistant, tool, not 'robot'"),
    ([{"role": "user", "content": 5}], "messages[0]", "messages[0].content"),
    ([{"role": "user", "content": "x", "colour": "red"}], "messages[0]",
     "messages[0].colour: Extra inputs are not permitted"),
    (_with(3, tool_call_id="x"), "messages[3]",
     "messages[3]: tool_call_id 'x' answers no earlier tool call"),
    (_with(4, tool_call_id="c2"), "messages[4]",
     "messages[4]: tool_call_id 'c2' is answered twice"),
    (CONVERSATION[:3] + CONVERSATION[4:], "messages[2]",
     "messages[2]: tool calls 'c2' have no tool result before messages[4] comes"),
    (CONVERSATION[:3], "messages[2]",
     "messages[2]: tool calls 'c1', 'c2' have no tool result before the conversation ends"),
    (CONVERSATION[:6], "messages[5]", "ends with an assistant message"),
    (_with(2, tool_calls=[{"id": "c1", "type": "function",
                           "function": {"name": "f", "arguments": {"a": 1}}}]),
     "messages[2]", "messages[2].tool_calls.0.function.arguments: Input should be a valid string"),
    (_with(2, tool_calls=[{"id": "c1", "type": "web", "function": {"name": "f",
                                                                   "arguments": "{}"}}]),
     "messages[2]", "messages[2].tool_calls.0.type"),
    (_with(2, tool_calls=[{"id": "c1", "type": "function", "function": {"name": "f",
                                                                        "arguments": "{}"}},
                          {"id": "c1", "type": "function", "function": {"name": "g",
                                                                        "arguments": "{}"}}]),
     "messages[2]", "messages[2].tool_calls[1]: the id 'c1' is used twice"),
    (_with(2, tool_calls=[]), "messages[2]", "needs content or tool_calls"),
])
def test_every_problem_names_its_message(conversation: Any, field: str, words: str) -> None:
    with pytest.raises(ConversationError) as caught:
        parse_conversation(conversation)
    assert words in str(caught.value)
    assert caught.value.field == field
