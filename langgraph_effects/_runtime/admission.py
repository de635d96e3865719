"""Budgets and circuit breakers at run time: a send admitted (or refused) in its
transition's own transaction, and a refusal answered and recorded.

Only calls whose [`Effect`][langgraph_effects.Effect] declares controls
come here; the decisions themselves are pure (`langgraph_effects.core.controls`),
the transaction is `langgraph_effects.ledger.controls.controlled_plan`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from langchain_core.messages import ToolMessage

from ..core.controls import Call, Refusal
from ..core.operation import Change, Event, EvidenceKind, Operation, State
from ..ledger.base import DEFAULT_ACTOR, Ledger
from ..ledger.controls import controlled_plan
from . import messages
from .calls import CallRecord

Move = Callable[..., Awaitable[bool]]


async def controlled_move(
    ledger: Ledger, c: CallRecord, change: Change, version: int, before: Operation | None, run_id: str | None
) -> bool:
    """One transition of a call with budgets or a circuit breaker: admitted (or its
    outcome recorded on them) in the transition's own transaction. A refused send
    moves nothing and leaves the refusal on ``c``."""
    op, where, controls = c.op, ledger.where, c.effect.controls
    assert controls is not None
    call = Call(op.op_id, op.thread_id, op.tenant, c.args, run_id)
    moved = await ledger.transact(
        lambda: controlled_plan(op.op_id, change, version, DEFAULT_ACTOR, where, before, controls, call)
    )
    if isinstance(moved, Refusal):
        c.refusal = moved
        return False
    c.op = moved.op
    return True


async def record_refusal(c: CallRecord, refusal: Refusal, move: Move) -> ToolMessage:
    """The message a refused send answers with; recorded (``abandoned``, the refusal
    as its result) when the call had never been sent, so a resume answers the same."""
    message = messages.refused(c.tool, c.call_id, refusal)
    if c.op.state is State.PENDING:
        kind, blob = messages.dump(message)
        content = {"decision": "refused", "by": f"{refusal.kind} {refusal.name}"}
        await move(
            c,
            Change(
                Event.ABANDON,
                evidence={"kind": EvidenceKind.CONTROL, "control": f"{refusal.kind}:{refusal.name}",
                          "reason": refusal.reason},
                result_type=kind,
                result=blob,
                decision_id=f"refused:{c.op.version}",
                decision=content,
            ),
            expected=c.op.version,
        )
    return message
