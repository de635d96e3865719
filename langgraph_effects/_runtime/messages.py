"""What the model sees: recorded outcomes replayed, and the truth about settled ambiguity.

Every ToolMessage the package produces carries an ``artifact`` with the operation
id, its state and the kind of evidence that settled it, so a UI or a later node
can show what happened. A tool's own artifact is kept under ``tool_artifact``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from ..core.controls import Refusal
from ..core.identity import canonical_json
from ..core.operation import EvidenceKind, Operation, State
from ..core.text import encodable as encodable  # what a checkpoint can store as it is
from ..errors import BudgetExceededError, CircuitOpenError, OversizedError

_SERDE = JsonPlusSerializer()

#: The largest receipt (as canonical JSON, in UTF-8 bytes) recorded in the ledger and
#: carried whole in the ToolMessage artifact. A bigger one is refused, nothing written.
MAX_RECEIPT_BYTES = 64 * 1024
#: The longest text an operator may give as evidence (an abandon reason, an approval
#: note). Text the package records itself (an exception's message, a lookup's reason)
#: is cut to this length instead, with a marker saying how long it was.
MAX_EVIDENCE_CHARS = 4096
#: What the model sees of a receipt or an evidence text: a preview of this many
#: characters (the whole receipt stays in the artifact and the ledger).
PREVIEW_CHARS = 300


def check_receipt(receipt: Any, *, what: str = "receipt") -> Any:
    """``receipt`` if within `MAX_RECEIPT_BYTES`, else
    [`OversizedError`][langgraph_effects.errors.OversizedError]."""
    if receipt is None:
        return receipt
    size = len(canonical_json(receipt).encode("utf-8"))  # its canonical JSON in UTF-8 bytes
    if size > MAX_RECEIPT_BYTES:
        raise OversizedError(
            what, size, MAX_RECEIPT_BYTES, "bytes",
            "Give the provider's id and the few fields that prove the effect landed, not the "
            "whole response.",
        )
    return receipt


def check_text(text: str, *, what: str) -> str:
    """``text`` if within `MAX_EVIDENCE_CHARS`, else
    [`OversizedError`][langgraph_effects.errors.OversizedError]."""
    if len(text) > MAX_EVIDENCE_CHARS:
        raise OversizedError(what, len(text), MAX_EVIDENCE_CHARS, "characters", "Say it in fewer words.")
    return text


def bounded(text: str, limit: int = MAX_EVIDENCE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, with a marker saying how long it was."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [cut: {len(text):,} characters in all]"


def preview(value: Any) -> str:
    """What the model sees of a receipt or an evidence text: at most `PREVIEW_CHARS` characters."""
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    if len(text) <= PREVIEW_CHARS:
        return text
    return text[:PREVIEW_CHARS] + f"… ({len(text):,} characters in all; the whole is in the artifact)"

#: The artifact key a review placeholder carries (never reaches the model).
PENDING_REVIEW = "langgraph_effects_pending_review"


def dump(output: Any) -> tuple[str, bytes]:
    """Serialize a tool output (ToolMessage, Command or a list of them) for replay."""
    return _SERDE.dumps_typed(output)


def load(type_: str, data: bytes) -> Any:
    return _SERDE.loads_typed((type_, data))


def _plain(kind: Any) -> Any:
    """An evidence kind as stored in a message artifact: the plain string (the
    checkpoint serializer need not know our enum)."""
    return kind.value if isinstance(kind, EvidenceKind) else kind


def effect_artifact(op: Operation) -> dict[str, Any]:
    evidence = dict(op.evidence or {})
    artifact: dict[str, Any] = {
        "operation_id": op.op_id,
        "state": op.state.value,
        "evidence": _plain(evidence.get("kind", EvidenceKind.RESULT)),
        "provider_key": op.provider_key,
        "attempts": op.attempts,
    }
    if "receipt" in evidence:
        artifact["receipt"] = evidence["receipt"]
    if "compensated_by" in evidence:  # marked for undoing: what confirmed it is its cause
        artifact["compensated_by"] = evidence["compensated_by"]
        cause = evidence.get("cause") or {}
        if "receipt" in cause:
            artifact["receipt"] = cause["receipt"]
    return artifact


def decorate(output: Any, op: Operation) -> Any:
    """Attach the effect artifact to the ToolMessage(s) of a tool output."""
    if isinstance(output, ToolMessage):
        artifact = effect_artifact(op)
        if output.artifact is not None:
            artifact["tool_artifact"] = output.artifact
        return output.model_copy(update={"artifact": artifact})
    if isinstance(output, list):
        return [decorate(item, op) for item in output]
    return output  # a Command: its update is the tool's own business


def _receipt_text(receipt: Any) -> str:
    if receipt is None:
        return ""
    return f" Receipt: {preview(receipt)}."


def _undo_text(tool: str, undo: Operation | None, receipt: str) -> str:
    """What the model is told of an effect marked for undoing, by how its undo stands:
    "being undone" only once the undo was recorded as sent."""
    ordered = "an operator (or a later step that failed) asked for its compensation"
    state = undo.state if undo is not None else State.PENDING
    if state is State.CONFIRMED:
        return (
            f"The {tool} effect landed, and it has been undone: {ordered}, which ran "
            f"once.{receipt} Treat it as cancelled; do not repeat it or undo it yourself."
        )
    if state in (State.DISPATCHED, State.UNKNOWN):
        return (
            f"The {tool} effect landed, and it is being undone: {ordered}, which was sent "
            f"once.{receipt} Treat it as cancelled; do not repeat it or undo it yourself."
        )
    if state is State.REVIEW:
        return (
            f"The {tool} effect landed, and it is being undone: {ordered}, which was sent, "
            "but whether it took effect is in doubt; an operator checks it with the "
            f"provider.{receipt} Do not repeat it or undo it yourself."
        )
    if state in (State.FAILED, State.ABANDONED):
        how = "failed" if state is State.FAILED else "was closed without confirming it happened"
        return (
            f"The {tool} effect landed, and it was NOT undone: {ordered}, but the undo "
            f"{how}. The effect stands.{receipt} Do not repeat it or undo it yourself; tell "
            "the user."
        )
    return (  # pending: recorded, not sent yet
        f"The {tool} effect landed, and it is to be undone: {ordered}, which has not been "
        f"sent yet and will be sent once, later.{receipt} Do not repeat it or undo it "
        "yourself."
    )


def _erased_text(tool: str, state: State) -> str:
    """What the model is told of a settled call whose data was erased: what happened,
    never what it carried."""
    how = {
        State.CONFIRMED: "landed",
        State.FAILED: "failed",
        State.ABANDONED: "was NOT confirmed (an operator closed it)",
    }.get(state, str(state))
    return (
        f"The {tool} call {how}. Its arguments and result were erased from the record "
        "(data erasure), so they cannot be shown. Do not repeat the call; if the user "
        "needs its details, tell them they were erased."
    )


def settled_message(
    op: Operation, *, tool_call_id: str, tool: str, undo: Operation | None = None
) -> ToolMessage:
    """The message for an operation settled without a tool result of its own; ``undo``
    is its undo's row when it is marked for compensation (``None``: not sent yet)."""
    evidence = dict(op.evidence or {})
    kind = evidence.get("kind")
    receipt = _receipt_text(evidence.get("receipt"))
    status: str = "success"
    if evidence.get("erased"):
        status = "success" if op.state is State.CONFIRMED else "error"
        content = _erased_text(tool, op.state)
    elif op.state is State.CONFIRMED and kind == EvidenceKind.COMPENSATION:
        receipt = _receipt_text((evidence.get("cause") or {}).get("receipt"))
        content = _undo_text(tool, undo, receipt)
    elif op.state is State.CONFIRMED and kind == EvidenceKind.VERDICT:
        content = (
            f"The {tool} effect landed: an operator checked with the provider and confirmed "
            f"it after the call was interrupted.{receipt} It is done; do not repeat it."
        )
    elif op.state is State.CONFIRMED:
        withdrawn = " (it has since been withdrawn at the provider)" if evidence.get(
            "withdrawn"
        ) else ""
        content = (
            f"The {tool} effect landed{withdrawn}: the call was interrupted, and the "
            f"provider confirms it by lookup.{receipt} It is done; do not repeat it."
        )
    elif op.state is State.ABANDONED and kind == EvidenceKind.APPROVAL:
        status = "error"
        note = evidence.get("message")
        because = f" The approver said: {preview(str(note))}." if note else ""
        content = (
            f"The {tool} call was rejected by the approver and was not sent.{because} Do not "
            "retry it unless the user asks you to."
        )
    elif op.state is State.ABANDONED:
        status = "error"
        reason = evidence.get("reason")
        because = f" Reason: {preview(str(reason))}." if reason else ""
        content = (
            f"The {tool} effect was NOT confirmed: the call was interrupted and an operator "
            f"closed it without confirming that it happened.{because} Do not retry it unless "
            "the user asks you to."
        )
    elif op.state is State.FAILED:
        status = "error"
        error = str(evidence.get("error", "the provider rejected it"))
        content = f"The {tool} call failed: {preview(error)}."
    else:  # pragma: no cover - callers only pass settled operations
        raise ValueError(f"operation {op.op_id} is not settled ({op.state})")
    return ToolMessage(
        content=content,
        name=tool,
        tool_call_id=tool_call_id,
        status=status,
        artifact=effect_artifact(op),
    )


def replay(op: Operation, *, tool_call_id: str, tool: str, undo: Operation | None = None) -> Any:
    """The outcome of a settled operation, as the model should see it again (``undo``:
    its undo's row, when it is marked for compensation; see `settled_message`)."""
    if op.result is not None and op.result_type is not None:
        output = load(op.result_type, op.result)
        if isinstance(output, ToolMessage) and output.tool_call_id != tool_call_id:
            # A re-planned duplicate bound to an earlier call: answer the new call id.
            output = output.model_copy(update={"tool_call_id": tool_call_id})
        return decorate(output, op)
    return settled_message(op, tool_call_id=tool_call_id, tool=tool, undo=undo)


def refused(tool: str, tool_call_id: str, refusal: Refusal) -> ToolMessage:
    """The answer to a send a budget or circuit breaker refused: nothing was sent."""
    error = (BudgetExceededError if refusal.kind == "budget" else CircuitOpenError)(
        tool, refusal.name, refusal.reason
    )
    advice = (
        " Do not retry it now; tell the user the limit was reached."
        if refusal.kind == "budget"
        else " The provider is failing; try again later."
    )
    return ToolMessage(
        content=str(error) + advice,
        name=tool,
        tool_call_id=tool_call_id,
        status="error",
        artifact={"error": type(error).__name__, "sent": False, "control": refusal.name},
    )


def review_placeholder(op: Operation, *, tool_call_id: str, tool: str) -> ToolMessage:
    """Stands in for a call awaiting a verdict until the node asks the operator."""
    return ToolMessage(
        content=f"The {tool} call is awaiting an operator's review.",
        name=tool,
        tool_call_id=tool_call_id,
        artifact={PENDING_REVIEW: op.op_id},
    )


def unanswered(history: Sequence[BaseMessage]) -> list[tuple[int, Mapping[str, Any]]]:
    """(index of the AIMessage, call) of every tool call no ToolMessage answers.

    A ToolMessage answers the latest still-open call with its id before it: model
    servers repeat tool call ids across turns (``call_0`` every turn), so an
    id answered in one turn says nothing about the same id in another.
    """
    open_calls: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
    for index, message in enumerate(history):
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call.get("id"):
                    open_calls.setdefault(str(call["id"]), []).append((index, call))
        elif isinstance(message, ToolMessage):
            waiting = open_calls.get(message.tool_call_id)
            if waiting:
                waiting.pop()
    return sorted((item for items in open_calls.values() for item in items), key=lambda x: x[0])
