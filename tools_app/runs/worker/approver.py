"""The engine's approver for a run: the stored decisions answer it (see runs.debugger.approvals)."""

from __future__ import annotations

import json

from asgiref.sync import sync_to_async

from tools_app.engine import ApprovalPending, ToolErrorContext, ToolExecutionRequest
from tools_app.models import CallDecision, DecisionKind, ToolCall
from tools_app.runs.store.sanitize import fit_column


class RunApprover:
    """The engine's approver for one run: answers from the stored decisions, and raises
    ApprovalPending for a call nobody has decided yet (the run then waits)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    async def __call__(self, request: ToolExecutionRequest,
                       context: ToolErrorContext) -> bool | str | ToolExecutionRequest:
        decision = await sync_to_async(self._stored)(request.id, context.round_index)
        if decision is None:
            raise ApprovalPending(request.id)
        if decision.decision == DecisionKind.APPROVE:
            return True
        if decision.decision == DecisionKind.EDIT:
            return request.model_copy(update={"arguments": json.dumps(decision.arguments)})
        return f"rejected by {decision.decided_by_label}: {decision.message or 'no reason given'}"

    def _stored(self, call_id: str, round_index: int) -> CallDecision | None:
        return CallDecision.objects.filter(
            run_id=self.run_id, tool_call__round__index=round_index,
            tool_call__call_id=fit_column(ToolCall, "call_id", call_id),
        ).first()


