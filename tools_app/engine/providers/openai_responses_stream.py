"""The Responses API's event stream folded into the response body a JSON call returns
(for openai_responses.py): `response.created` / `in_progress` give the response,
`response.output_item.added` / `.done` its items, `function_call_arguments.delta` /
`.done` and `output_text.delta` fill them (reported as PartialToolCall / PartialText as
they come), `response.completed` / `incomplete` end it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..events import PartialText, PartialToolCall, emit, observed
from .adapter import JsonObject, as_dict, as_int, as_list, as_str


@dataclass
class ResponseFolder:
    """Folds the Responses stream events into the response body a JSON call returns."""

    response: JsonObject = field(default_factory=dict)
    items: dict[int, JsonObject] = field(default_factory=dict)
    call_index: dict[int, int] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    final: JsonObject | None = None

    async def add(self, kind: Any, data: JsonObject) -> None:
        if kind in ("response.created", "response.in_progress"):
            self.response = as_dict(data.get("response"))
        elif kind == "response.output_item.added":
            await self._item_added(data)
        elif kind == "response.function_call_arguments.delta":
            await self._arguments_delta(data)
        elif kind == "response.function_call_arguments.done":
            self._item(data)["arguments"] = as_str(data.get("arguments")) or ""
        elif kind == "response.output_text.delta":
            await self._text_delta(data)
        elif kind == "response.output_item.done":
            index = as_int(data.get("output_index"))
            if index is not None:
                self.items[index] = dict(as_dict(data.get("item")))
                self.done.add(index)
        elif kind in ("response.completed", "response.incomplete"):
            self.final = as_dict(data.get("response"))

    def _item(self, data: JsonObject) -> JsonObject:
        return self.items.setdefault(as_int(data.get("output_index")) or 0, {})

    async def _item_added(self, data: JsonObject) -> None:
        index = as_int(data.get("output_index")) or 0
        item = self.items[index] = dict(as_dict(data.get("item")))
        if item.get("type") == "function_call":
            self.call_index[index] = len(self.call_index)
            if observed():
                await emit(PartialToolCall(index=self.call_index[index],
                                           id=as_str(item.get("call_id")),
                                           name=as_str(item.get("name"))))

    async def _arguments_delta(self, data: JsonObject) -> None:
        delta = as_str(data.get("delta")) or ""
        item = self._item(data)
        item["arguments"] = (as_str(item.get("arguments")) or "") + delta
        index = self.call_index.get(as_int(data.get("output_index")) or 0)
        if index is not None and delta and observed():
            await emit(PartialToolCall(index=index, arguments_delta=delta))

    async def _text_delta(self, data: JsonObject) -> None:
        delta = as_str(data.get("delta")) or ""
        item = self._item(data)
        parts = item.setdefault("content", [])
        position = as_int(data.get("content_index")) or 0
        while len(parts) <= position:
            parts.append({"type": "output_text", "text": "", "annotations": []})
        parts[position]["text"] = (as_str(parts[position].get("text")) or "") + delta
        if delta and observed():
            await emit(PartialText(delta=delta))

    def response_body(self) -> JsonObject:
        """The final response, each item as its output_item.done event gave it (the
        value a client sends back; the final event's copy may encode it anew), or as
        folded from its deltas when no such event came."""
        final = self.final or {}
        output = dict(enumerate(as_list(final.get("output"))))
        for index, item in self.items.items():
            if index in self.done or index not in output:
                output[index] = item
        return {**self.response, **final, "output": [output[i] for i in sorted(output)]}
