"""What AgentForge stores: endpoints, tools, policies, and the audit log of runs.

A Run holds a frozen snapshot of everything it uses, so later edits to an endpoint,
a tool or a policy never change what a past (or resumed) run did. Round and ToolCall
rows are the current state; RunEvent is the append-only history the timeline replays,
ordered by a per-run `seq` that only the lease holder can advance.

One module per kind of record; everything is importable from `tools_app.models`.
"""

from .accounts import ApiToken, PlaygroundState
from .audit import ToolCallSlot, ToolErrorGroup
from .debugging import (
    REEXECUTION_FINISHED,
    CallDecision,
    CallReexecution,
    DecisionKind,
    ReexecutionState,
)
from .demo import DemoKind, DemoRecord
from .endpoints import ModelEndpoint, ProviderKind
from .ingest import IngestedLayout, IngestedRunKey, IngestedSpan
from .policies import (
    ArgumentsErrorMode,
    ErrorPolicy,
    ExecutionErrorMode,
    HallucinatedToolMode,
    LoopAction,
    PolicyRevision,
)
from .prices import ModelPrice, PriceRevision
from .runs import (
    FINISHED_CALL_STATES,
    IN_DOUBT_CALL_STATES,
    IN_PROGRESS_CALL_STATES,
    REEXECUTABLE_CALL_STATES,
    TERMINAL_STATUSES,
    PauseResolution,
    Round,
    Run,
    RunEvent,
    RunPause,
    RunStatus,
    ToolCall,
    ToolCallState,
)
from .suites import Suite, SuiteCase, SuiteCell, SuiteCellRun, SuiteRun, SuiteRunStatus
from .tools import (
    McpServer,
    McpTransport,
    ReturnBehaviorChoice,
    ToolKind,
    ToolRegistration,
    ToolVersion,
    mcp_server_name_validator,
    mcp_url_problem,
)
from .validators import env_var_validator, proxy_url_validator, tool_name_validator
from .workers import TraceExportStatus, WorkerHeartbeat

__all__ = [
    "FINISHED_CALL_STATES",
    "IN_DOUBT_CALL_STATES",
    "IN_PROGRESS_CALL_STATES",
    "REEXECUTABLE_CALL_STATES",
    "REEXECUTION_FINISHED",
    "TERMINAL_STATUSES",
    "ApiToken",
    "ArgumentsErrorMode",
    "CallDecision",
    "CallReexecution",
    "DecisionKind",
    "DemoKind",
    "DemoRecord",
    "ErrorPolicy",
    "ExecutionErrorMode",
    "HallucinatedToolMode",
    "IngestedLayout",
    "IngestedRunKey",
    "IngestedSpan",
    "LoopAction",
    "McpServer",
    "McpTransport",
    "ModelEndpoint",
    "ModelPrice",
    "PauseResolution",
    "PlaygroundState",
    "PolicyRevision",
    "PriceRevision",
    "ProviderKind",
    "ReexecutionState",
    "ReturnBehaviorChoice",
    "Round",
    "Run",
    "RunEvent",
    "RunPause",
    "RunStatus",
    "Suite",
    "SuiteCase",
    "SuiteCell",
    "SuiteCellRun",
    "SuiteRun",
    "SuiteRunStatus",
    "ToolCall",
    "ToolCallSlot",
    "ToolCallState",
    "ToolErrorGroup",
    "ToolKind",
    "ToolRegistration",
    "ToolVersion",
    "TraceExportStatus",
    "WorkerHeartbeat",
    "env_var_validator",
    "mcp_server_name_validator",
    "mcp_url_problem",
    "proxy_url_validator",
    "tool_name_validator",
]
