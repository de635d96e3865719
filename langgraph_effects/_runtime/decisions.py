"""A human's decisions: the shapes of verdicts and of approval decisions, the answers
that carry them, the questions that ask for them (the ``effect_review`` value), and
the ledger change a verdict becomes. `langgraph_effects._runtime.asker` asks and
applies them.

The review interrupt carries LangChain's HITL request shape too (``action_requests``,
``review_configs``), so Agent Inbox and LangGraph Studio can show it, and accepts
their ``{"decisions": [...]}`` answers (`HITL_REVIEW_DECISIONS`).

One module serves both ways a verdict arrives, so they behave the same:
through ``interrupt()`` / ``Command(resume=...)`` inside the graph, and out of band
through `langgraph_effects._runtime.operator` (the console). Either way the verdict is
written to the ledger as a compare-and-set transition with a decision id, and the
graph, on its next run, answers the model from the ledger.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from ..core.operation import KEYED_CONTRACTS, Change, Event, EvidenceKind, Operation, provider_check
from ..errors import OversizedError, ReviewError
from .messages import MAX_EVIDENCE_CHARS, MAX_RECEIPT_BYTES, bounded, check_receipt, check_text, encodable
from .pending import pending_interrupts

REVIEW_TYPE = "effect_review"

#: The JSON-schema limits a client sees for an operator's text (a reason, a note) and
#: for a ``respond`` message (the receipt, measured again as JSON bytes when read).
_TEXT_LIMIT: dict[str, Any] = {"maxLength": MAX_EVIDENCE_CHARS}
_RECEIPT_LIMIT: dict[str, Any] = {
    "maxLength": MAX_RECEIPT_BYTES,
    "description": f"at most {MAX_RECEIPT_BYTES:,} bytes as JSON (UTF-8)",
}


class _Strict(BaseModel):
    """An answer shape that refuses unknown fields (a typo is an error, not ignored)."""

    model_config = ConfigDict(extra="forbid")


class LandedVerdict(_Strict):
    """The operator checked: the effect landed. ``receipt`` is what the provider shows."""

    type: Literal["landed"] = "landed"
    receipt: Any = Field(
        default=None,
        json_schema_extra={"description": f"at most {MAX_RECEIPT_BYTES:,} bytes as JSON (UTF-8)"},
    )
    undo: bool = Field(
        default=False,
        description="It landed and must not stand: run its undo (Effect(compensate=...)) once.",
    )

    @field_validator("receipt")
    @classmethod
    def _bounded_receipt(cls, value: Any) -> Any:
        return check_receipt(value)  # at most MAX_RECEIPT_BYTES: refused, nothing written


class NotLandedVerdict(_Strict):
    """The operator checked: it did not land. It is sent again under the same key."""

    type: Literal["not_landed"] = "not_landed"


class AbandonVerdict(_Strict):
    """Close the operation without confirming the effect; the model is told not to retry."""

    type: Literal["abandon"] = "abandon"
    reason: str = Field(min_length=1, json_schema_extra=_TEXT_LIMIT)

    @field_validator("reason")
    @classmethod
    def _bounded_reason(cls, value: str) -> str:
        return check_text(value, what="reason")  # at most MAX_EVIDENCE_CHARS


AnyVerdict = Annotated[
    LandedVerdict | NotLandedVerdict | AbandonVerdict, Field(discriminator="type")
]
"""A verdict: ``landed``, ``not_landed`` or ``abandon`` (told apart by ``type``)."""
_VERDICT: TypeAdapter[LandedVerdict | NotLandedVerdict | AbandonVerdict] = TypeAdapter(
    AnyVerdict
)


class ReviewAnswer(RootModel[dict[str, AnyVerdict]]):
    """The resume value of an ``effect_review`` interrupt: operation id -> verdict."""


APPROVAL_TYPE = "effect_approval"


class EditedCall(BaseModel):
    """The call an ``edit`` decision sends instead (LangChain HITL's ``edited_action``):
    the tool and the arguments as the approver changed them."""

    name: str
    args: dict[str, Any]


class ApproveDecision(_Strict):
    """Approve the call as the model asked for it."""

    type: Literal["approve"] = "approve"


class EditDecision(_Strict):
    """Approve the call with the changes in ``edited_action``: a new payload, so a new
    operation."""

    type: Literal["edit"] = "edit"
    edited_action: EditedCall


class RejectDecision(_Strict):
    """Do not send; the model is told, with the approver's message."""

    type: Literal["reject"] = "reject"
    message: Annotated[str, Field(json_schema_extra=_TEXT_LIMIT)] | None = None

    @field_validator("message")
    @classmethod
    def _bounded_message(cls, value: str | None) -> str | None:
        return value if value is None else check_text(value, what="reject message")


ApprovalDecision = Annotated[ApproveDecision | EditDecision | RejectDecision, Field(discriminator="type")]


class ApprovalAnswer(_Strict):
    """The resume value of an ``effect_approval`` interrupt, in LangChain's HITL shape:
    one decision per entry of ``action_requests``, in the same order."""

    decisions: list[ApprovalDecision]


class RespondDecision(_Strict):
    """LangChain HITL ``respond``: the reviewer answers on behalf of the tool. In a
    review it means *it landed*; ``message`` is what the provider shows (a JSON text
    is read as the receipt's value)."""

    type: Literal["respond"] = "respond"
    message: str = Field(json_schema_extra=_RECEIPT_LIMIT)

    @field_validator("message")
    @classmethod
    def _bounded_message(cls, value: str) -> str:
        if len(value) > MAX_RECEIPT_BYTES:  # surely over as JSON bytes; measured exactly when read
            raise OversizedError(
                "respond message", len(value), MAX_RECEIPT_BYTES, "characters",
                "Give the provider's id and the few fields that prove the effect landed.",
            )
        return value


#: One entry of a ``{"decisions": [...]}`` answer: an approval's decision or a verdict.
AnyDecision = Annotated[
    ApproveDecision
    | EditDecision
    | RejectDecision
    | RespondDecision
    | LandedVerdict
    | NotLandedVerdict
    | AbandonVerdict,
    Field(discriminator="type"),
]


class DecisionsAnswer(_Strict):
    """An answer in LangChain's HITL response shape, ``{"decisions": [...]}``: one
    decision per entry of the interrupt's ``action_requests``, in the same order.

    It answers whichever question the interrupt asked: an approval (``approve``,
    ``edit``, ``reject``) or a review (see `review_verdicts`)."""

    decisions: list[AnyDecision]


class EffectAnswer(RootModel[DecisionsAnswer | ReviewAnswer]):
    """What the node's interrupt accepts: ``{"decisions": [...]}`` (LangChain's HITL
    shape, for approvals and reviews) or a review answer keyed by operation id (an
    answer of the other kind, replayed from an earlier question, is told apart).

    It is the interrupt's ``response_schema``: LangGraph refuses an answer that fails
    it before storing anything (the same question stays open), and clients such as
    Agent Inbox and Studio see the limits (``maxLength``) in its JSON schema. Text
    that is not valid Unicode (a lone surrogate) is refused too: a checkpoint cannot
    store it."""

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, value: Any) -> Any:
        where = _invalid_text(value, "answer")
        if where is not None:
            raise ValueError(
                f"{where} is not valid text (an unpaired surrogate); it cannot be stored. "
                "Send the answer as valid UTF-8."
            )
        return value


def _invalid_text(value: Any, where: str, depth: int = 0) -> str | None:
    """Where in ``value`` a string (or a mapping key) holds an unpaired surrogate."""
    if isinstance(value, str):
        return None if encodable(value) else where
    if depth > 64:
        return None  # deeper than any answer shape; the schema refuses it anyway
    if isinstance(value, Mapping):
        for key, item in value.items():
            name = f"{where}[{shown_key(key)}]"
            if isinstance(key, str) and not encodable(key):
                return f"a key of {where}"
            found = _invalid_text(item, name, depth + 1)
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = _invalid_text(item, f"{where}[{i}]", depth + 1)
            if found is not None:
                return found
    return None


def shown_key(key: Any) -> str:
    """A key of an answer as a message may show it: short, quoted, always valid text."""
    text = key if isinstance(key, str) else repr(key)
    return repr(bounded(text.encode("utf-8", "backslashreplace").decode(), 60))


def approval_answer(answer: DecisionsAnswer) -> ApprovalAnswer | None:
    """``answer`` as an approval answer, or ``None`` if it holds a decision that is not
    ``approve``/``edit``/``reject`` (it answered a review, not this approval)."""
    if not all(isinstance(d, ApproveDecision | EditDecision | RejectDecision) for d in answer.decisions):
        return None
    return ApprovalAnswer.model_validate({"decisions": [d.model_dump() for d in answer.decisions]})


def parse_verdict(value: Any) -> LandedVerdict | NotLandedVerdict | AbandonVerdict:
    """Validate one verdict (a mapping like ``{"type": "landed", "receipt": ...}``)."""
    if isinstance(value, LandedVerdict | NotLandedVerdict | AbandonVerdict):
        return value
    try:
        return _VERDICT.validate_python(value)
    except ValidationError as error:
        raise ReviewError(
            f"not a valid verdict: {value!r}. Use {{'type': 'landed', 'receipt': ...}}, "
            "{'type': 'not_landed'} or {'type': 'abandon', 'reason': '...'}"
            f" ({error.error_count()} problem(s): {error.errors()[0]['msg']})"
        ) from error


_EVENTS: Mapping[str, Event] = {
    "landed": Event.LANDED,
    "not_landed": Event.NOT_LANDED,
    "abandon": Event.ABANDON,
}


def verdict_content(decision: BaseModel) -> dict[str, Any]:
    """A verdict or a decision as JSON, ``undo`` only when set: a verdict without it reads (and
    digests) as it did before compensation existed."""
    content: dict[str, Any] = decision.model_dump(mode="json")
    if content.get("undo") is False:
        content.pop("undo")
    return content


def verdict_change(
    verdict: LandedVerdict | NotLandedVerdict | AbandonVerdict,
    *,
    decision_id: str,
    actor: str,
    channel: Literal["interrupt", "console", "api"],
) -> Change:
    """The ledger change that records ``verdict`` (a verdict transition)."""
    content = verdict_content(verdict)
    evidence: dict[str, Any] = {"kind": EvidenceKind.VERDICT, "decision": verdict.type, "actor": actor}
    evidence["channel"] = channel
    if isinstance(verdict, LandedVerdict):
        evidence["receipt"] = content.get("receipt")
        if verdict.undo:
            evidence["undo"] = True
    if isinstance(verdict, AbandonVerdict):
        evidence["reason"] = verdict.reason
    return Change(
        event=_EVENTS[verdict.type],
        evidence=evidence,
        decision_id=decision_id,
        decision=content,
    )


#: What a review offers in LangChain's HITL vocabulary (Agent Inbox and LangGraph
#: Studio render these), and the verdict each one records. ``edit`` is not offered
#: (an edited payload is a new operation, which only an approval can create), nor is
#: Agent Inbox's "ignore", which would end the thread with the operation unresolved.
HITL_REVIEW_DECISIONS: Mapping[str, str] = {
    "respond": "landed",
    "approve": "not_landed",
    "reject": "abandon",
}

_REJECTED_WITHOUT_REASON = "rejected by the reviewer"


def review_entry(op: Operation) -> dict[str, Any]:
    """One operation as an operator sees it in a review (arguments redacted)."""
    return {
        "operation_id": op.op_id,
        "tool": op.tool,
        "tool_call_id": op.tool_call_id,
        "args": dict(op.args),
        "args_hash": op.args_hash,
        "provider_key": op.provider_key,
        "contract": op.contract,
        "state": op.state.value,
        "version": op.version,
        "attempts": op.attempts,
        "evidence": dict(op.evidence or {}),
        "thread_id": op.thread_id,
        "tenant": op.tenant,
        "policy_version": op.policy_version,
        "allowed_verdicts": ["landed", "not_landed", "abandon"],
    }


def refused_notice(notice: str | None) -> str:
    """What opens every description of a question asked again because its previous
    answer was refused or applied only in part (empty if it was not)."""
    return f"{notice}\n" if notice else ""


def review_description(op: Operation, notice: str | None = None) -> str:
    """What a reviewer reads in Agent Inbox / Studio: why it is asked, the evidence,
    and what each button records (after why the previous answer was refused, if so)."""
    evidence = json.dumps(dict(op.evidence or {}), sort_keys=True, default=str)
    tries = "1 attempt" if op.attempts == 1 else f"{op.attempts} attempts"
    again = " under the same provider key" if op.contract in KEYED_CONTRACTS else ""
    return refused_notice(notice) + (
        f"{op.tool} may or may not have reached the provider, and the evidence cannot settle "
        f"it (contract: {op.contract}; the evidence below says why). {provider_check(op)} Then answer.\n"
        "- respond: it landed; your message is the receipt (what the provider shows). "
        "The model is told the effect landed.\n"
        f"- approve: it did not land; send it again{again}.\n"
        "- reject: abandon it; the model is told it was not confirmed and must not retry "
        "unless asked.\n"
        f"Operation {op.op_id}, version {op.version}, state {op.state.value}, {tries}, "
        f"args hash {op.args_hash}. Evidence: {evidence}"
    )


def review_request(ops: Sequence[Operation], refused: str | None = None) -> dict[str, Any]:
    """The ``effect_review`` interrupt value for ``ops`` (in tool-call order).

    It carries our own ``operations`` list (everything an operator needs, answered
    by operation id) and, for Agent Inbox and LangGraph Studio, LangChain's HITL
    request shape: one ``action_requests`` entry per operation (its tool, redacted
    arguments, the evidence in the description) and a ``review_configs`` entry with
    the decisions allowed (`HITL_REVIEW_DECISIONS`). ``refused`` is why the
    previous answer was not applied: it opens each description and is kept under
    ``refused_answer``.
    """
    request: dict[str, Any] = {
        "type": REVIEW_TYPE,
        "action_requests": [
            {"name": op.tool, "args": dict(op.args), "description": review_description(op, refused)}
            for op in ops
        ],
        "review_configs": [
            {"action_name": op.tool, "allowed_decisions": list(HITL_REVIEW_DECISIONS)} for op in ops
        ],
        "operations": [review_entry(op) for op in ops],
    }
    if refused:
        request["refused_answer"] = refused
    return request


def _receipt(message: str) -> Any:
    try:
        return json.loads(message)
    except ValueError:
        return message


def review_verdict(decision: Any) -> LandedVerdict | NotLandedVerdict | AbandonVerdict:
    """One decision of a ``{"decisions": [...]}`` answer as a verdict:
    ``respond`` -> landed (its message is the receipt), ``approve`` -> not landed,
    ``reject`` -> abandon (its message is the reason); our own ``landed`` /
    ``not_landed`` / ``abandon`` are taken as they are. ``edit`` is refused."""
    if isinstance(decision, LandedVerdict | NotLandedVerdict | AbandonVerdict):
        return decision
    try:
        if isinstance(decision, RespondDecision):
            return LandedVerdict(receipt=check_receipt(_receipt(decision.message)))
        if isinstance(decision, ApproveDecision):
            return NotLandedVerdict()
        if isinstance(decision, RejectDecision):
            reason = check_text(decision.message or _REJECTED_WITHOUT_REASON, what="reject message")
            return AbandonVerdict(reason=reason)
    except OversizedError as error:
        raise ReviewError(f"{error.overage}; shorten it") from error
    raise ReviewError(
        f"a review cannot take {getattr(decision, 'type', decision)!r}: answer with respond "
        "(it landed), approve (it did not: send it again under the same key) or reject "
        "(abandon it); an edited payload needs a new tool call"
    )


def review_verdicts(
    answer: DecisionsAnswer, ops: Sequence[Operation]
) -> dict[str, LandedVerdict | NotLandedVerdict | AbandonVerdict]:
    """Map a ``{"decisions": [...]}`` answer onto the operations a review listed, by
    position (as LangChain's HITL response does). Raises `ReviewError` when the
    count differs or a decision cannot be a verdict."""
    if len(answer.decisions) != len(ops):
        raise ReviewError(
            f"the answer has {len(answer.decisions)} decision(s) for {len(ops)} operation(s) "
            "under review; give one per entry of 'action_requests', in the same order"
        )
    return {op.op_id: review_verdict(d) for op, d in zip(ops, answer.decisions, strict=True)}


def resume_command(interrupts: Any, verdicts: Mapping[str, Any]) -> Any:
    """Build the ``Command(resume=...)`` that answers pending effect reviews.

    ``interrupts`` is what LangGraph reports as pending (``state.interrupts`` from
    ``graph.get_state(config)``, or ``result["__interrupt__"]``), or the state itself:
    then a thread with no checkpoint (a mistyped ``thread_id``) or not paused raises
    `NothingToResumeError` saying so; ``verdicts`` maps
    operation id -> verdict (``{"type": "landed", "receipt": ...}``,
    ``{"type": "not_landed"}``, ``{"type": "abandon", "reason": ...}``). Each pending
    ``effect_review`` interrupt (one per task: ``create_agent`` runs one task per call)
    gets the verdicts for the operations it lists, keyed by its interrupt id, so
    nobody hand-assembles interrupt ids. Other interrupts are left unanswered.
    """
    from langgraph.types import Command

    by_interrupt: dict[str, dict[str, Any]] = {}
    unknown = set(verdicts)
    reviews = 0
    for pending in pending_interrupts(interrupts) or ():
        value = getattr(pending, "value", None)
        if not (isinstance(value, Mapping) and value.get("type") == REVIEW_TYPE):
            continue
        reviews += 1
        listed = [entry["operation_id"] for entry in value.get("operations", ())]
        chosen = {
            op_id: verdict_content(parse_verdict(verdicts[op_id]))
            for op_id in listed
            if op_id in verdicts
        }
        unknown -= set(chosen)
        if chosen:
            by_interrupt[str(pending.id)] = chosen
    if unknown and reviews:
        raise ReviewError(
            f"no pending effect review lists {sorted(unknown)}; check the operation ids "
            "against the interrupt's 'operations'"
        )
    if not by_interrupt:
        raise ReviewError(
            "there is no pending effect review to answer among the interrupts given. If they are "
            "graph.get_state(config).interrupts, check the config's thread_id: pass the state "
            "itself, resume_command(state, ...), to have the thread checked. Nothing was sent."
        )
    return Command(resume=by_interrupt)
