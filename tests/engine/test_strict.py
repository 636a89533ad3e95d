"""Strict tools: the schema OpenAI's strict mode accepts, and nulls meaning "default"."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from tools_app.engine import (
    FunctionToolExecutor,
    ToolArgumentsError,
    ToolExecutionRequest,
    tool,
    tool_specification_from,
)


class Options(BaseModel):
    depth: int = 2
    tags: list[str] | None = None


@tool(strict=True)
def search(query: str, limit: int = 5, options: Options | None = None) -> str:
    """Search something."""
    return f"{query}|{limit}|{options.depth if options else None}"


def test_strict_schema_requires_every_property_and_forbids_others() -> None:
    schema = tool_specification_from(search).parameters
    assert schema["required"] == ["query", "limit", "options"]
    assert schema["additionalProperties"] is False
    nested = schema["$defs"]["Options"]
    assert nested["required"] == ["depth", "tags"]
    assert nested["additionalProperties"] is False


def test_optional_parameters_become_nullable_without_defaults() -> None:
    schema = tool_specification_from(search).parameters
    assert schema["properties"]["query"] == {"type": "string"}
    assert schema["properties"]["limit"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert "default" not in repr(schema)


def test_non_strict_schema_keeps_optional_parameters_optional() -> None:
    @tool
    def lookup(query: str, limit: int = 5) -> str:
        return query

    schema = tool_specification_from(lookup).parameters
    assert schema["required"] == ["query"]
    assert schema["properties"]["limit"]["default"] == 5


async def test_null_for_an_optional_parameter_means_its_default() -> None:
    executor = FunctionToolExecutor(search)
    request = ToolExecutionRequest(
        id="c1", name="search",
        arguments='{"query": "x", "limit": null, "options": {"depth": null, "tags": null}}',
    )
    assert await executor.execute(request) == "x|5|2"


async def test_null_for_a_required_parameter_is_still_an_arguments_error() -> None:
    executor = FunctionToolExecutor(search)
    request = ToolExecutionRequest(id="c1", name="search",
                                   arguments='{"query": null, "limit": 1, "options": null}')
    with pytest.raises(ToolArgumentsError, match="query"):
        await executor.execute(request)
