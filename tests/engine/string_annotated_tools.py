"""Tools declared with string annotations (`from __future__ import annotations`).

Used as a module source by the registration tests, so keep exactly two @tool functions.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from tools_app.engine import P, tool


class Address(BaseModel):
    street: str
    city: str


@tool
def ship(
    address: Address,
    express: Annotated[bool, Field(description="Overnight delivery")] = False,
    note: str | None = None,
) -> str:
    """Ship the parcel to an address."""
    speed = "express" if express else "standard"
    return f"{type(address).__name__}:{address.city}:{speed}:{note}"


@tool(name="count_words")
def count(text: Annotated[str, P("sentence", "The sentence to count")]) -> int:
    """Count the words of a sentence."""
    return len(text.split())


def not_a_tool(value: int) -> int:
    return value
