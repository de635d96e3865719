"""Operator verdicts: their shape, validation, and how they become ledger changes.

One module serves both ways a verdict arrives, so they behave the same:
through ``interrupt()`` / ``Command(resume=...)`` inside the graph, and out of band
through :mod:`langgraph_effects.operator` (the console). Either way the decision is
written to the ledger as a compare-and-set transition with a decision id, and the
graph, on its next run, answers the model from the ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, TypeAdapter, ValidationError, field_validator

from .errors import ReviewError
from .messages import check_receipt, check_text
from .operation import Change, Event

REVIEW_TYPE = "effect_review"


class LandedDecision(BaseModel):
    """The operator checked: the effect landed. ``receipt`` is what the provider shows."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["landed"] = "landed"
    receipt: Any = None

    @field_validator("receipt")
    @classmethod
    def _bounded_receipt(cls, value: Any) -> Any:
        return check_receipt(value)  # at most MAX_RECEIPT_BYTES: refused, nothing written


class NotLandedDecision(BaseModel):
    """The operator checked: it did not land. It is sent again under the same key."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["not_landed"] = "not_landed"


class AbandonDecision(BaseModel):
    """Close the operation without confirming the effect; the model is told not to retry."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["abandon"] = "abandon"
    reason: str = Field(min_length=1)

    @field_validator("reason")
    @classmethod
    def _bounded_reason(cls, value: str) -> str:
        return check_text(value, what="reason")  # at most MAX_EVIDENCE_CHARS


Decision = Annotated[
    LandedDecision | NotLandedDecision | AbandonDecision, Field(discriminator="type")
]
_DECISION: TypeAdapter[LandedDecision | NotLandedDecision | AbandonDecision] = TypeAdapter(
    Decision
)


class ReviewAnswer(RootModel[dict[str, Decision]]):
    """The resume value of an ``effect_review`` interrupt: operation id -> decision."""


APPROVAL_TYPE = "effect_approval"


class EditedAction(BaseModel):
    """LangChain HITL shape: the tool and the arguments an approver changed."""

    name: str
    args: dict[str, Any]


class ApproveAction(BaseModel):
    """Approve the call as the model asked for it."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["approve"] = "approve"


class EditAction(BaseModel):
    """Approve a changed payload: a new payload, so a new operation."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["edit"] = "edit"
    edited_action: EditedAction


class RejectAction(BaseModel):
    """Do not send; the model is told, with the approver's message."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["reject"] = "reject"
    message: str | None = None


ApprovalDecision = Annotated[ApproveAction | EditAction | RejectAction, Field(discriminator="type")]


class ApprovalAnswer(BaseModel):
    """The resume value of an ``effect_approval`` interrupt, in LangChain's HITL shape:
    one decision per entry of ``action_requests``, in the same order."""

    model_config = ConfigDict(extra="forbid")
    decisions: list[ApprovalDecision]


class EffectAnswer(RootModel[ApprovalAnswer | ReviewAnswer]):
    """What the node's interrupt accepts: an approval answer or a review answer (an
    answer of the other kind, replayed from an earlier question, is told apart)."""


def parse_decision(value: Any) -> LandedDecision | NotLandedDecision | AbandonDecision:
    """Validate one decision (a mapping like ``{"type": "landed", "receipt": ...}``)."""
    if isinstance(value, LandedDecision | NotLandedDecision | AbandonDecision):
        return value
    try:
        return _DECISION.validate_python(value)
    except ValidationError as error:
        raise ReviewError(
            f"not a valid decision: {value!r}. Use {{'type': 'landed', 'receipt': ...}}, "
            "{'type': 'not_landed'} or {'type': 'abandon', 'reason': '...'}"
            f" ({error.error_count()} problem(s): {error.errors()[0]['msg']})"
        ) from error


_EVENTS: Mapping[str, Event] = {
    "landed": Event.LANDED,
    "not_landed": Event.NOT_LANDED,
    "abandon": Event.ABANDON,
}


def decision_change(
    decision: LandedDecision | NotLandedDecision | AbandonDecision,
    *,
    decision_id: str,
    actor: str,
    channel: Literal["interrupt", "console", "api"],
) -> Change:
    """The ledger change that records ``decision`` (a verdict transition)."""
    content = decision.model_dump(mode="json")
    evidence: dict[str, Any] = {"kind": "verdict", "decision": decision.type, "actor": actor}
    evidence["channel"] = channel
    if isinstance(decision, LandedDecision):
        evidence["receipt"] = content.get("receipt")
    if isinstance(decision, AbandonDecision):
        evidence["reason"] = decision.reason
    return Change(
        event=_EVENTS[decision.type],
        evidence=evidence,
        decision_id=decision_id,
        decision=content,
    )


def resume_command(interrupts: Any, decisions: Mapping[str, Any]) -> Any:
    """Build the ``Command(resume=...)`` that answers pending effect reviews.

    ``interrupts`` is what LangGraph reports as pending (``state.interrupts`` from
    ``graph.get_state(config)``, or ``result["__interrupt__"]``); ``decisions`` maps
    operation id -> decision (``{"type": "landed", "receipt": ...}``,
    ``{"type": "not_landed"}``, ``{"type": "abandon", "reason": ...}``). Each pending
    ``effect_review`` interrupt (one per task: ``create_agent`` runs one task per call)
    gets the decisions for the operations it lists, keyed by its interrupt id, so
    nobody hand-assembles interrupt ids. Other interrupts are left unanswered.
    """
    from langgraph.types import Command

    by_interrupt: dict[str, dict[str, Any]] = {}
    unknown = set(decisions)
    for pending in interrupts or ():
        value = getattr(pending, "value", None)
        if not (isinstance(value, Mapping) and value.get("type") == REVIEW_TYPE):
            continue
        listed = [entry["operation_id"] for entry in value.get("operations", ())]
        chosen = {
            op_id: parse_decision(decisions[op_id]).model_dump(mode="json")
            for op_id in listed
            if op_id in decisions
        }
        unknown -= set(chosen)
        if chosen:
            by_interrupt[str(pending.id)] = chosen
    if unknown:
        raise ReviewError(
            f"no pending effect review lists {sorted(unknown)}; check the operation ids "
            "against the interrupt's 'operations'"
        )
    if not by_interrupt:
        raise ReviewError("there is no pending effect review to answer")
    return Command(resume=by_interrupt)
