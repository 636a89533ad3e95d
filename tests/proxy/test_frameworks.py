"""Agent frameworks pointed at the proxy, uninstrumented: the OpenAI Agents SDK, Pydantic
AI and LangChain, each on its Chat Completions client with a tool that really runs.
Their requests (matched by prefix: no header) become one run whose call the next
request's tool result completes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openai import AsyncOpenAI
from pydantic import SecretStr
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.proxy.conftest import Proxy
from tests.proxy.support import get_weather
from tools_app.models import Run, RunStatus, ToolCall

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def no_agents_tracing() -> Iterator[None]:
    """The Agents SDK would export its own traces to OpenAI."""
    set_tracing_disabled(True)
    yield
    set_tracing_disabled(False)


def _one_run_with_the_call(proxy: Proxy, results: list[str]) -> Run:
    proxy.ended()  # the conversation gone idle
    run = Run.objects.get(created_by=proxy.user)
    assert run.status == RunStatus.SUCCEEDED
    assert run.rounds_count == 2
    call = ToolCall.objects.get(run=run)
    assert call.tool_name == "get_weather"
    assert call.state == "succeeded"
    assert results == [call.result_text]
    return run


def test_an_openai_agents_sdk_agent(proxy: Proxy, no_agents_tracing: None) -> None:
    results: list[str] = []

    @function_tool
    def get_weather_tool(city: str) -> str:
        """The weather in a city."""
        results.append(get_weather(city))
        return results[-1]

    get_weather_tool.name = "get_weather"
    client = AsyncOpenAI(base_url=proxy.openai_base(), api_key=proxy.token, max_retries=0)
    agent = Agent(name="helper", instructions="Use the tools.", tools=[get_weather_tool],
                  model=OpenAIChatCompletionsModel(model="fake-model", openai_client=client))
    result = asyncio.run(Runner.run(agent, "Weather in Tokyo?"))

    run = _one_run_with_the_call(proxy, results)
    assert run.final_text == result.final_output


def test_a_pydantic_ai_agent(proxy: Proxy) -> None:
    model = OpenAIChatModel("fake-model", provider=OpenAIProvider(
        base_url=proxy.openai_base(), api_key=proxy.token))
    agent = PydanticAgent(model, instructions="Use the tools.")
    results: list[str] = []

    @agent.tool_plain(name="get_weather")
    def weather(city: str) -> str:
        """The weather in a city."""
        results.append(get_weather(city))
        return results[-1]

    result = agent.run_sync("Weather in Lagos?")

    run = _one_run_with_the_call(proxy, results)
    assert run.final_text == result.output


def test_a_langchain_tool_loop(proxy: Proxy) -> None:
    results: list[str] = []

    @tool("get_weather")
    def weather(city: str) -> str:
        """The weather in a city."""
        results.append(get_weather(city))
        return results[-1]

    model = ChatOpenAI(model="fake-model", base_url=proxy.openai_base(),
                       api_key=SecretStr(proxy.token), max_retries=0).bind_tools([weather])
    messages: list[BaseMessage] = [HumanMessage("Weather in Quito?")]
    reply: Any = model.invoke(messages)
    while reply.tool_calls:
        messages.append(reply)
        messages += [weather.invoke(call) for call in reply.tool_calls]
        reply = model.invoke(messages)

    run = _one_run_with_the_call(proxy, results)
    assert run.final_text == reply.content
