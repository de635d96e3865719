"""How each operation was settled, told from the audit entries its resume recorded.

Pure: the transitions come from the ledger's audit trail, keyed here by
`Event` (what moved the operation) and
`EvidenceKind` (on what evidence).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.operation import Event, EvidenceKind, Operation, State
from ..core.protocol import raised
from .report import Settlement, TransitionReport, _awaiting_approval, _untouched

#: What a contract lets reconciliation do with an operation whose sender is gone.
_BY_CONTRACT = {
    "dedup": "re-sent under {key}, which the provider deduplicates on (within its window)",
    "lookup": "looked up at the provider: confirmed if found, re-sent under the same key if not",
    "lookup-eventual": "looked up (re-polled until the listing settles): confirmed or re-sent",
    "blind": "nothing can prove whether it landed: it goes to review",
}


def _kind(evidence: Mapping[str, Any] | None) -> str | None:
    kind = (evidence or {}).get("kind")
    return str(kind) if kind is not None else None


def _receipt(evidence: Mapping[str, Any] | None) -> str:
    receipt = (evidence or {}).get("receipt")
    if receipt is None:
        return ""
    return f" (receipt {json.dumps(receipt, sort_keys=True, default=str)})"


def _last_by_event(transitions: Sequence[TransitionReport]) -> dict[Event, TransitionReport]:
    """The latest transition of each event (the creation entry, ``intent``, is no event)."""
    known = {e.value: e for e in Event}
    last: dict[Event, TransitionReport] = {}
    for t in transitions:
        event = known.get(t.event)
        if event is not None:
            last[event] = t
    return last


def forecast(op: Operation) -> str:
    """What resuming is expected to do with ``op`` (for a dry run)."""
    if raised(op):
        return (
            "its definite failure was raised to the caller, so the resumed task runs it again: "
            f"a new attempt under {op.provider_key} (nothing landed before)"
        )
    if op.terminal:
        return f"its outcome is recorded ({op.state.value}): it will be answered from the ledger"
    if op.state is State.REVIEW:
        return "waits for an operator's verdict: the review is asked again"
    if _awaiting_approval(op):
        return "waits for an approval: it is asked for again"
    if op.state is State.PENDING:
        if op.attempts:
            return f"cleared to send again: it will be re-sent under {op.provider_key}"
        return "nothing was sent yet: it will be sent"
    lost = "its sender is gone; " if op.state is State.DISPATCHED else ""
    by_contract = _BY_CONTRACT.get(op.contract, "reconciled from the evidence its contract allows")
    return lost + by_contract.format(key=op.provider_key)


def settled(
    before: Operation | None, after: Operation, transitions: Sequence[TransitionReport], *, sending: bool
) -> tuple[Settlement, str]:
    """How the operation got from ``before`` to ``after``, from the transitions recorded meanwhile.

    ``sending``: ``after`` is ``dispatched`` under a live lease (someone sends it now).
    """
    last = _last_by_event(transitions)
    cause = ""
    lost = last.get(Event.LOSE)
    if lost is not None:
        kind = _kind(lost.evidence)
        cause = (
            "its sender was gone (lease lost); "
            if kind == EvidenceKind.LEASE
            else f"the call was lost ({kind}); "
        )
    if before is None:
        prefix = "created by the resumed run (the model asked for more); "
        if after.state is State.CONFIRMED:
            return "sent", prefix + "sent and confirmed"
        return "unsettled" if not after.terminal else "failed", prefix + f"now {after.state.value}"
    if not transitions:
        return _untouched_by_resume(after, sending=sending)
    if after.state is State.REVIEW:
        escalated = last.get(Event.ESCALATE)
        why = (_kind(escalated.evidence) if escalated else None) or "no evidence"
        return "sent_to_review", (
            cause + f"evidence cannot settle it ({why}): it waits for an operator's verdict"
        )
    if after.state is State.CONFIRMED:
        return _confirmed(before, after, last, cause)
    if after.state is State.FAILED:
        error = (after.evidence or {}).get("error", "a definite error")
        return "failed", cause + f"the provider rejected it definitely: {error}"
    if after.state is State.ABANDONED:
        reason = (after.evidence or {}).get("reason")
        return "decided_by_operator", "closed without confirming the effect" + (
            f": {reason}" if reason else ""
        )
    if sending:
        return "in_flight_elsewhere", cause + "someone else took it over and is sending it now"
    return "unsettled", cause + f"now {after.state.value}: the resume did not settle it"


def _untouched_by_resume(after: Operation, *, sending: bool) -> tuple[Settlement, str]:
    """An operation the resume recorded no transition for."""
    if after.terminal:
        evidence = after.evidence or {}
        if _kind(evidence) == EvidenceKind.VERDICT:
            # The actor is free text ("me", "alice@host", "operator (interrupt)"): never possessive.
            actor = evidence.get("actor")
            verdict = f"a verdict from {actor}" if actor else "an operator's verdict"
            what = f"{after.state.value} by {verdict}"
        else:
            what = f"{after.state.value} ({evidence.get('kind', 'result')})"
        return "replayed", f"answered from the ledger, nothing sent: {what}{_receipt(evidence)}"
    if after.state is State.REVIEW or _awaiting_approval(after):
        return "awaiting_review", _untouched(after, "awaiting_review").detail
    if sending:
        return "in_flight_elsewhere", "someone is sending it right now (live lease)"
    return "unsettled", f"still {after.state.value}: the resume did not reach it"


def _confirmed(
    before: Operation, after: Operation, last: Mapping[Event, TransitionReport], cause: str
) -> tuple[Settlement, str]:
    """How a ``confirmed`` operation got there, by the last event that moved it."""
    key = after.provider_key
    if Event.CONFIRM in last:
        found = last[Event.CONFIRM].evidence
        return "confirmed_by_lookup", cause + "the provider's lookup found it" + _receipt(found)
    if Event.LANDED in last:
        return "decided_by_operator", "an operator ruled it landed" + _receipt(last[Event.LANDED].evidence)
    if Event.RESEND in last:
        if _kind(last[Event.RESEND].evidence) == EvidenceKind.DEDUP:
            return "settled_by_dedup", (
                cause + f"re-sent under the same provider key {key}, which the provider "
                "deduplicates on"
            )
        return "resent_under_key", (
            cause + f"the lookup proved it absent: re-sent under the same provider key {key}"
        )
    if Event.RETRY in last:
        return "resent_under_key", (
            cause + f"a definite failure proved nothing landed: tried again under the same "
            f"provider key {key}"
        )
    if Event.DISPATCH in last:
        if before.attempts == 0:
            return "sent", "nothing had been sent before the crash: sent now"
        return "resent_under_key", (
            f"an operator ruled it did not land: re-sent under the same provider key {key}"
        )
    return "confirmed", cause + "the tool returned a result"
