"""The shape of a run's snapshot, owned here: one pydantic model with a typed section for
everything a run freezes and for each optional section the debugger adds.

A run stores its snapshot as JSON (`Run.snapshot`); every reader loads it with
`snapshot_of(run)` (or `RunSnapshot.load`) and uses attributes. Version 2 is this model;
a version-1 row (the same sections, read by key before this model existed, some written
before later fields were added) loads into it unchanged, its missing fields taking the
defaults the readers used to assume. Every field has a default, so a row written outside
the run services still shows; building its engine is what fails, with the reason.
Sections keep fields they do not declare, so a row written by a newer or older version
loses nothing when it is copied into a rerun.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from tools_app.engine import (
    ChatMessage,
    ChatRequestParameters,
    LoopHealth,
    LoopRule,
    TokenPrice,
)
from tools_app.engine.providers.recorded import RecordedRound
from tools_app.models import Run

LoopActionName = Literal["note", "tell_model", "stop"]

SNAPSHOT_VERSION = 2
READABLE_VERSIONS = frozenset({1, 2})

_messages_adapter: TypeAdapter[list[ChatMessage]] = TypeAdapter(list[ChatMessage])


class Section(BaseModel):
    """A part of a snapshot: fields it does not declare are kept as they are."""

    model_config = ConfigDict(extra="allow", validate_assignment=False)

    def stored(self) -> dict[str, Any]:
        """The section as a run stores it (and the API shows it)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class EndpointSnapshot(Section):
    """The model endpoint as frozen: never a secret, only the NAME of the key's variable
    and `env:NAME` header values. `id` is None for a built-in endpoint (try-it)."""

    id: str | None = None
    name: str = ""
    kind: str = ""
    base_url: str = ""
    model: str = ""
    default_parameters: dict[str, Any] = Field(default_factory=dict)
    api_key_env: str = ""
    stream: bool = False
    extra_headers: dict[str, str] = Field(default_factory=dict)
    proxy_url: str = ""
    script: Any = None
    # Per model-call attempt (engine/providers/http/endpoint.py, attempt_timeouts); a snapshot
    # frozen before the field existed takes the default.
    timeout_seconds: float = 120.0


class ToolSnapshot(Section):
    """One tool as frozen, with its definition's hash; an MCP tool carries its server's
    configuration (`mcp_server`, None when the server was gone at the start)."""

    id: str | None = None
    name: str
    description: str = ""
    json_schema: dict[str, Any] = Field(default_factory=dict)
    kind: str = "python"
    python_path: str = ""
    config: dict[str, Any] = Field(default_factory=dict)
    return_behavior: str = "to_llm"
    strict: bool = False
    timeout_seconds: float | None = None
    requires_approval: bool = False
    idempotent: bool = False
    # A Python tool run in a worker process of its own (engine/isolation).
    isolated: bool = False
    version_hash: str = ""
    mcp_server: dict[str, Any] | None = None


class PolicySnapshot(Section):
    """The error policy's values as frozen, per-run overrides applied."""

    id: int | None = None
    name: str = ""
    arguments_error: str = "to_model"
    arguments_error_template: str = "{error}"
    execution_error: str = "to_model"
    execution_error_template: str = "{error}"
    hallucinated_tool: str = "tell_model"
    max_round_trips: int = 10
    default_tool_timeout: float | None = None
    parallel: bool = True
    max_concurrency: int | None = None
    provider_max_retries: int = 2
    # The run's deadline in seconds of a worker driving it (runs/worker/runner.py);
    # None: none.
    run_timeout_seconds: float | None = None
    # The most the run may spend, in dollars (engine/pricing.CostCap); None: no cap.
    cost_cap_usd: Decimal | None = None
    # Loop health (engine/loop/health.py), per detector: flag from `*_at` on with
    # `*_action`, stop from `*_stop_at` on (None: never). A snapshot frozen before these
    # existed takes the policy's defaults, so a resumed or rerun old run is checked too.
    loop_repeat_at: int | None = 3
    loop_repeat_action: LoopActionName = "tell_model"
    loop_repeat_stop_at: int | None = 5
    loop_ping_pong_at: int | None = 4
    loop_ping_pong_action: LoopActionName = "tell_model"
    loop_ping_pong_stop_at: int | None = 8
    loop_no_progress_at: int | None = 3
    loop_no_progress_action: LoopActionName = "note"
    loop_no_progress_stop_at: int | None = None

    def loop_health(self) -> LoopHealth:
        """The engine's rules for these values."""
        return LoopHealth(**{
            detector: LoopRule(at=getattr(self, f"loop_{prefix}_at"),
                               action=getattr(self, f"loop_{prefix}_action"),
                               stop_at=getattr(self, f"loop_{prefix}_stop_at"))
            for detector, prefix in LOOP_FIELD_PREFIXES.items()})


LOOP_FIELD_PREFIXES = {"repeated_call": "repeat", "ping_pong": "ping_pong",
                       "no_progress": "no_progress"}
"""A detector's name in the engine -> its fields' prefix in a policy (loop_<prefix>_at)."""


class PriceSnapshot(Section):
    """The price revision in force when the run was started (models/prices.py): every
    round of the run is priced with it, and records `revision`."""

    revision: int
    model: str = ""
    input_per_million: Decimal
    cached_input_per_million: Decimal | None = None
    output_per_million: Decimal

    def token_price(self) -> TokenPrice:
        return TokenPrice(input_per_million=self.input_per_million,
                          cached_input_per_million=self.cached_input_per_million,
                          output_per_million=self.output_per_million, revision=self.revision)


ModelMode = Literal["recorded", "live"]
ToolsMode = Literal["recorded", "live", "mock"]
OnDivergence = Literal["stop", "live"]


class ReplaySection(Section):
    """Which parts answer from a recording (a rerun replaying, `replay_fixture`), and the
    recording itself, in the engine's one shape of a recorded round (a run file's
    rounds are that shape with their audit record added)."""

    model: ModelMode = "live"
    tools: ToolsMode = "live"
    on_divergence: OnDivergence = "stop"
    source: str | None = None
    rounds: list[RecordedRound] = Field(default_factory=list)
    tool_modes: dict[str, ToolsMode] = Field(default_factory=dict)
    """A mode per tool name where it differs from `tools` (a suite run's cases: read-only
    tools live, destructive ones mocked)."""


class ForkSection(Section):
    """Where a fork (or a splice) came from: the round it starts at (1-based), how many
    starting messages and rounds it inherited, per message whether it was inherited,
    edited, added or (a splice's) the spliced result, and what changed, in words.
    `own_rounds` is 0 when the fork went on with another endpoint (that endpoint's script
    starts at its beginning)."""

    of: str
    round: int
    inherited: int = 0
    inherited_rounds: int = 0
    marks: list[str] = Field(default_factory=list)
    removed: int = 0
    changes: list[str] = Field(default_factory=list)
    own_rounds: int | None = None

    def scripted_rounds_before(self) -> int:
        """Assistant messages of the starting conversation a scripted model of this run
        did not play itself."""
        return self.inherited_rounds if self.own_rounds is None else self.own_rounds


class SplicedResult(Section):
    arguments: Any = None
    text: str | None = None
    is_error: bool = False


class SpliceSection(Section):
    """Which re-executed result a spliced run put in place of the original's."""

    of: str
    call: int
    call_id: str
    tool: str
    round: int
    execution: int
    by: str = ""
    original: SplicedResult = Field(default_factory=SplicedResult)
    spliced: SplicedResult = Field(default_factory=SplicedResult)


class TryItSection(Section):
    """A try-it run: the one tool it calls and the arguments it was given."""

    tool: str
    arguments: Any = None


class ImportedSection(Section):
    """A run imported from a run file: the id it had where it was exported, and when;
    who imported it (their username; None when no user was given) and how. The run's
    created_at is the import's moment, its started_at and finished_at the original's."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    source_run: str | None = Field(default=None, alias="from")
    exported_at: str | None = None
    imported_by: str | None = None
    via: str | None = None


class RerunSection(Section):
    """A rerun's parent, whether it used the snapshot as it was or the configuration as
    it is now, what differed, and which replay options it ran with."""

    of: str
    mode: str = "as_it_was"
    differences: list[str] = Field(default_factory=list)
    fork_round: int | None = None
    replay: dict[str, str] | None = None


OPTIONAL_SECTIONS = ("replay", "fork", "splice", "tryit", "imported", "rerun", "price")


class RunSnapshot(BaseModel):
    """Everything a run uses, frozen at its start: a worker reads nothing else."""

    model_config = ConfigDict(extra="allow")

    version: int = SNAPSHOT_VERSION
    endpoint: EndpointSnapshot = Field(default_factory=EndpointSnapshot)
    tools: list[ToolSnapshot] = Field(default_factory=list)
    policy: PolicySnapshot = Field(default_factory=PolicySnapshot)
    messages: list[dict[str, Any]] = Field(default_factory=list)
    parameters: dict[str, Any] = Field(default_factory=dict)
    # Optional sections, each written by one debugger feature.
    replay: ReplaySection | None = None
    fork: ForkSection | None = None
    splice: SpliceSection | None = None
    tryit: TryItSection | None = None
    imported: ImportedSection | None = None
    rerun: RerunSection | None = None
    price: PriceSnapshot | None = None
    breakpoints: list[dict[str, Any]] = Field(default_factory=list)
    policy_changed: list[str] = Field(default_factory=list)

    @classmethod
    def load(cls, data: Mapping[str, Any]) -> RunSnapshot:
        """A stored snapshot of any readable version, as this version's model; raises
        pydantic's ValidationError (a ValueError) for one that is not a snapshot."""
        version = data.get("version", 1)
        if version not in READABLE_VERSIONS:
            raise ValueError(f"snapshot version {version!r} is not one this app reads "
                             f"({', '.join(map(str, sorted(READABLE_VERSIONS)))})")
        snapshot = cls.model_validate(data)
        snapshot.version = SNAPSHOT_VERSION
        return snapshot

    def stored(self) -> dict[str, Any]:
        """The JSON a run stores: the fields that were given or set (a loaded row keeps
        its shape), without the optional sections set to None."""
        data = self.model_dump(mode="json", by_alias=True, exclude_unset=True)
        data["version"] = self.version
        for name in OPTIONAL_SECTIONS:
            if name in data and data[name] is None:
                del data[name]
        return data

    def copy_deep(self) -> RunSnapshot:
        return self.model_copy(deep=True)

    def chat_messages(self) -> list[ChatMessage]:
        return _messages_adapter.validate_python(self.messages)

    def request_parameters(self) -> ChatRequestParameters:
        """The endpoint's default parameters overridden by the run's own."""
        defaults = ChatRequestParameters.model_validate(self.endpoint.default_parameters)
        return defaults.override_with(ChatRequestParameters.model_validate(self.parameters))

    def tool_names(self) -> list[str]:
        return [tool.name for tool in self.tools]

    def tool_named(self, name: str) -> ToolSnapshot | None:
        return next((tool for tool in self.tools if tool.name == name), None)

    def approval_tools(self) -> frozenset[str]:
        return frozenset(tool.name for tool in self.tools if tool.requires_approval)

    def idempotent_tools(self) -> frozenset[str]:
        return frozenset(tool.name for tool in self.tools if tool.idempotent)

    def billed_price(self) -> TokenPrice | None:
        """The price its model calls are charged at: none for a run whose model answers
        from a recording (a replay calls no provider)."""
        if self.price is None or (self.replay is not None and self.replay.model == "recorded"):
            return None
        return self.price.token_price()


_CACHE_KEY = "_loaded_snapshot"


def snapshot_of(run: Run) -> RunSnapshot:
    """The run's snapshot as the model, loaded once per run instance (and again if the
    instance's stored JSON is replaced)."""
    cached = run.__dict__.get(_CACHE_KEY)
    if cached is None or cached[0] is not run.snapshot:
        cached = (run.snapshot, RunSnapshot.load(run.snapshot))
        run.__dict__[_CACHE_KEY] = cached
    return cached[1]


class Listed(NamedTuple):
    endpoint: str
    model: str
    tools: list[str]


def listed(stored: Any) -> Listed:
    """The endpoint's name and model and the tools' names of a stored snapshot, read
    without loading the model: lists and exports show them for many runs at once."""
    data = stored if isinstance(stored, Mapping) else {}
    endpoint = data.get("endpoint")
    endpoint = endpoint if isinstance(endpoint, Mapping) else {}
    tools = data.get("tools")
    tools = tools if isinstance(tools, list) else []
    return Listed(str(endpoint.get("name") or ""), str(endpoint.get("model") or ""),
                  [str(t.get("name") or "") for t in tools if isinstance(t, Mapping)])


def price_revision(stored: Any) -> int | None:
    """The price revision a stored snapshot froze (its "price" section), read without
    loading the model; None: the run has no price."""
    price = stored.get("price") if isinstance(stored, Mapping) else None
    revision = price.get("revision") if isinstance(price, Mapping) else None
    return revision if isinstance(revision, int) else None


def dump_messages_json(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    return _messages_adapter.dump_python(messages, mode="json")  # type: ignore[no-any-return]
