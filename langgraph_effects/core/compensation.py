"""Compensation rules: may an effect be undone now, what is its undo called, and which
effects a failed saga undoes. Pure: no ledger, no clock, no I/O.

An undo is an operation of its own (see [`Undo`][langgraph_effects.Undo]).
Its identity is derived from the id of the operation it undoes, so every resume, retry
or second worker that asks for the same compensation finds the same undo and never
mints a new one. Only an effect known to have landed (``confirmed``) is undone: an
outcome in doubt is settled first (reconciled, or reviewed by an operator), because
undoing something that never happened can itself do harm.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .identity import _digest
from .operation import Change, Event, EvidenceKind, Operation, State

#: The prefix of every undo's operation id.
UNDO_PREFIX = "op_undo_"


def undo_operation_id(op_id: str) -> str:
    """The id of the undo of operation ``op_id``: the same every time it is asked."""
    return UNDO_PREFIX + _digest("undo", op_id)


def undo_call_id(op: Operation) -> str:
    """The call id an undo is recorded under (it has no model call of its own)."""
    return f"undo:{op.tool_call_id}"


Verdict = Literal[
    "compensate",  # confirmed and undoable: record the undo now
    "requested",  # its undo is already recorded: finish that one (never a second)
    "review_first",  # unknown: settle its outcome first (an operator reviews it)
    "awaiting_review",  # already waiting for an operator's verdict
    "in_flight",  # dispatched: being sent, or its sender died (recover first)
    "not_landed",  # pending, failed or abandoned: nothing landed, nothing to undo
    "irreversible",  # confirmed, but no undo is declared
    "is_undo",  # an undo itself: undo it by hand
]
"""What `may_compensate` rules for one operation (see the comments above)."""


@dataclass(frozen=True)
class Decision:
    """Whether an operation may be compensated now, and why (for a human)."""

    verdict: Verdict
    reason: str

    @property
    def allowed(self) -> bool:
        """The undo may be recorded now (or, ``requested``, finished)."""
        return self.verdict in ("compensate", "requested")


def may_compensate(op: Operation, *, undoable: bool) -> Decision:
    """May ``op`` be compensated now? ``undoable``: its tool declares an undo."""
    if op.compensates is not None:
        return Decision("is_undo", f"{op.op_id} is itself the undo of {op.compensates}: undo it by hand")
    if op.compensated_by is not None:
        return Decision("requested", f"its undo {op.compensated_by} is already recorded")
    state = op.state
    if state is State.CONFIRMED:
        if not undoable:
            return Decision(
                "irreversible",
                f"{op.tool} declares no undo (Effect(compensate=...)): it cannot be undone "
                "automatically; undo it at the provider by hand",
            )
        return Decision("compensate", "it is confirmed: the effect landed")
    if state is State.UNKNOWN:
        return Decision(
            "review_first",
            "its outcome is unknown: undoing an effect that may never have landed can do harm; "
            "an operator must settle it first (verdict 'landed', with the undo)",
        )
    if state is State.REVIEW:
        return Decision(
            "awaiting_review",
            "it waits for an operator's verdict: answer 'landed' with the undo to compensate it",
        )
    if state is State.DISPATCHED:
        return Decision(
            "in_flight",
            "it is dispatched: being sent right now, or its sender died; run recovery (or wait) "
            "so its outcome is known, then compensate",
        )
    return Decision("not_landed", f"it is {state.value}: no effect landed, so there is nothing to undo")


def undo_ordered(op: Operation) -> bool:
    """Whether ``op``'s own record orders its undo: it is marked for compensation
    (``compensated_by``), or an operator's ``landed`` verdict that asked for the undo
    confirmed it (the verdict is written before the undo is, so a crash may leave
    only the verdict). What finishing a compensation on replay starts from."""
    if op.compensated_by is not None:
        return True
    evidence = op.evidence or {}
    return (
        op.state is State.CONFIRMED
        and evidence.get("kind") == EvidenceKind.VERDICT
        and evidence.get("undo") is True
    )


def mark_change(
    op: Operation, undo_id: str, *, actor: str, channel: str, reason: str | None
) -> Change:
    """The change that marks confirmed ``op`` for compensation by ``undo_id`` (what
    confirmed it is kept as the ``cause``)."""
    evidence: dict[str, Any] = {
        "kind": EvidenceKind.COMPENSATION,
        "compensated_by": undo_id,
        "actor": actor,
        "channel": channel,
        "cause": dict(op.evidence or {}),
    }
    if reason:
        evidence["reason"] = reason
    return Change(Event.COMPENSATE, evidence=evidence)


def review_change(*, actor: str, channel: str, reason: str | None) -> Change:
    """The change that sends an ``unknown`` effect someone asked to undo to review."""
    evidence: dict[str, Any] = {
        "kind": EvidenceKind.COMPENSATION,
        "undo_requested": True,
        "actor": actor,
        "channel": channel,
    }
    if reason:
        evidence["reason"] = reason
    return Change(Event.ESCALATE, evidence=evidence)


@dataclass(frozen=True)
class SagaPlan:
    """What a saga whose later step failed definitively does with its earlier effects."""

    undo: tuple[Operation, ...] = ()
    """Confirmed effects with an undo, newest first: the order to undo them in."""
    unsettled: tuple[Operation, ...] = ()
    """Effects whose outcome is in doubt (unknown, review, dispatched): settled first,
    never undone blindly."""
    irreversible: tuple[Operation, ...] = ()
    """Confirmed effects that declare no undo: reported, not guessed at."""
    done: tuple[Operation, ...] = ()
    """Effects already marked for compensation (their undo runs, or ran, once)."""


def saga_plan(
    steps: Sequence[Operation], failed: Operation, undoable: Callable[[Operation], bool]
) -> SagaPlan | None:
    """The effects to undo because ``failed`` failed definitively; ``None`` unless it did.

    ``steps`` are the saga's operations in the order they were recorded; only those
    before ``failed`` (by creation time, then id) are considered. ``undoable`` tells
    whether an operation's tool declares an undo.
    """
    if failed.state is not State.FAILED:
        return None
    earlier = [
        op
        for op in steps
        if op.op_id != failed.op_id
        and op.compensates is None
        and (op.created_at, op.op_id) <= (failed.created_at, failed.op_id)
    ]
    earlier.sort(key=lambda op: (op.created_at, op.op_id), reverse=True)
    undo: list[Operation] = []
    unsettled: list[Operation] = []
    irreversible: list[Operation] = []
    done: list[Operation] = []
    for op in earlier:
        decision = may_compensate(op, undoable=undoable(op))
        if decision.verdict == "compensate":
            undo.append(op)
        elif decision.verdict == "requested":
            done.append(op)
        elif decision.verdict == "irreversible":
            irreversible.append(op)
        elif decision.verdict in ("review_first", "awaiting_review", "in_flight"):
            unsettled.append(op)
    return SagaPlan(tuple(undo), tuple(unsettled), tuple(irreversible), tuple(done))


def undo_state(undo: Operation | None) -> str:
    """How a compensation stands, in one word, from its undo's row."""
    if undo is None:
        return "not requested"
    return {
        State.PENDING: "requested",
        State.DISPATCHED: "undoing",
        State.UNKNOWN: "in doubt",
        State.REVIEW: "in review",
        State.CONFIRMED: "undone",
        State.FAILED: "undo failed",
        State.ABANDONED: "abandoned",
    }[undo.state]


def receipt_of(op: Operation, decoded: Any = None) -> Any:
    """What proved ``op`` landed: an operator's or lookup's receipt, else ``decoded``
    (its recorded output)."""
    evidence: Mapping[str, Any] = op.evidence or {}
    if evidence.get("kind") == EvidenceKind.COMPENSATION:
        evidence = evidence.get("cause") or {}
    receipt = evidence.get("receipt")
    return receipt if receipt is not None else decoded
