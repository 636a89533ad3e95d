"""Tool declarations (seed 3.2.1 / 3.2.2): @tool, ToolSpecification and the JSON schema."""

import dataclasses
import enum
from typing import Annotated, Any, Literal, TypedDict

import pytest
from pydantic import BaseModel, Field

from tools_app.engine import (
    P,
    ReturnBehavior,
    ToolService,
    ToolSpecification,
    tool,
    tool_specification_from,
    tool_specifications_from,
    validate_specifications,
)

from . import string_annotated_tools
from .support import WEATHER_SCHEMA, WeatherTools

# -- @tool -----------------------------------------------------------------------------


@tool
def bare(city: str) -> str:
    """Look up the weather.

    Uses the national weather service.
    """
    return city


@tool()
def called() -> None:
    """Called with empty parentheses."""


@tool(name="weather_now", description="Current weather", return_behavior=ReturnBehavior.IMMEDIATE)
def configured(city: str) -> str:
    """This docstring loses to the explicit description."""
    return city


def test_bare_tool_takes_its_name_and_description_from_the_function() -> None:
    spec = tool_specification_from(bare)
    assert spec.name == "bare"
    assert spec.description == "Look up the weather.\n\nUses the national weather service."


def test_tool_with_empty_parentheses_behaves_like_bare_tool() -> None:
    spec = tool_specification_from(called)
    assert spec.name == "called"
    assert spec.description == "Called with empty parentheses."
    assert spec.parameters == {"type": "object", "properties": {}}


def test_tool_options_override_name_description_and_return_behavior() -> None:
    spec = tool_specification_from(configured)
    assert spec.name == "weather_now"
    assert spec.description == "Current weather"
    registered = ToolService().tool(configured).registered_tools["weather_now"]
    assert registered.return_behavior is ReturnBehavior.IMMEDIATE


def test_the_decorator_returns_the_function_unchanged() -> None:
    assert bare("杭州") == "杭州"
    assert configured.__name__ == "configured"


def test_a_function_without_docstring_has_an_empty_description() -> None:
    def undocumented(x: int) -> int:
        return x

    assert tool_specification_from(undocumented).description == ""


def test_explicit_arguments_of_tool_specification_from_win() -> None:
    spec = tool_specification_from(bare, name="renamed", description="Other text")
    assert (spec.name, spec.description) == ("renamed", "Other text")


# -- methods ---------------------------------------------------------------------------


def test_the_seeds_weather_tool_has_the_seeds_schema() -> None:
    spec = tool_specification_from(WeatherTools().get_weather)
    assert spec.name == "get_weather"
    assert spec.description == "查询指定城市的当前天气"
    assert spec.parameters == WEATHER_SCHEMA


def test_a_method_taken_from_the_class_does_not_expose_self() -> None:
    from_class = tool_specification_from(WeatherTools.get_weather)
    from_instance = tool_specification_from(WeatherTools().get_weather)
    assert "self" not in from_class.parameters["properties"]
    assert from_class == from_instance


def test_classmethods_and_staticmethods_expose_only_their_real_parameters() -> None:
    class Helpers:
        @classmethod
        @tool
        def create(cls, size: int) -> int:
            return size

        @staticmethod
        @tool
        def double(value: int) -> int:
            return 2 * value

    assert list(tool_specification_from(Helpers.create).parameters["properties"]) == ["size"]
    assert list(tool_specification_from(Helpers.double).parameters["properties"]) == ["value"]


def test_a_plain_function_whose_first_parameter_is_named_self_keeps_it() -> None:
    def describe(self: str) -> str:
        return self

    assert tool_specification_from(describe).parameters["required"] == ["self"]


def test_tool_specifications_from_an_object_lists_its_tools_in_order() -> None:
    class Tools:
        @tool
        def first(self) -> None: ...

        def helper(self) -> None: ...

        @tool(name="second_tool")
        def second(self, x: int) -> int:
            return x

    class MoreTools(Tools):
        @tool
        def third(self) -> None: ...

    names = [spec.name for spec in tool_specifications_from(MoreTools())]
    assert names == ["first", "second_tool", "third"]
    assert [s.name for s in tool_specifications_from(MoreTools)] == names


# -- parameter descriptions and names --------------------------------------------------


def test_annotated_field_descriptions_reach_the_schema() -> None:
    def search(
        query: Annotated[str, Field(description="What to look for")],
        limit: Annotated[int, Field(description="At most this many", ge=1)] = 10,
    ) -> None: ...

    properties = tool_specification_from(search).parameters["properties"]
    assert properties["query"] == {"type": "string", "description": "What to look for"}
    assert properties["limit"]["description"] == "At most this many"
    assert properties["limit"]["minimum"] == 1


def test_p_renames_a_parameter_for_the_model() -> None:
    def weather(city_name: Annotated[str, P("city", "城市名")]) -> None: ...

    parameters = tool_specification_from(weather).parameters
    assert parameters == WEATHER_SCHEMA


def test_p_with_only_a_description_keeps_the_python_name() -> None:
    def weather(city: Annotated[str, P(description="城市名")]) -> None: ...

    assert tool_specification_from(weather).parameters == WEATHER_SCHEMA


def test_string_annotations_are_resolved() -> None:
    spec = tool_specification_from(string_annotated_tools.ship)
    parameters = spec.parameters
    assert spec.description == "Ship the parcel to an address."
    assert parameters["properties"]["address"] == {"$ref": "#/$defs/Address"}
    assert parameters["$defs"]["Address"]["required"] == ["street", "city"]
    assert parameters["properties"]["express"] == {
        "type": "boolean",
        "description": "Overnight delivery",
        "default": False,
    }
    assert parameters["properties"]["note"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert parameters["required"] == ["address"]


def test_string_annotated_aliases_are_resolved() -> None:
    spec = tool_specification_from(string_annotated_tools.count)
    assert spec.name == "count_words"
    assert spec.parameters == {
        "type": "object",
        "properties": {"sentence": {"type": "string", "description": "The sentence to count"}},
        "required": ["sentence"],
    }


def test_an_unresolvable_string_annotation_is_a_clear_error() -> None:
    def broken(value: "NoSuchType") -> None: ...  # type: ignore[name-defined]  # noqa: F821

    with pytest.raises(TypeError, match="broken"):
        tool_specification_from(broken)


# -- the type table (seed 3.2.2) -------------------------------------------------------


def schema_of(annotation: Any) -> dict[str, Any]:
    """The schema of a one-parameter tool `value: annotation`."""

    def probe(value: Any) -> None: ...

    probe.__annotations__ = {"value": annotation, "return": None}
    parameters = tool_specification_from(probe).parameters
    assert parameters["required"] == ["value"]
    schema: dict[str, Any] = parameters["properties"]["value"]
    if "$ref" in schema:
        schema = parameters["$defs"][schema["$ref"].removeprefix("#/$defs/")]
    return schema


@pytest.mark.parametrize(
    ("annotation", "json_type"),
    [
        (str, "string"),
        (int, "integer"),
        (float, "number"),
        (bool, "boolean"),
        (list[str], "array"),
        (set[int], "array"),
        (tuple[int, ...], "array"),
        (tuple[int, str], "array"),
        (dict[str, int], "object"),
        (dict[str, Any], "object"),
    ],
)
def test_python_types_map_to_json_schema_types(annotation: Any, json_type: str) -> None:
    assert schema_of(annotation)["type"] == json_type


def test_collection_items_are_described() -> None:
    assert schema_of(list[int])["items"] == {"type": "integer"}
    assert schema_of(set[str]) == {"type": "array", "items": {"type": "string"},
                                   "uniqueItems": True}
    assert schema_of(dict[str, float])["additionalProperties"] == {"type": "number"}


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


def test_an_enum_is_a_string_enum() -> None:
    assert schema_of(Unit) == {"type": "string", "enum": ["celsius", "fahrenheit"]}


def test_a_literal_is_an_enum_of_its_values() -> None:
    assert schema_of(Literal["metric", "imperial"]) == {
        "type": "string",
        "enum": ["metric", "imperial"],
    }


class Address(BaseModel):
    street: str
    city: str = Field(description="City name")


class Order(BaseModel):
    item: str
    quantity: int = 1
    ship_to: Address


@dataclasses.dataclass
class Point:
    x: float
    y: float


class Window(TypedDict):
    start: str
    end: str


def test_nested_models_use_defs_and_refs() -> None:
    def place(order: Order) -> None: ...

    parameters = tool_specification_from(place).parameters
    assert parameters["properties"]["order"] == {"$ref": "#/$defs/Order"}
    order = parameters["$defs"]["Order"]
    assert order["properties"]["ship_to"] == {"$ref": "#/$defs/Address"}
    assert order["required"] == ["item", "ship_to"]
    assert parameters["$defs"]["Address"]["properties"]["city"] == {
        "type": "string",
        "description": "City name",
    }


def test_dataclasses_and_typeddicts_are_objects() -> None:
    point = schema_of(Point)
    assert point["type"] == "object"
    assert point["properties"] == {"x": {"type": "number"}, "y": {"type": "number"}}
    assert point["required"] == ["x", "y"]
    window = schema_of(Window)
    assert window["type"] == "object"
    assert window["required"] == ["start", "end"]


def test_optional_parameters_with_a_default_are_not_required() -> None:
    def lookup(city: str, unit: Unit | None = None, days: int = 3) -> None: ...

    parameters = tool_specification_from(lookup).parameters
    assert parameters["required"] == ["city"]
    assert parameters["properties"]["days"] == {"type": "integer", "default": 3}
    assert {"type": "null"} in parameters["properties"]["unit"]["anyOf"]


def test_a_tool_without_required_parameters_has_no_required_list() -> None:
    def ping(verbose: bool = False) -> None: ...

    assert "required" not in tool_specification_from(ping).parameters


def test_generated_titles_are_dropped_but_a_property_named_title_is_kept() -> None:
    class Book(BaseModel):
        title: str

    def save(book: Book, title: str) -> None: ...

    parameters = tool_specification_from(save).parameters
    assert set(parameters["properties"]) == {"book", "title"}
    assert parameters["$defs"]["Book"] == {
        "type": "object",
        "properties": {"title": {"type": "string"}},
        "required": ["title"],
    }
    assert "title" not in parameters


def test_strict_tools_forbid_additional_properties() -> None:
    @tool(strict=True)
    def exact(city: str) -> None: ...

    spec = tool_specification_from(exact)
    assert spec.strict is True
    assert spec.parameters["additionalProperties"] is False


def test_variadic_parameters_cannot_be_tool_arguments() -> None:
    def spread(*cities: str) -> None: ...

    def options(**settings: str) -> None: ...

    with pytest.raises(TypeError, match="cities"):
        tool_specification_from(spread)
    with pytest.raises(TypeError, match="settings"):
        tool_specification_from(options)


# -- ToolSpecification -----------------------------------------------------------------


def test_a_specification_can_key_a_mapping() -> None:
    first = ToolSpecification(name="get_weather", parameters=dict(WEATHER_SCHEMA))
    same = ToolSpecification(name="get_weather", parameters=dict(WEATHER_SCHEMA))
    assert first == same
    assert {first: "executor"}[same] == "executor"


# -- validate_specifications ------------------------------------------------------------


def spec(name: str) -> ToolSpecification:
    return ToolSpecification(name=name)


def test_valid_specifications_pass() -> None:
    validate_specifications([spec("get_weather"), spec("get-weather-2"), spec("a" * 64)])


def test_duplicate_names_are_rejected_naming_the_tool() -> None:
    with pytest.raises(ValueError, match="'get_weather'"):
        validate_specifications([spec("get_weather"), spec("search"), spec("get_weather")])


@pytest.mark.parametrize("name", ["get weather", "", "a" * 65, "天气", "get.weather", "f(x)"])
def test_invalid_names_are_rejected_naming_the_tool(name: str) -> None:
    with pytest.raises(ValueError, match="is invalid") as caught:
        validate_specifications([spec("fine"), spec(name)])
    assert repr(name) in str(caught.value)
