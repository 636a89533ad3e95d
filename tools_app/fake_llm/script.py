"""The script language of the fake provider (validated with pydantic).

A script is a list of steps. Which step answers a request is derived from the request
itself (the number of assistant turns already in the conversation), exactly like the
engine's ScriptedChatModel, so any number of concurrent conversations can share one
script and each of them sees the same sequence.

A step is a reply (text, tool calls, or both) that can be preceded by faults. Faults
are played on the first attempts of that step; a fault with `times: null` is played on
every attempt (a permanent failure). A step with neither text nor tool calls plays the
built-in "auto" reply (see `auto.py`), so `{"faults": [...]}` alone means "fail, then
behave normally".

Example (one file may hold a single script, or several keyed by model name, "*" being
the fallback for every other model):

    {"scripts": {"*": {"steps": [
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}},
                        {"name": "get_weather", "arguments": {"city": "Lima"}}],
         "latency_ms": 20,
         "faults": [{"kind": "status", "status": 429, "retry_after": 0}]},
        {"text": "Paris: {last_result}"}
    ]}}}
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FakeToolCall(_Strict):
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    """An object, or a raw string (to rehearse invalid JSON arguments)."""
    id: str | None = None
    """Fixed call id; by default each provider's id format is generated."""

    def raw_arguments(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)


class _Fault(_Strict):
    times: int | None = Field(default=1, ge=1)
    """How many attempts this fault answers; null = every attempt from here on."""


class StatusFault(_Fault):
    """An HTTP error. Without `body` the provider's own error shape is used."""

    kind: Literal["status"] = "status"
    status: int = Field(ge=100, le=599)
    body: Any = None
    """A JSON value, or a string sent verbatim."""
    message: str | None = None
    """The message inside the default, provider-shaped body."""
    retry_after: float | str | None = None
    """The Retry-After header: seconds, or an HTTP date as a string."""
    retry_after_ms: float | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    content_type: str | None = None


class ResetFault(_Fault):
    """Close the connection without any response: RST by default, FIN if `graceful`."""

    kind: Literal["reset"] = "reset"
    graceful: bool = False


class CutFault(_Fault):
    """Send the response head and the first `after_bytes` bytes of the body, then close."""

    kind: Literal["cut"] = "cut"
    after_bytes: int = Field(default=0, ge=0)


class StreamErrorFault(_Fault):
    """Stream `after_events` normal events, then the provider's error event, then end.

    A non-streaming request gets `status` with the same error as its JSON body.
    """

    kind: Literal["stream_error"] = "stream_error"
    after_events: int = Field(default=1, ge=0)
    error_type: str | None = None
    message: str = "Internal server error"
    status: int = Field(default=500, ge=400, le=599)


class GarbageFault(_Fault):
    """A 200 response whose body is not what the client expects."""

    kind: Literal["garbage"] = "garbage"
    body: str = "<html><body>502 Bad Gateway</body></html> {not json"
    content_type: str = "application/json"


class HangFault(_Fault):
    """Accept the request and never answer: no status, no byte, until the client gives up
    and closes the connection (a hung provider, for timeouts)."""

    kind: Literal["hang"] = "hang"


Fault = Annotated[
    StatusFault | ResetFault | CutFault | StreamErrorFault | GarbageFault | HangFault,
    Field(discriminator="kind"),
]


class FakeStep(_Strict):
    """One model turn. In `text`, `{last_result}` / `{last_results}` are replaced by the
    first / all (one per line) tool results of the previous round, `{user}` by the last
    user message."""

    text: str | None = None
    tool_calls: tuple[FakeToolCall, ...] = ()
    finish_reason: Literal["stop", "tool_calls", "length"] | None = None
    latency_ms: float | None = Field(default=None, ge=0)
    faults: tuple[Fault, ...] = ()
    probability: float = Field(default=1.0, ge=0, le=1)
    """How often this step is played; otherwise `otherwise` is (see `FakeScript.seed`)."""
    otherwise: FakeStep | None = None
    """The step played when the draw misses; by default a text reply, `MISSED_TEXT`."""

    @model_validator(mode="after")
    def _forever_fault_is_last(self) -> FakeStep:
        # A fault that answers every attempt hides everything after it: reject the
        # script instead of silently never playing those faults.
        for fault in self.faults[:-1]:
            if fault.times is None:
                raise ValueError("only the last fault of a step may have times: null")
        return self

    def has_reply(self) -> bool:
        return self.text is not None or bool(self.tool_calls)

    def fault_for_attempt(self, attempt: int) -> Fault | None:
        """The fault that answers the `attempt`-th request (1-based) for this step."""
        played = 0
        for fault in self.faults:
            if fault.times is None:
                return fault
            played += fault.times
            if attempt <= played:
                return fault
        return None


MISSED_TEXT = "I could not work out which tool to use."
"""What a step whose draw missed answers when it names no `otherwise` step."""


def draw(seed: int, script: str, step: int, key: str, n: int) -> float:
    """The n-th (0-based) number in [0, 1) of a step's sequence of draws."""
    # Reproducible on purpose (a test's pass rate), never a secret.
    return random.Random(f"{seed}\x1f{script}\x1f{step}\x1f{key}\x1f{n}").random()  # noqa: S311


class AutoOptions(_Strict):
    """The built-in reply: `rounds` tool-calling rounds of `parallel` calls each."""

    rounds: int = Field(default=1, ge=0)
    parallel: int = Field(default=1, ge=1)


class FakeScript(_Strict):
    steps: tuple[FakeStep, ...] = ()
    when_exhausted: Literal["error", "auto", "repeat_last"] = "error"
    """Past the last step: a 400 error, the auto reply, or the last step again. A script
    without steps always plays the auto reply."""
    latency_ms: float = Field(default=0, ge=0)
    """Default wait before the first byte of every reply."""
    chunk_size: int = Field(default=8, ge=1)
    """Characters of text or arguments per streamed fragment."""
    chunk_delay_ms: float = Field(default=0, ge=0)
    """Pause between streamed events. At 0 the whole stream is written at once (cheap)."""
    auto: AutoOptions = AutoOptions()
    seed: int = 0
    """Fixes the draws of steps with a probability below 1. The n-th conversation to
    reach step k with a given last user message gets the n-th number of a sequence that
    depends only on the seed, the script's name, k and that message: N such
    conversations play the step the same number of times whatever their order."""


class ScriptSet(_Strict):
    """Scripts keyed by model name; "*" answers every model without its own script."""

    scripts: dict[str, FakeScript] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _bare_script_is_the_default(cls, data: Any) -> Any:
        # A file holding one script (no "scripts" key) means "this script for every model".
        if isinstance(data, dict) and data and "scripts" not in data:
            return {"scripts": {"*": data}}
        return data

    def for_model(self, model: str, header: str | None = None) -> tuple[str, FakeScript] | None:
        """The script for a request: the header's name first, then the model, then "*"."""
        for name in (header, model, "*"):
            if name is not None and name in self.scripts:
                return name, self.scripts[name]
        return None


def load_script_set(path: str | Path) -> ScriptSet:
    """Read and validate a script file (done once at start-up, never per request)."""
    return ScriptSet.model_validate_json(Path(path).read_text(encoding="utf-8"))
