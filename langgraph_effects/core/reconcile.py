"""Reconciliation rules: what the provider's evidence means for an ``unknown`` operation. Pure.

An operation is ``unknown`` when a send may or may not have landed (a crash, a
timeout, an ambiguous error). The contract (`Effect`) says what
the provider can prove; each function here takes one piece of evidence and the
operation's state and returns a `Reconciliation`:

* ``confirm``  - a lookup found the effect (a withdrawn item counts: it landed);
* ``resend``   - a re-send is provably safe: the provider dedups on our key within
  its window, or an authoritative lookup proved absence (an eventually consistent
  one only once its settle time has passed);
* ``escalate`` - nothing settles it (blind provider, lookup inconclusive, window
  expired, attempts used up, or the tenant/policy changed since intent): an
  operator decides. Attempts are the sends the call tried (`tried`): a send a
  worker death or a lost lease ended does not count.

A re-send happens only under the tenant and policy version recorded at intent, and
every escalation carries what changed in that authority (``changed``), if anything.

No lookup is called and no clock is read here: the runtime
(``langgraph_effects._runtime.reconcile``) polls the lookup with its timeout and
backoff, and passes each answer and the time to these rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .contract import Effect
from .operation import Event, EvidenceKind, Operation, Scope

ReconcileAction = Literal["confirm", "resend", "escalate"]
"""What reconciliation concluded: the effect landed, re-send it, or ask an operator."""

_EVENTS: Mapping[str, Event] = {
    "confirm": Event.CONFIRM,
    "resend": Event.RESEND,
    "escalate": Event.ESCALATE,
}


@dataclass(frozen=True)
class Reconciliation:
    """What reconciliation concluded about an ``unknown`` operation, with the evidence
    to record beside the transition."""

    action: ReconcileAction
    evidence: Mapping[str, Any] = field(default_factory=dict)

    @property
    def event(self) -> Event:
        """The ledger event that records it (``confirm``, ``resend`` or ``escalate``)."""
        return _EVENTS[self.action]


@dataclass(frozen=True)
class PollAgain:
    """The lookup's answer does not settle it yet (an eventually consistent "not
    found" before the settle time): poll again after ``wait`` seconds."""

    wait: float


def scope_changes(op: Operation, scope: Scope) -> dict[str, Any]:
    """What differs between the authority at intent and ``scope`` now (empty if nothing)."""
    changes: dict[str, Any] = {}
    if op.tenant != scope.tenant:
        changes["tenant"] = {"at_intent": op.tenant, "now": scope.tenant}
    if op.policy_version != scope.policy_version:
        changes["policy_version"] = {"at_intent": op.policy_version, "now": scope.policy_version}
    return changes


def within_dedup_window(op: Operation, effect: Effect, now: float) -> bool:
    """Whether the provider still deduplicates on the operation's key at ``now``: it
    keeps the key from the first send (about the intent's time) for the window."""
    window = effect.dedup_seconds
    return window is not None and now - op.created_at <= window


def escalate(op: Operation, scope: Scope, evidence: Mapping[str, Any]) -> Reconciliation:
    """Ask an operator, with what changed in the authority since intent beside the evidence."""
    changes = scope_changes(op, scope)
    if changes and "changed" not in evidence:
        return Reconciliation("escalate", {**evidence, "changed": changes})
    return Reconciliation("escalate", dict(evidence))


def tried(op: Operation, lost_sends: int) -> int:
    """The attempts that count against ``max_attempts``: the operation's sends
    (``op.attempts``) but the ``lost_sends`` that ended with no outcome from the tool (a
    worker that died or lost its lease, a dispatch handed back unsent; see
    `lost_send`). A worker death ends every call it had dispatched, so counting
    it would send each of them to review after ``max_attempts`` deaths, though the
    evidence that allows the re-send (a dedup window, a lookup's proof of absence)
    holds whatever the count."""
    return max(0, op.attempts - lost_sends)


def lost_send(event: str, evidence: Mapping[str, Any] | None) -> bool:
    """Whether an audit entry (its event and evidence) ended a send with no outcome from
    the tool: ``lose`` on a lost lease, or ``withdraw`` (handed back unsent, or paused)."""
    if event == Event.WITHDRAW.value:
        return True
    return event == Event.LOSE.value and (evidence or {}).get("kind") == EvidenceKind.LEASE.value


def resend_if_allowed(
    op: Operation, effect: Effect, scope: Scope, evidence: Mapping[str, Any], *, lost_sends: int = 0
) -> Reconciliation:
    """A re-send the evidence proves safe, unless the tenant or policy changed since
    intent (``policy``) or the call's `tried` attempts reached ``max_attempts``
    (``attempts``)."""
    changes = scope_changes(op, scope)
    if changes:
        return Reconciliation("escalate", {**evidence, "kind": EvidenceKind.POLICY, "changed": changes})
    if tried(op, lost_sends) >= effect.max_attempts:
        used: dict[str, Any] = {**evidence, "kind": EvidenceKind.ATTEMPTS, "attempts": op.attempts}
        if lost_sends:
            used["lost_sends"] = lost_sends
        return Reconciliation("escalate", used)
    return Reconciliation("resend", dict(evidence))


def without_lookup(
    op: Operation, effect: Effect, scope: Scope, *, now: float, lost_sends: int = 0
) -> Reconciliation:
    """A contract with no lookup: the dedup window decides, or, blind, an operator.
    ``lost_sends``: see `tried`."""
    if effect.dedup_seconds is None:
        return escalate(op, scope, {"kind": EvidenceKind.BLIND})
    if within_dedup_window(op, effect, now):
        return resend_if_allowed(op, effect, scope, {"kind": EvidenceKind.DEDUP}, lost_sends=lost_sends)
    return escalate(
        op, scope, {"kind": EvidenceKind.DEDUP, "expired": True, "window_seconds": effect.dedup_seconds}
    )


def after_landed(*, receipt: Any, withdrawn: bool, polls: int) -> Reconciliation:
    """The lookup found the effect: it landed (withdrawn or not), never re-send.
    ``receipt`` is the lookup's receipt, already checked for size by the runtime."""
    evidence: dict[str, Any] = {"kind": EvidenceKind.LOOKUP, "found": True, "polls": polls}
    evidence["receipt"] = receipt
    if withdrawn:
        evidence["withdrawn"] = True
    return Reconciliation("confirm", evidence)


def after_not_landed(
    op: Operation,
    effect: Effect,
    scope: Scope,
    *,
    now: float,
    polls: int,
    backoff: float,
    lost_sends: int = 0,
) -> Reconciliation | PollAgain:
    """The lookup found no trace. Proof of absence from a strong lookup, or from an
    eventual one once ``settle_after`` has passed since the send; before that the
    listing may lag: poll again, waiting at most ``backoff`` and never past the settle time."""
    since_send = now - (op.dispatched_at or op.created_at)
    remaining = effect.settle_seconds - since_send
    if effect.lookup_consistency == "strong" or remaining <= 0:
        return resend_if_allowed(
            op, effect, scope, {"kind": EvidenceKind.LOOKUP, "found": False, "polls": polls},
            lost_sends=lost_sends,
        )
    return PollAgain(min(backoff, remaining))


def after_inconclusive(
    op: Operation, effect: Effect, scope: Scope, *, now: float, reason: str, lost_sends: int = 0
) -> Reconciliation:
    """The lookup could not say (every poll inconclusive, timed out or raised, or it
    found a receipt too big to record): the dedup window, if still open, makes a
    re-send safe; otherwise an operator decides, told ``reason``."""
    inconclusive: dict[str, Any] = {"kind": EvidenceKind.LOOKUP, "found": None, "reason": reason}
    if not within_dedup_window(op, effect, now):
        return escalate(op, scope, inconclusive)
    return resend_if_allowed(
        op, effect, scope, {**inconclusive, "kind": EvidenceKind.DEDUP}, lost_sends=lost_sends
    )
