"""What an `arguments_match` assertion checks at its JSON pointer: a discriminated
union (`ArgumentCheck`, by `kind`) of equals, regex, one of, a numeric range and a JSON
Schema (jsonschema), each saying in words what it wants and why a value fails it."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

import jsonschema
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator


def _compiles(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a regular expression: {exc}") from exc
    return pattern


RegexPattern = Annotated[str, AfterValidator(_compiles)]
"""A Python regular expression, refused with the compiler's reason when it is not one
(the regex check's pattern and the final_text_matches assertion's)."""


class Equals(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["equals"] = "equals"
    value: Any = None

    def words(self) -> str:
        return f"equal to {json.dumps(self.value, ensure_ascii=False)}"

    def problem(self, value: Any) -> str | None:
        return None if value == self.value else f"{shown(value)} is not {self.words()}"


class Regex(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["regex"] = "regex"
    pattern: RegexPattern

    def words(self) -> str:
        return f"matching /{self.pattern}/"

    def problem(self, value: Any) -> str | None:
        if isinstance(value, str) and re.search(self.pattern, value):
            return None
        return f"{shown(value)} does not match /{self.pattern}/"


class OneOf(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["one_of"] = "one_of"
    values: tuple[Any, ...] = Field(min_length=1)

    def words(self) -> str:
        return "one of " + ", ".join(json.dumps(v, ensure_ascii=False) for v in self.values)

    def problem(self, value: Any) -> str | None:
        return None if value in self.values else f"{shown(value)} is not {self.words()}"


class NumberRange(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["range"] = "range"
    min: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _bounded(self) -> NumberRange:
        if self.min is None and self.max is None:
            raise ValueError("a range needs min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        return self

    def words(self) -> str:
        if self.max is None:
            return f"at least {self.min:g}"
        if self.min is None:
            return f"at most {self.max:g}"
        return f"between {self.min:g} and {self.max:g}"

    def problem(self, value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{shown(value)} is not a number"
        if (self.min is not None and value < self.min) or (
                self.max is not None and value > self.max):
            return f"{shown(value)} is not {self.words()}"
        return None


class Schema(BaseModel):
    kind: Literal["schema"] = "schema"
    schema_: dict[str, Any] = Field(alias="schema")

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True,
                              serialize_by_alias=True)

    @field_validator("schema_")
    @classmethod
    def _valid_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ValueError(f"not a valid JSON Schema: {exc.message}") from exc
        return schema

    def words(self) -> str:
        return "valid against the given JSON Schema"

    def problem(self, value: Any) -> str | None:
        error = jsonschema.exceptions.best_match(
            jsonschema.Draft202012Validator(self.schema_).iter_errors(value))
        return None if error is None else f"{shown(value)} fails the schema: {error.message}"


ArgumentCheck = Annotated[Equals | Regex | OneOf | NumberRange | Schema,
                          Field(discriminator="kind")]


def shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."
