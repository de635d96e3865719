"""Reconciliation: settle an ``unknown`` operation from evidence, never by guessing.

Given what the tool's contract says the provider can prove, decide one of:

* ``confirm``  - a lookup found the effect (a withdrawn item counts: it landed);
* ``resend``   - a re-send is provably safe: the provider dedups on our key within
  its window, or an authoritative lookup proved absence (an eventually consistent
  one only once its settle time has passed);
* ``escalate`` - nothing can settle it (blind provider, lookup inconclusive,
  window expired, attempts exhausted, or the tenant/policy changed since intent):
  ask an operator.

An automatic re-send happens only under the tenant and policy version recorded at
intent; otherwise the evidence says what changed and an operator decides.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core.contract import Effect, Inconclusive, Landed, LookupRequest, NotLanded
from ..core.operation import Event, EvidenceKind, Operation
from ..errors import OversizedError
from .messages import MAX_EVIDENCE_CHARS, bounded, check_receipt


@dataclass(frozen=True)
class Scope:
    """The authority a call runs under: recorded at intent, re-checked before a re-send."""

    tenant: str = ""
    policy_version: str | None = None


@dataclass(frozen=True)
class Outcome:
    """What reconciliation concluded, with the evidence to record."""

    action: Literal["confirm", "resend", "escalate"]
    evidence: Mapping[str, Any] = field(default_factory=dict)

    @property
    def event(self) -> Event:
        return {
            "confirm": Event.CONFIRM,
            "resend": Event.RESEND,
            "escalate": Event.ESCALATE,
        }[self.action]


Sleep = Callable[[float], Awaitable[None]]


def scope_changes(op: Operation, scope: Scope) -> dict[str, Any]:
    """What differs between the authority at intent and now (empty if nothing)."""
    changes: dict[str, Any] = {}
    if op.tenant != scope.tenant:
        changes["tenant"] = {"at_intent": op.tenant, "now": scope.tenant}
    if op.policy_version != scope.policy_version:
        changes["policy_version"] = {"at_intent": op.policy_version, "now": scope.policy_version}
    return changes


def _resend_or_escalate(
    op: Operation, effect: Effect, scope: Scope, evidence: dict[str, Any]
) -> Outcome:
    changes = scope_changes(op, scope)
    if changes:
        return Outcome("escalate", {**evidence, "kind": EvidenceKind.POLICY, "changed": changes})
    if op.attempts >= effect.max_attempts:
        return Outcome(
            "escalate", {**evidence, "kind": EvidenceKind.ATTEMPTS, "attempts": op.attempts}
        )
    return Outcome("resend", evidence)


async def _lookup_once(effect: Effect, request: LookupRequest) -> Landed | NotLanded | Inconclusive:
    assert effect.lookup is not None
    try:
        return await asyncio.wait_for(effect.lookup(request), effect.lookup_timeout_seconds or None)
    except asyncio.TimeoutError:
        return Inconclusive(f"lookup timed out after {effect.lookup_timeout_seconds:g}s")
    except Exception as error:  # a lookup that raises proves nothing either way
        return Inconclusive(f"lookup raised {type(error).__name__}: {error}")


async def reconcile(
    op: Operation,
    effect: Effect,
    *,
    args: Mapping[str, Any],
    scope: Scope,
    sleep: Sleep = asyncio.sleep,
    clock: Callable[[], float] = time.time,
) -> Outcome:
    """Decide what the evidence allows for an ``unknown`` operation.

    Every escalation says what changed in the authority since intent, if anything,
    so the operator sees it beside the evidence.
    """
    outcome = await _reconcile(op, effect, args=args, scope=scope, sleep=sleep, clock=clock)
    changes = scope_changes(op, scope)
    if outcome.action == "escalate" and changes and "changed" not in outcome.evidence:
        return Outcome("escalate", {**outcome.evidence, "changed": changes})
    return outcome


async def _reconcile(
    op: Operation,
    effect: Effect,
    *,
    args: Mapping[str, Any],
    scope: Scope,
    sleep: Sleep,
    clock: Callable[[], float],
) -> Outcome:
    if effect.lookup is not None:
        outcome = await _reconcile_by_lookup(op, effect, args=args, sleep=sleep, clock=clock)
        if isinstance(outcome, Outcome):
            if outcome.action == "resend":
                return _resend_or_escalate(op, effect, scope, dict(outcome.evidence))
            return outcome
        inconclusive = {"kind": EvidenceKind.LOOKUP, "found": None, "reason": outcome}
        if not _within_dedup_window(op, effect, clock()):
            return Outcome("escalate", inconclusive)
        return _resend_or_escalate(op, effect, scope, {**inconclusive, "kind": EvidenceKind.DEDUP})
    if effect.dedup_seconds is not None:
        if _within_dedup_window(op, effect, clock()):
            return _resend_or_escalate(op, effect, scope, {"kind": EvidenceKind.DEDUP})
        return Outcome(
            "escalate",
            {"kind": EvidenceKind.DEDUP, "expired": True, "window_seconds": effect.dedup_seconds},
        )
    return Outcome("escalate", {"kind": EvidenceKind.BLIND})


def _within_dedup_window(op: Operation, effect: Effect, now: float) -> bool:
    window = effect.dedup_seconds
    # The provider keeps our key from the first send (≈ intent) for the window.
    return window is not None and now - op.created_at <= window


async def _reconcile_by_lookup(
    op: Operation,
    effect: Effect,
    *,
    args: Mapping[str, Any],
    sleep: Sleep,
    clock: Callable[[], float],
) -> Outcome | str:
    """Poll the lookup with bounded backoff; a string is why it stayed inconclusive."""
    delay = 0.05
    reasons: list[str] = []
    inconclusive = 0
    polls = 0
    while inconclusive < effect.lookup_attempts:
        polls += 1
        request = LookupRequest(
            operation_id=op.op_id,
            provider_key=op.provider_key,
            tool=op.tool,
            args=args,
            attempt=polls,
        )
        found = await _lookup_once(effect, request)
        if isinstance(found, Landed):
            try:
                receipt = check_receipt(found.receipt, what="lookup's receipt")
            except OversizedError as error:
                # Proof it landed, but too big to record: an operator decides on it.
                return f"the lookup found it, but {error}"
            evidence: dict[str, Any] = {"kind": EvidenceKind.LOOKUP, "found": True, "polls": polls}
            evidence["receipt"] = receipt
            if found.withdrawn:
                evidence["withdrawn"] = True
            return Outcome("confirm", evidence)
        if isinstance(found, NotLanded):
            since_send = clock() - (op.dispatched_at or op.created_at)
            remaining = effect.settle_seconds - since_send
            if effect.lookup_consistency == "strong" or remaining <= 0:
                return Outcome("resend", {"kind": EvidenceKind.LOOKUP, "found": False, "polls": polls})
            # Absence is not proof yet: the listing may lag. Wait, bounded by the settle time.
            await sleep(min(delay, remaining))
        else:
            inconclusive += 1
            reasons.append(bounded(str(found.reason), MAX_EVIDENCE_CHARS // 4))
            if inconclusive < effect.lookup_attempts:
                await sleep(delay)
        delay = min(delay * 2, 2.0)
    return "; ".join(dict.fromkeys(reasons)) or "lookup inconclusive"
