"""What the wire adapters share: the chat() skeleton and small translation helpers.

A wire adapter (OpenAI, Anthropic, Gemini) only translates. It says which headers carry
its credentials, how a ChatRequest becomes a request body, how a response body becomes
a ChatResponse, and how an event stream folds into that same body. Client
sending, credentials, retries and error mapping live in `client.py` and the modules it
uses. A streamed
response is aggregated into the body the provider would have sent without streaming
and then parsed by the same code, so both paths give the same ChatResponse.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, Self

from tools_app.engine.providers.http.client import EventStream, JsonResponse, ProviderHttpClient
from tools_app.engine.providers.http.endpoint import EndpointSettings
from tools_app.engine.providers.http.jsoncodec import loads_json
from tools_app.engine.providers.http.wire_errors import ErrorDetails, invalid_response_error

from ..errors import ProviderError
from ..events import ProviderWireResponse, emit, observed
from ..messages import ChatMessage, ChatRequest, ChatRequestParameters, ChatResponse
from .request_limits import CustomKeys, allowed_custom, custom_keys_for

JsonObject = dict[str, Any]

_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


_NO_PARAMETERS = ChatRequestParameters()
"""A model without default parameters: a request's own are used as they are (what
override_with would return, without the copy)."""

RESPONSES_ITEM_TYPES = frozenset({
    "message", "reasoning", "function_call", "function_call_output", "file_search_call",
    "web_search_call", "computer_call", "computer_call_output", "program", "program_output",
    "tool_search_call", "tool_search_output", "additional_tools", "compaction",
    "image_generation_call", "code_interpreter_call", "local_shell_call",
    "local_shell_call_output", "shell_call", "shell_call_output", "apply_patch_call",
    "apply_patch_call_output", "mcp_call", "mcp_list_tools", "mcp_approval_request",
    "mcp_approval_response", "custom_tool_call", "custom_tool_call_output", "response",
})
"""The output item types of OpenAI's Responses API (the openai SDK's ResponseOutputItem),
and "response", the block that keeps the id of the response they came in: an AiMessage
whose provider_blocks are these came from that API, so the other adapters never send them
back as their own blocks."""


class WireChatModel(ABC):
    """A ChatModel that talks to one HTTP API. Subclasses implement the translation.

    Built from one EndpointSettings (endpoint.py), or from its fields as keywords:
    `OpenAIChatModel(settings)` or `OpenAIChatModel(model="gpt-4o", api_key=...)`.
    Its HTTP client (client.py) is shared by every call and every run using the model.
    Settings with `clients=` (a SharedHttpClients) or `http_client=` share connections
    between models of the same endpoint; without them the model owns its clients and
    `await model.aclose()` (or `async with model:`) releases them.
    """

    provider: ClassVar[str]
    default_base_url: ClassVar[str | None] = None

    @property
    def custom_keys(self) -> CustomKeys:
        """The `parameters.custom` keys this provider's requests may carry."""
        return custom_keys_for(self.provider)

    def __init__(self, settings: EndpointSettings | None = None, /, **options: Any) -> None:
        settings = EndpointSettings.of(settings, options).for_provider(
            self.provider, self.default_base_url)
        self.settings = settings
        self.model = settings.model
        self.stream = settings.stream
        self.parameters = settings.parameters or _NO_PARAMETERS
        api_key = settings.api_key
        self.http = ProviderHttpClient(
            self.provider, settings,
            credentials=self.credentials(api_key) if api_key else {},
            default_headers=self.default_headers())

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(base_url={self.http.base_url!r}, model={self.model!r}, "
                f"stream={self.stream!r})")

    @property
    def model_name(self) -> str:
        return self.model

    async def aclose(self) -> None:
        """Close the connections the model owns; a later call opens new ones. A shared
        client or cache given to the model is left to its owner."""
        await self.http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    async def chat(self, request: ChatRequest) -> ChatResponse:
        parameters = (request.parameters if self.parameters is _NO_PARAMETERS
                      else self.parameters.override_with(request.parameters))
        model = parameters.model_name or self.model
        body = self.build_body(request.messages, parameters, model=model, stream=self.stream)
        path = self.path(model, stream=self.stream)
        if self.stream:
            async with self.http.open_stream(path, body) as stream:
                return await self._settle(stream.attempt, self._from_stream(stream))
        response = await self.http.post_json(path, body)
        return await self._settle(response.attempt, self._from_json(response))

    async def _from_stream(self, stream: EventStream) -> ChatResponse:
        data = await self.read_stream(stream)
        return await self._parse(data, stream.status, stream.request_id, stream.raw_text())

    async def _from_json(self, response: JsonResponse) -> ChatResponse:
        data, request_id = self.http.decode(response)
        return await self._parse(data, response.status, request_id)

    async def _parse(self, data: Any, status: int, request_id: str | None,
                     raw_stream: str | None = None) -> ChatResponse:
        if observed():
            await emit(ProviderWireResponse(provider=self.provider, status=status, body=data,
                                            request_id=request_id, raw_stream=raw_stream))
        if not isinstance(data, dict):
            raise self.invalid("the body is not a JSON object", data, request_id)
        return self.parse_response(data, request_id)

    async def _settle(self, attempt: int, outcome: Awaitable[ChatResponse]) -> ChatResponse:
        """A response that arrived but cannot be used (broken stream, garbage, a cut-off
        tool call) is a failed attempt too: it is reported, then raised, never retried."""
        try:
            return await outcome
        except ProviderError as error:
            await self.http.report_attempt(attempt, error, None)
            raise

    # -- what an adapter provides -----------------------------------------------------

    def default_headers(self) -> dict[str, str]:
        return {}

    @abstractmethod
    def credentials(self, api_key: str) -> dict[str, str]:
        """The headers that carry the API key (kept out of every event and message)."""

    @abstractmethod
    def path(self, model: str, *, stream: bool) -> str: ...

    @abstractmethod
    def build_body(
        self,
        messages: Sequence[ChatMessage],
        parameters: ChatRequestParameters,
        *,
        model: str,
        stream: bool,
    ) -> JsonObject: ...

    @abstractmethod
    async def read_stream(self, stream: EventStream) -> JsonObject:
        """Fold the event stream into the body a non-streamed call would have returned."""

    @abstractmethod
    def parse_response(self, body: JsonObject, request_id: str | None) -> ChatResponse: ...

    # -- helpers for adapters ---------------------------------------------------------

    def invalid(self, reason: str, body: Any, request_id: str | None = None) -> ProviderError:
        text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False,
                                                             default=str)
        return invalid_response_error(self.provider, reason, text, self.http.redactor,
                                      request_id=request_id)

    def error_in_body(self, body: JsonObject, request_id: str | None) -> ProviderError:
        """A 200 response whose body is an error object (some gateways do this)."""
        details = ErrorDetails.from_body(body)
        return ProviderError(
            f"{self.provider}: the provider answered HTTP 200 with an error: "
            f"{details.describe()}",
            provider=self.provider, status=200, error_type=details.error_type,
            code=details.code, request_id=request_id, retryable=False,
        )

    def truncated_tool_call(self, names: Sequence[str], reason: str,
                            request_id: str | None) -> ProviderError:
        """A response cut off while the model was writing tool calls: nothing runs."""
        listed = ", ".join(repr(n) for n in names) or "(unnamed)"
        return ProviderError(
            f"{self.provider}: the response was cut off ({reason}) while the model was "
            f"writing a call to tool {listed}; the incomplete call was not executed. "
            "Raise max_output_tokens or ask for a shorter answer.",
            provider=self.provider, status=200, error_type="truncated_tool_call",
            request_id=request_id, retryable=False,
        )


# -- request bodies: each history message translated once ------------------------------


class MessageCache:
    """Each ChatMessage translated to its wire form once.

    A tool-calling loop resends the whole history every round. Messages are
    immutable, so the translation of one message object never changes: it is kept
    here, keyed by the object (the oldest entries are dropped beyond `limit`; a dropped
    message is simply translated again). The cached dicts are shared by every request
    body that contains them: treat bodies as read-only (observers receive them through
    ProviderWireRequest). Lookups take no lock; only insertions do.
    """

    def __init__(self, translate: Callable[[Any], JsonObject], limit: int = 8192) -> None:
        self._translate = translate
        self._limit = limit
        self._entries: OrderedDict[int, tuple[object, JsonObject]] = OrderedDict()
        self._lock = threading.Lock()

    def translate(self, message: object) -> JsonObject:
        entry = self._entries.get(id(message))
        if entry is not None and entry[0] is message:
            return entry[1]
        translated = self._translate(message)
        with self._lock:
            self._entries.pop(id(message), None)  # an id reused by a new object
            self._entries[id(message)] = (message, translated)
            while len(self._entries) > self._limit:
                self._entries.popitem(last=False)
        return translated

    def __len__(self) -> int:
        return len(self._entries)


# -- translation helpers shared by the adapters ------------------------------------------


def synthesize_call_id(response_id: str | None, index: int, name: str, arguments: str) -> str:
    """A stable id for a tool call that came without one (Gemini, some compatible
    servers): the same response always gives the same id, so results still pair."""
    if response_id:
        seed = _ID_UNSAFE.sub("_", response_id)[:48]
    else:
        seed = hashlib.sha256(f"{name}\x00{arguments}".encode()).hexdigest()[:16]
    return f"call_{seed}_{index}"


def dedupe_call_ids(ids: Sequence[str | None], response_id: str | None,
                    names: Sequence[str], arguments: Sequence[str]) -> list[str]:
    """Fill empty ids and replace repeated ones, so every result pairs with one call."""
    result: list[str] = []
    for index, call_id in enumerate(ids):
        if not call_id or call_id in result:
            call_id = synthesize_call_id(response_id, index, names[index], arguments[index])
        result.append(call_id)
    return result


def normalize_arguments(value: Any) -> str:
    """The raw arguments string; no arguments at all (None, "") is the empty object."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return "{}"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def arguments_object(arguments: str) -> JsonObject | None:
    """The arguments as a JSON object, or None when they are not one."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def as_dict(value: Any) -> JsonObject:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def merge_custom(body: JsonObject, custom: Mapping[str, Any] | None,
                 keys: CustomKeys) -> JsonObject:
    """`custom` parameters go into the body last, so they win; an object merges into an
    object already there (e.g. Gemini's generationConfig) instead of replacing it. Only
    the adapter's allowed keys are sent: never the model, messages or tools, even from a
    stored snapshot (request_limits.py)."""
    for key, value in allowed_custom(custom, keys).items():
        present = body.get(key)
        both = isinstance(present, dict) and isinstance(value, dict)
        body[key] = {**present, **value} if both else value  # type: ignore[dict-item]
    return body


def parse_json_event(data: str, stream: EventStream, what: str) -> JsonObject:
    """One SSE payload as a JSON object; a cut-off or garbled payload breaks the stream."""
    try:
        value = loads_json(data)
    except ValueError:
        raise stream.broken(f"the stream carried a {what} that is not valid JSON "
                            f"({len(data)} bytes)") from None
    if not isinstance(value, dict):
        raise stream.broken(f"the stream carried a {what} that is not a JSON object")
    return value
