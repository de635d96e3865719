"""Asking a human: the approval and review questions a session's calls raise, and
applying the answers (verdicts, approvals, edits) to the ledger. The payload shapes
are built in `langgraph_effects._runtime.decisions`.

An `Asker` keeps no state of a session's: the session hands it the calls that
wait (`Waiting`) and files what comes back (`Applied`: the calls an
answer settled, and why part of it was refused)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core import identity
from ..core.operation import DECIDABLE, Change, Event, EvidenceKind, State
from ..errors import ReviewError, TransitionError
from .binding import bind_stored, by_id
from .calls import CallRecord, Settings
from .decisions import (
    APPROVAL_TYPE,
    ApprovalDecision,
    ApproveDecision,
    DecisionsAnswer,
    EditDecision,
    EffectAnswer,
    LandedVerdict,
    RejectDecision,
    ReviewAnswer,
    approval_answer,
    parse_verdict,
    refused_notice,
    review_request,
    review_verdicts,
    shown_key,
    verdict_change,
)
from .dispatch import Dispatcher
from .messages import MAX_EVIDENCE_CHARS, bounded
from .question import Asked, binding

log = logging.getLogger("langgraph_effects")


#: Checks an approver's edited arguments against the tool's schema: why they do not
#: fit (one short line), or ``None`` if they do. Given by the node or middleware.
ArgsCheck = Callable[[str, Mapping[str, Any]], str | None]

_REFUSED = "Your previous answer was not applied (nothing was sent and no operation changed for it): "
_IN_PART = "Part of your previous answer was not applied: "


@dataclass(frozen=True)
class _EditPlan:
    """An approver's edit, checked and derived before anything is written."""

    args: dict[str, Any]
    digest: str
    op_id: str
    provider_key: str


#: One call awaiting approval, its decision, and its edit (checked and derived) if edited.
_Approved = tuple[CallRecord, ApprovalDecision, _EditPlan | None]


@dataclass(frozen=True)
class Waiting:
    """A session's calls (in call order) and those waiting for a human, as the session
    sees them when it asks or reads an answer."""

    calls: list[CallRecord]
    approval: list[CallRecord]
    review: list[CallRecord]
    notice: str | None = None
    """Why the previous answer was refused (or applied only in part), if it was."""


@dataclass
class Applied:
    """What an answer did: the calls it settled (no longer waiting) and, when part or
    all of it was refused, why (opens the next question)."""

    settled: set[str] = field(default_factory=set)
    notice: str | None = None
    count: int = 0


@dataclass(eq=False, kw_only=True)
class Asker:
    """Builds the one question a round raises and applies its answer, for a
    `Session`."""

    dispatcher: Dispatcher
    settings: Settings
    config: Mapping[str, Any]
    check_args: ArgsCheck | None = None
    """How an approver's edit is checked against the tool's schema (``None``: not checked)."""

    def question(self, waiting: Waiting, *, round_no: int) -> dict[str, Any] | None:
        """The value for the node's ``round_no``-th ``interrupt()``, or ``None`` if nobody
        needs asking.

        Approvals come first (nothing was sent for those calls yet); reviews next. If
        the previous answer was refused (or applied only in part), why opens every
        description and is kept under ``refused_answer``. The value carries ``round``
        and, under ``operations``, each operation's id and version: what binds an
        answer to this question (see `langgraph_effects._runtime.question`).
        """
        if waiting.approval:
            value = approval_payload(waiting.approval, waiting.notice)
        elif waiting.review:
            value = review_request([c.op for c in waiting.review], refused=waiting.notice)
        else:
            return None
        value["round"] = round_no
        return value

    async def apply_answer(
        self,
        answer: Any,
        waiting: Waiting,
        *,
        round_no: int,
        question: Mapping[str, Any],
        asked: Asked | None,
    ) -> Applied:
        """Record the answer to the ``round_no``-th interrupt of this node execution.

        ``question`` is what the node asks at that round now; ``asked`` is the question
        the task asked last (`last_asked`).
        An answer is read only against the question it was given for
        (`binding`): one an earlier run
        already read is not read again, and one whose question changed since it was
        asked is refused whole (nothing written) and the new question asked.

        A ``{"decisions": [...]}`` answer (LangChain's HITL shape) answers the question
        `question` asked: the approval while calls await one, else the review
        (mapped onto verdicts by `review_verdicts`).
        A mapping answers by operation id.

        It never raises for what the answer says: LangGraph has already stored it and
        replays it on every resume, so raising would wedge the thread. An answer that
        cannot be applied as a whole is refused before anything is written, and the
        caller asks again in a new round, whose description says why.
        """
        applied = Applied()
        bound = binding(asked, question, round_no, waiting.calls)
        if bound.read_before:
            log.info("answer %d was read in an earlier run; not read again", round_no)
            applied.notice = bound.notice
            return applied
        if bound.changed is not None and not _answered_since(waiting.calls, round_no):
            # (An answer this round already began to record, before a crash, changed the
            # question itself: it is read again below, and skips what it recorded.)
            log.warning("answer %d not applied, asked again: %s", round_no, bound.changed)
            applied.notice = _REFUSED + bound.changed
            return applied
        if isinstance(answer, EffectAnswer):
            answer = answer.root
        try:
            applied.count = await self._apply(answer, waiting, applied, round_no=round_no)
        except ReviewError as error:
            reason = bounded(str(error), MAX_EVIDENCE_CHARS // 4)
            log.warning("answer %d not applied, asked again: %s", round_no, reason)
            applied.notice = _REFUSED + reason
        return applied

    async def _apply(self, answer: Any, waiting: Waiting, applied: Applied, *, round_no: int) -> int:
        if isinstance(answer, DecisionsAnswer):
            if _answered_since(waiting.calls, round_no):
                # Positional answers name no operation. A run that began to record this
                # one crashed before asking again (or an older version asked the
                # question, without a round): the question left now is not the one it
                # answered, and mapping it by position would settle the wrong operation.
                # What it did not record is asked again.
                log.info("HITL answer %d was read in an earlier run; not re-applied", round_no)
                return 0
            if waiting.approval:
                plan = self._approval_plan(answer, waiting.approval)
                return await self.approve(plan, applied, round_no=round_no)
            verdicts = review_verdicts(answer, [c.op for c in waiting.review])
            return await self.apply_verdicts(verdicts, waiting, applied, round_no=round_no)
        if isinstance(answer, ReviewAnswer):
            answer = answer.root
        if not isinstance(answer, Mapping):
            raise ReviewError(
                f"an answer must be {{'decisions': [...]}} or a mapping of operation id to "
                f"verdict, not {type(answer).__name__}"
            )
        return await self.apply_verdicts(answer, waiting, applied, round_no=round_no)

    def _approval_plan(self, answer: DecisionsAnswer, gated: list[CallRecord]) -> list[_Approved]:
        """Each call awaiting approval with its decision (and its edit, checked and
        derived), or `ReviewError` if the answer does not fit: nothing written."""
        approval = approval_answer(answer)
        if approval is None:
            raise ReviewError(
                "this question asks to approve calls before they are sent: answer approve, "
                "edit or reject for each (respond belongs to a review of a call already sent)"
            )
        if len(approval.decisions) != len(gated):
            raise ReviewError(
                f"the answer has {len(approval.decisions)} decision(s) for {len(gated)} call(s) "
                "awaiting approval; give one per entry of 'action_requests', in the same order"
            )
        return [
            (c, d, self._edit_plan(c, d) if isinstance(d, EditDecision) else None)
            for c, d in zip(gated, approval.decisions, strict=True)
        ]

    def _edit_plan(self, c: CallRecord, decision: EditDecision) -> _EditPlan:
        """An approver's edit, checked against the tool's schema and its provider key
        derived, before anything is recorded: an edit that cannot be sent is refused."""
        name = decision.edited_action.name
        if name != c.tool:
            raise ReviewError(
                f"an edit may not switch {c.tool} to {bounded(name, 80)!r}; edit {c.tool}'s "
                "arguments, or reject it"
            )
        args = dict(decision.edited_action.args)
        problem = self.check_args(c.tool, args) if self.check_args is not None else None
        if problem is not None:
            raise ReviewError(
                f"the edited arguments do not fit {c.tool}'s schema ({bounded(problem, 600)}); "
                "edit them again, or approve or reject the call as it is"
            )
        identifying = identity.identifying_args(args, c.effect.key_argument)
        digest = identity.args_hash(identifying, key=self.settings.hash_key)
        new_id = identity.edited_operation_id(c.op.op_id, digest)
        try:
            key = (
                str(c.effect.key(args, self.config))
                if c.effect.key is not None
                else identity.default_provider_key(new_id)
            )
        except Exception as error:
            raise ReviewError(
                f"{c.tool}'s provider key cannot be made from the edited arguments "
                f"({type(error).__name__}: {bounded(str(error), 300)})"
            ) from error
        return _EditPlan(args, digest, new_id, key)

    async def approve(self, plan: list[_Approved], applied: Applied, *, round_no: int) -> int:
        """Apply approval decisions (positional, as in LangChain's HITL response), as
        checked by `_approval_plan`. The approval is consumed in the dispatch
        commit, bound to the args hash."""
        for c, decision, edit in plan:
            approval_id = f"approval:{round_no}:{c.op.op_id}"
            content = decision.model_dump(mode="json")
            if isinstance(decision, ApproveDecision):
                await self.dispatcher.send(
                    c,
                    Event.DISPATCH,
                    {"kind": EvidenceKind.APPROVAL, "decision": "approve", "args_hash": c.op.args_hash},
                    decision_id=approval_id,
                    decision=content,
                )
            elif isinstance(decision, RejectDecision):
                evidence = {"kind": EvidenceKind.APPROVAL, "decision": "reject", "message": decision.message}
                change = Change(
                    Event.ABANDON, evidence=evidence, decision_id=approval_id, decision=content
                )
                await self.dispatcher.move(c, change)
            elif edit is not None:
                await self._edit(c, edit, approval_id, content)
            applied.settled.add(c.call_id)
        return len(plan)

    async def _edit(
        self, c: CallRecord, edit: _EditPlan, approval_id: str, content: Mapping[str, Any]
    ) -> None:
        """An approver changed the payload: a new payload is a new operation."""
        edited = dataclasses.replace(
            c.op,
            op_id=edit.op_id,
            args=identity.redact(edit.args, c.effect.secret_fields),
            args_hash=edit.digest,
            provider_key=edit.provider_key,
            extra={**c.op.extra, "edited_from": c.op.op_id},
        )
        ledger = self.dispatcher.ledger
        stored = by_id(await ledger.record_intents([edited]))
        old = c.op
        superseded = Change(
            Event.ABANDON,
            evidence={"kind": EvidenceKind.APPROVAL, "decision": "edit", "superseded_by": edit.op_id},
            decision_id=approval_id,
            decision=content,
        )
        await ledger.transition(old.op_id, superseded, expected_version=old.version)
        c.op = edited
        bind_stored(c, stored)
        c.args, c.edited = edit.args, True
        if c.conflict is None and c.op.state is State.PENDING:
            await self.dispatcher.send(
                c,
                Event.DISPATCH,
                {"kind": EvidenceKind.APPROVAL, "decision": "edit", "args_hash": edit.digest},
                decision_id=approval_id + ":edited",
                decision=content,
            )

    async def apply_verdicts(
        self, answer: Mapping[str, Any], waiting: Waiting, applied: Applied, *, round_no: int
    ) -> int:
        """Write the verdicts of an interrupt answer to the ledger, as soon as read.

        Every verdict is validated before any is written (`ReviewError`:
        nothing applied). Returns how many were applied. Verdicts for operations that
        are not awaiting review here (stale, or unknown ids) are not applied; if none
        is, the answer is refused (`ReviewError`), else why opens the next
        question. Operations still unresolved are asked about again.
        """
        if not answer:
            raise ReviewError("the answer names no operation; key each verdict by its operation id")
        parsed = {op_id: parse_verdict(raw) for op_id, raw in answer.items()}
        by_op = {c.op.op_id: c for c in waiting.calls}
        self._check_undo(parsed, by_op)
        problems: list[str] = []
        count = 0
        for op_id, verdict in parsed.items():
            c = by_op.get(op_id)
            if c is None:
                problems.append(f"operation {shown_key(op_id)} is not in this question")
                continue
            change = verdict_change(
                verdict,
                decision_id=f"review:{round_no}:{op_id}",
                actor="operator (interrupt)",
                channel="interrupt",
            )
            if c.op.decisions and any(d == change.decision_id for d, _ in c.op.decisions):
                continue  # read again after a crash: already recorded
            if c.op.state not in DECIDABLE:
                problems.append(f"operation {op_id} is {c.op.state.value}, not under review")
                continue
            try:
                await self.dispatcher.move(c, change, expected=c.op.version)
            except TransitionError as error:
                problems.append(f"the verdict for {op_id} was not recorded ({error})")
                c.op = await self.dispatcher.reload(c)
                continue
            # A verdict asking for the undo is its order: the call's replay in the next
            # round names it due (dispatch.Due) and the session runs it, as it would on
            # a resume after a crash.
            applied.settled.add(c.call_id)
            count += 1
        if problems:
            text = bounded("; ".join(problems), MAX_EVIDENCE_CHARS // 4)
            if not count:
                raise ReviewError(text)
            log.warning("part of answer %d not applied: %s", round_no, text)
            applied.notice = _IN_PART + text
        return count

    def _check_undo(self, parsed: Mapping[str, Any], by_op: Mapping[str, CallRecord]) -> None:
        """An answer asking to undo an effect whose tool declares no undo is refused whole."""
        for op_id, verdict in parsed.items():
            c = by_op.get(op_id)
            if c is None or not (isinstance(verdict, LandedVerdict) and verdict.undo):
                continue
            if self.settings.effect_for(c.tool).undo is None:
                raise ReviewError(
                    f"{c.tool} declares no undo (Effect(compensate=...)): operation {op_id} cannot "
                    "be undone automatically; answer 'landed' without 'undo' and undo it at the "
                    "provider by hand"
                )


def _answered_since(calls: list[CallRecord], round_no: int) -> bool:
    """Whether a verdict or approval of round ``round_no`` or a later round is already
    recorded on one of this node's operations (decision ids carry the round)."""
    for c in calls:
        for decision_id, _ in c.op.decisions:
            kind, _, rest = decision_id.partition(":")
            recorded, _, _ = rest.partition(":")
            if kind in ("review", "approval") and recorded.isdigit() and int(recorded) >= round_no:
                return True
    return False


def approval_payload(gated: list[CallRecord], refused: str | None) -> dict[str, Any]:
    """The approval ``interrupt()`` value, in LangChain's HITL request shape."""
    notice = refused_notice(refused)
    request: dict[str, Any] = {
        "type": APPROVAL_TYPE,
        "action_requests": [
            {
                "name": c.tool,
                "args": dict(c.op.args),
                "description": notice + (
                    f"{c.tool} is over a budget ({c.refusal.reason}): approve to send it once "
                    f"anyway (it is counted), or reject it (operation {c.op.op_id}, args hash "
                    f"{c.op.args_hash})."
                    if c.refusal is not None
                    else f"{c.tool} changes the outside world and needs approval before it is "
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
    if refused:
        request["refused_answer"] = refused
    return request
