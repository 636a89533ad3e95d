"""JSON Schema (as @tool derives it) -> the OpenAPI-3.0 subset Gemini's `parameters` take.

    inlined     $ref to #/$defs/... or #/definitions/... (a recursive $ref cannot be)
    mapped      type names to STRING/NUMBER/INTEGER/BOOLEAN/ARRAY/OBJECT; a "null" type
                or anyOf member to nullable; oneOf to anyOf; a one-element allOf to its
                member; a string const to a one-value enum
    dropped     annotations and constraints Gemini rejects but the engine still checks
                when it validates the arguments: title, default, examples,
                additionalProperties, exclusiveMinimum/Maximum, multipleOf, uniqueItems,
                $schema/$id/$comment, formats other than Gemini's few
    refused     what would change the shape of valid arguments: not, if/then/else,
                patternProperties, prefixItems, contains..., allOf of several schemas,
                enums of non-strings, unknown keywords. The error names the tool, the
                keyword and where it is.
"""

from __future__ import annotations

from typing import Any

from ..errors import ProviderError

JsonObject = dict[str, Any]

_TYPES = {"string": "STRING", "number": "NUMBER", "integer": "INTEGER", "boolean": "BOOLEAN",
          "array": "ARRAY", "object": "OBJECT"}
_FORMATS = {"STRING": {"enum", "date-time"}, "NUMBER": {"float", "double"},
            "INTEGER": {"int32", "int64"}}
_COPIED = {"description", "pattern", "minLength", "maxLength", "minItems", "maxItems",
           "minProperties", "maxProperties", "minimum", "maximum", "example", "propertyOrdering"}
_DROPPED = {"title", "default", "examples", "additionalProperties", "unevaluatedProperties",
            "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "uniqueItems", "$schema",
            "$id", "$comment", "$anchor", "$defs", "definitions", "readOnly", "writeOnly",
            "deprecated", "contentEncoding", "contentMediaType", "discriminator"}
_REFUSED = {"not", "if", "then", "else", "patternProperties", "prefixItems", "contains",
            "minContains", "maxContains", "dependentSchemas", "dependentRequired",
            "propertyNames", "unevaluatedItems", "$dynamicRef", "$recursiveRef"}
_HANDLED = {"type", "format", "enum", "const", "properties", "required", "items", "anyOf",
            "oneOf", "allOf", "$ref", "nullable"}


class GeminiSchemaError(ProviderError):
    """A tool's JSON Schema uses something Gemini's schema cannot express."""

    def __init__(self, tool: str, keyword: str, path: str, why: str) -> None:
        super().__init__(
            f"gemini: tool {tool!r}: JSON Schema keyword {keyword!r} at {path or '(root)'} "
            f"cannot be converted to Gemini's schema: {why}",
            provider="gemini", error_type="unsupported_schema", retryable=False)
        self.tool, self.keyword, self.path = tool, keyword, path


def to_gemini_schema(tool: str, schema: JsonObject) -> JsonObject | None:
    """The converted schema, or None for a tool without arguments (Gemini refuses an
    OBJECT with no properties, so such a declaration carries no `parameters`)."""
    converter = _Converter(tool, {**_defs(schema, "definitions"), **_defs(schema, "$defs")})
    converted = converter.convert(schema, "", frozenset())
    if converted.get("type") == "OBJECT" and not converted.get("properties"):
        return None
    return converted


def _defs(schema: JsonObject, key: str) -> JsonObject:
    value = schema.get(key)
    return {f"#/{key}/{name}": s for name, s in value.items()} if isinstance(value, dict) else {}


class _Converter:
    def __init__(self, tool: str, definitions: JsonObject) -> None:
        self.tool = tool
        self.definitions = definitions

    def fail(self, keyword: str, path: str, why: str) -> GeminiSchemaError:
        return GeminiSchemaError(self.tool, keyword, path, why)

    def convert(self, node: Any, path: str, refs: frozenset[str]) -> JsonObject:
        if not isinstance(node, dict):
            raise self.fail("(schema)", path, f"expected an object, got {node!r}")
        for keyword in node:
            self._check_keyword(keyword, path)
        result: JsonObject = {}
        if "$ref" in node:
            result.update(self._ref(node["$ref"], path, refs))
        if "allOf" in node:
            result.update(self._all_of(node["allOf"], path, refs))
        result.update(self._types(node, path))
        result.update(self._alternatives(node, path, refs))
        result.update(self._enum(node, path))
        result.update(self._children(node, path, refs))
        result.update({k: v for k, v in node.items() if k in _COPIED})
        if node.get("nullable") is True:
            result["nullable"] = True
        return self._with_format(result, node.get("format"))

    def _check_keyword(self, keyword: str, path: str) -> None:
        if keyword in _REFUSED:
            raise self.fail(keyword, path, "Gemini has no equivalent")
        if keyword not in _COPIED | _DROPPED | _HANDLED and not keyword.startswith("x-"):
            raise self.fail(keyword, path, "unknown to Gemini's schema")

    def _ref(self, ref: Any, path: str, refs: frozenset[str]) -> JsonObject:
        if not isinstance(ref, str) or ref not in self.definitions:
            raise self.fail("$ref", path, f"only local #/$defs references can be inlined, "
                                          f"not {ref!r}")
        if ref in refs:
            raise self.fail("$ref", path, f"{ref} is recursive and cannot be inlined")
        return self.convert(self.definitions[ref], f"{path}.$ref", refs | {ref})

    def _all_of(self, members: Any, path: str, refs: frozenset[str]) -> JsonObject:
        if not isinstance(members, list) or len(members) != 1:
            raise self.fail("allOf", path, "only a single-schema allOf can be inlined")
        return self.convert(members[0], f"{path}.allOf[0]", refs)

    def _types(self, node: JsonObject, path: str) -> JsonObject:
        declared = node.get("type")
        if declared is None:
            return {}
        names = declared if isinstance(declared, list) else [declared]
        nullable = "null" in names
        names = [n for n in names if n != "null"]
        unknown = [n for n in names if n not in _TYPES]
        if unknown or not names:
            raise self.fail("type", path, f"type {declared!r} has no Gemini equivalent")
        mapped: JsonObject = {"type": _TYPES[names[0]]} if len(names) == 1 else {
            "anyOf": [{"type": _TYPES[n]} for n in names]}
        return {**mapped, "nullable": True} if nullable else mapped

    def _alternatives(self, node: JsonObject, path: str, refs: frozenset[str]) -> JsonObject:
        keyword = "anyOf" if "anyOf" in node else "oneOf" if "oneOf" in node else None
        if keyword is None:
            return {}
        members = node[keyword]
        if not isinstance(members, list):
            raise self.fail(keyword, path, "expected a list of schemas")
        concrete = [(i, m) for i, m in enumerate(members) if m != {"type": "null"}]
        nullable: JsonObject = {"nullable": True} if len(concrete) < len(members) else {}
        converted = [self.convert(m, f"{path}.{keyword}[{i}]", refs) for i, m in concrete]
        if len(converted) == 1:
            return {**converted[0], **nullable}
        return {"anyOf": converted, **nullable}

    def _enum(self, node: JsonObject, path: str) -> JsonObject:
        if "const" in node:
            values = [node["const"]]
            keyword = "const"
        elif "enum" in node:
            values, keyword = list(node["enum"]), "enum"
        else:
            return {}
        nullable = None in values
        values = [v for v in values if v is not None]
        if not all(isinstance(v, str) for v in values):
            raise self.fail(keyword, path, "Gemini enums can only hold strings, "
                                           f"not {values!r}")
        mapped: JsonObject = {"type": "STRING", "enum": values}
        return {**mapped, "nullable": True} if nullable else mapped

    def _children(self, node: JsonObject, path: str, refs: frozenset[str]) -> JsonObject:
        mapped: JsonObject = {}
        properties = node.get("properties")
        if isinstance(properties, dict):
            mapped["properties"] = {
                name: self.convert(child, f"{path}.properties.{name}", refs)
                for name, child in properties.items()}
            required = [r for r in node.get("required") or [] if r in properties]
            if required:
                mapped["required"] = required
        if "items" in node:
            if not isinstance(node["items"], dict):
                raise self.fail("items", path, "tuple-style items have no Gemini equivalent")
            mapped["items"] = self.convert(node["items"], f"{path}.items", refs)
        return mapped

    def _with_format(self, result: JsonObject, declared: Any) -> JsonObject:
        allowed = _FORMATS.get(str(result.get("type")), set())
        if isinstance(declared, str) and declared in allowed:
            result["format"] = declared
        return result
