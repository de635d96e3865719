"""Asking a human: the approval and review questions a session's calls raise, and
applying the answers (verdicts, approvals, edits) to the ledger. The payload shapes
are built in :mod:`langgraph_effects.review`."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from . import identity
from .actions import _Call, by_id
from .dispatch import CallDriver
from .errors import (
    DecisionConflictError,
    IllegalTransitionError,
    ReviewError,
    StaleVersionError,
)
from .operation import DECIDABLE, Change, Event, EvidenceKind, Operation, State
from .review import (
    APPROVAL_TYPE,
    ApprovalAnswer,
    ApproveAction,
    DecisionsAnswer,
    EffectAnswer,
    RejectAction,
    ReviewAnswer,
    approval_answer,
    decision_change,
    parse_decision,
    review_decisions,
    review_request,
)

log = logging.getLogger("langgraph_effects")


class HumanQuestions(CallDriver):
    """The questions-to-a-human half of a :class:`~langgraph_effects.engine.Session`."""

    def pending_interrupt(self) -> dict[str, Any] | None:
        """The value for the node's one ``interrupt()``, or ``None`` if nobody needs asking.

        Approvals come first (nothing was sent for those calls yet); reviews next.
        """
        if self._approval:
            return self.approval_payload()
        if self._review:
            return self.review_payload()
        return None

    async def apply_answer(self, answer: Any, *, round_no: int) -> int:
        """Record the answer to the ``round_no``-th interrupt of this node execution.

        A ``{"decisions": [...]}`` answer (LangChain's HITL shape) answers the question
        :meth:`pending_interrupt` asked: the approval while calls await one, else the
        review (mapped onto verdicts by :func:`~langgraph_effects.review.review_decisions`).
        An answer that does not fit it is ignored with a warning and asked again.
        """
        if isinstance(answer, EffectAnswer):
            answer = answer.root
        if isinstance(answer, DecisionsAnswer):
            if self._answered_since(round_no):
                # Positional answers name no operation: on a re-run LangGraph hands the
                # ``round_no``-th answer back to whatever question comes ``round_no``-th,
                # which may list other operations. If this round or a later one already
                # recorded an answer, this one was read in an earlier run (applied, or
                # ignored as not fitting the question then asked): reading it against
                # today's shorter list would settle the wrong operation.
                log.info("HITL answer %d was read in an earlier run; not re-applied", round_no)
                return 0
            if self._approval:
                approval = approval_answer(answer)
                if approval is None:
                    log.warning("a review answer arrived for an approval question; ignored")
                    return 0
                return await self.approve(approval, round_no=round_no)
            try:
                verdicts = review_decisions(answer, self.reviews())
            except ReviewError as error:
                log.warning("review answer not applied: %s", error)
                return 0
            return await self.decide(verdicts, round_no=round_no)
        if isinstance(answer, ApprovalAnswer):
            return await self.approve(answer, round_no=round_no)
        root = answer.root if isinstance(answer, ReviewAnswer) else answer
        return await self.decide(root, round_no=round_no)

    def _answered_since(self, round_no: int) -> bool:
        """Whether a verdict or approval of round ``round_no`` or a later round is already
        recorded on one of this node's operations (decision ids carry the round)."""
        for c in self.calls.values():
            for decision_id, _ in c.op.decisions:
                kind, _, rest = decision_id.partition(":")
                recorded, _, _ = rest.partition(":")
                if kind in ("review", "approval") and recorded.isdigit() and int(recorded) >= round_no:
                    return True
        return False

    def approvals(self) -> list[Operation]:
        """Operations waiting for an approval before their first dispatch, in call order."""
        return [c.op for c in self.calls.values() if c.call_id in self._approval]

    def approval_payload(self) -> dict[str, Any]:
        """The approval ``interrupt()`` value, in LangChain's HITL request shape."""
        gated = [c for c in self.calls.values() if c.call_id in self._approval]
        return {
            "type": APPROVAL_TYPE,
            "action_requests": [
                {
                    "name": c.tool,
                    "args": dict(c.op.args),
                    "description": (
                        f"{c.tool} changes the outside world and needs approval before it is "
                        f"sent (operation {c.op.op_id}, args hash {c.op.args_hash})."
                    ),
                }
                for c in gated
            ],
            "review_configs": [
                {"action_name": c.tool, "allowed_decisions": ["approve", "edit", "reject"]}
                for c in gated
            ],
            "operations": [
                {
                    "operation_id": c.op.op_id,
                    "tool_call_id": c.call_id,
                    "args_hash": c.op.args_hash,
                    "version": c.op.version,
                }
                for c in gated
            ],
        }

    async def approve(self, answer: ApprovalAnswer, *, round_no: int) -> int:
        """Apply approval decisions (positional, as in LangChain's HITL response).

        The approval is consumed in the dispatch commit, bound to the args hash. An
        answer whose length does not match the calls awaiting approval is ignored
        (it answered an earlier question); they are asked about again.
        """
        gated = [c for c in self.calls.values() if c.call_id in self._approval]
        if len(answer.decisions) != len(gated):
            log.warning(
                "approval answer has %d decisions for %d calls awaiting approval; ignored",
                len(answer.decisions),
                len(gated),
            )
            return 0
        applied = 0
        for c, decision in zip(gated, answer.decisions, strict=True):
            approval_id = f"approval:{round_no}:{c.op.op_id}"
            content = decision.model_dump(mode="json")
            if isinstance(decision, ApproveAction):
                await self._send(
                    c,
                    Event.DISPATCH,
                    {"kind": EvidenceKind.APPROVAL, "decision": "approve", "args_hash": c.op.args_hash},
                    decision_id=approval_id,
                    decision=content,
                )
            elif isinstance(decision, RejectAction):
                evidence = {"kind": EvidenceKind.APPROVAL, "decision": "reject", "message": decision.message}
                change = Change(
                    Event.ABANDON, evidence=evidence, decision_id=approval_id, decision=content
                )
                await self._move(c, change)
            else:
                if decision.edited_action.name != c.tool:
                    log.warning(
                        "an edit may not switch %s to %s; ignored", c.tool, decision.edited_action.name
                    )
                    continue
                await self._edit(c, dict(decision.edited_action.args), approval_id, content)
            self._approval.pop(c.call_id, None)
            applied += 1
        return applied

    async def _edit(
        self, c: _Call, args: dict[str, Any], approval_id: str, content: Mapping[str, Any]
    ) -> None:
        """An approver changed the payload: a new payload is a new operation."""
        digest = identity.args_hash(args, key=self.settings.hash_key)
        new_id = identity.edited_operation_id(c.op.op_id, digest)
        provider_key = (
            str(c.effect.key(args, self.config))
            if c.effect.key is not None
            else identity.default_provider_key(new_id)
        )
        edited = dataclasses.replace(
            c.op,
            op_id=new_id,
            args=identity.redact(args, c.effect.secret_fields),
            args_hash=digest,
            provider_key=provider_key,
            extra={**c.op.extra, "edited_from": c.op.op_id},
        )
        stored = by_id(await self.ledger.record_intents([edited]))
        old = c.op
        superseded = Change(
            Event.ABANDON,
            evidence={"kind": EvidenceKind.APPROVAL, "decision": "edit", "superseded_by": new_id},
            decision_id=approval_id,
            decision=content,
        )
        await self.ledger.transition(old.op_id, superseded, expected_version=old.version)
        c.op = edited
        self._stored_or_conflict(c, stored)
        c.args, c.edited = args, True
        if c.conflict is None and c.op.state is State.PENDING:
            await self._send(
                c,
                Event.DISPATCH,
                {"kind": EvidenceKind.APPROVAL, "decision": "edit", "args_hash": digest},
                decision_id=approval_id + ":edited",
                decision=content,
            )

    def edited_args(self, call_id: str) -> dict[str, Any] | None:
        """The arguments to send instead of the model's, when an approver edited them."""
        c = self.calls[call_id]
        return c.args if c.edited else None

    def reviews(self) -> list[Operation]:
        """Operations awaiting a verdict, in tool-call order."""
        return [c.op for c in self.calls.values() if c.call_id in self._review]

    def review_payload(self) -> dict[str, Any]:
        """The ``interrupt()`` value: everything an operator needs to decide."""
        return review_request(self.reviews())

    async def decide(self, answer: Mapping[str, Any], *, round_no: int) -> int:
        """Write the verdicts of an interrupt answer to the ledger, as soon as read.

        Returns how many were applied. Answers for operations that are not awaiting
        review here (stale, or unknown ids) are ignored with a warning; those
        operations, if still unresolved, are asked about again.
        """
        by_op = {c.op.op_id: c for c in self.calls.values()}
        applied = 0
        for op_id, raw in answer.items():
            c = by_op.get(op_id)
            if c is None:
                log.warning("review answer names operation %s, which is not in this node", op_id)
                continue
            decision = parse_decision(raw)
            change = decision_change(
                decision,
                decision_id=f"review:{round_no}:{op_id}",
                actor="operator (interrupt)",
                channel="interrupt",
            )
            if c.op.decisions and any(d == change.decision_id for d, _ in c.op.decisions):
                continue
            if c.op.state not in DECIDABLE:
                log.warning("operation %s is %s, not under review; answer ignored", op_id, c.op.state)
                continue
            try:
                await self._move(c, change, expected=c.op.version)
            except (StaleVersionError, DecisionConflictError, IllegalTransitionError) as error:
                log.warning("verdict for %s not applied: %s", op_id, error)
                c.op = await self._reload(c)
                continue
            self._review.pop(c.call_id, None)
            applied += 1
        return applied
