"""The per-call dispatch protocol as pure code: no I/O, no clock, no ledger.

`Session` asks two questions and does the I/O the
answers name:

* `what_next`: given the operation as last read, whose lease this call holds
  and whether the current lease holder is provably alive, what should the call do
  now (replay, run the tool, send, wait, take over, reconcile, ask a human)?
* `settle` / `late`: given what the tool just did, which change records
  it; and, if another worker took the operation over while the tool ran, how the
  result is kept as evidence without ever sending again.

The rules that make "exactly one effect" hold are all here, so they are tested on
their own with hypothesis (``tests/core/test_protocol.py``), like the state machine in
`langgraph_effects.core.operation`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .operation import Change, Event, EvidenceKind, Operation, State, needs_approval

# -- what a call does next ---------------------------------------------------------


@dataclass(frozen=True)
class Replay:
    """The operation is settled: answer from the ledger, send nothing."""


@dataclass(frozen=True)
class Review:
    """Evidence cannot settle it: an operator decides (the node interrupts)."""


@dataclass(frozen=True)
class Approve:
    """Its first dispatch needs a human approval: ask before sending anything."""


@dataclass(frozen=True)
class Dispatch:
    """Nothing was sent: take a new lease (``dispatch``), then look again."""


@dataclass(frozen=True)
class Retry:
    """A definite failure the caller was raised, and the caller tries again: a new
    attempt under the same key (``retry``, taking a new lease), then look again."""

    evidence: Mapping[str, Any]


@dataclass(frozen=True)
class Run:
    """This call holds the lease: confirm it is still ours, then run the tool."""


@dataclass(frozen=True)
class Wait:
    """Someone else is sending it right now: wait for them; never send."""


@dataclass(frozen=True)
class TakeOver:
    """The lease holder is gone: record the operation as lost (then reconcile)."""

    change: Change


@dataclass(frozen=True)
class Reconcile:
    """The outcome is unknown: ask the provider's evidence what happened."""


Next = Replay | Review | Approve | Dispatch | Retry | Run | Wait | TakeOver | Reconcile
"""What a call does next, as `what_next` decides it."""


def ours(op: Operation, token: str | None) -> bool:
    """Whether ``op`` is dispatched under the lease this call holds (``token``)."""
    return (
        op.state is State.DISPATCHED
        and token is not None
        and op.owner is not None
        and op.owner.token == token
    )


def lease_to_spare(op: Operation, *, now: float, lease_seconds: float) -> bool:
    """Whether ``op``'s lease has at least half of ``lease_seconds`` left at ``now``:
    enough for the request to leave before anyone could take the lease over."""
    return op.lease_expires_at is not None and op.lease_expires_at - now >= lease_seconds / 2


def needs_liveness(op: Operation, token: str | None) -> bool:
    """Whether `what_next` needs to know if ``op``'s lease holder is alive."""
    return op.state is State.DISPATCHED and not ours(op, token) and op.owner is not None


def holder_gone(op: Operation, *, alive: bool | None, now: float) -> bool:
    """Whether a ``dispatched`` operation's sender is gone.

    ``alive`` is the same-host verdict (``True`` provably running, ``False``
    provably over, ``None`` cannot tell: another host). A provable verdict wins
    over the clock both ways: a live owner is never expired by time, a dead one is
    gone at once. Only without one does the lease's expiry decide.
    """
    if op.state is not State.DISPATCHED:
        return False
    if alive is not None:
        return not alive
    return not op.lease_live(now)


def raised(op: Operation) -> bool:
    """Whether ``op`` failed definitely and its caller was raised the error (rather
    than answered with an error message): nobody has seen an outcome of it as the
    call's result, so the call is not over."""
    return op.state is State.FAILED and bool((op.evidence or {}).get("raised"))


def what_next(
    op: Operation,
    *,
    token: str | None,
    alive: bool | None,
    now: float,
    scope_changed: bool = False,
) -> Next:
    """What a call whose operation is ``op`` does now.

    ``token`` is the lease this call holds (``None`` if none); ``alive`` is
    `langgraph_effects._runtime.lease.owner_alive` of ``op``'s owner when
    `needs_liveness` says it matters (ignored otherwise); ``now`` is the
    wall clock, used only for leases of another host. ``scope_changed``: the tenant
    or policy version differs from the one recorded at intent.

    A recorded outcome is replayed, with one exception, the retry rule: a definite
    failure that was *raised* to the caller (`raised`) ended no call, so
    whoever runs the call again (a ``RetryPolicy``, ``ToolRetryMiddleware``, a
    resume of the task that raised) makes a new attempt under the same key, as it
    would without this package; nothing landed, so it cannot duplicate anything. A
    failure *answered* as an error message is the call's result and is replayed, and
    so is a raised one under a changed tenant or policy (no automatic send then).
    """
    if raised(op) and not scope_changed:
        return Retry({"kind": EvidenceKind.RETRY, "after": (op.evidence or {}).get("error")})
    if op.terminal:
        return Replay()
    if op.state is State.REVIEW:
        return Review()
    if op.state is State.PENDING:
        return Approve() if needs_approval(op) else Dispatch()
    if op.state is State.UNKNOWN:
        return Reconcile()
    # dispatched
    if ours(op, token):
        return Run()
    if not holder_gone(op, alive=alive, now=now):
        return Wait()
    return TakeOver(
        Change(
            Event.LOSE,
            evidence={
                "kind": EvidenceKind.LEASE,
                "owner": op.owner.to_json() if op.owner else None,
                "why": "owner gone" if alive is False else "lease expired",
                "lease_expires_at": op.lease_expires_at,
            },
            lease_seen=op.lease_expires_at,
        )
    )


# -- what the tool did ---------------------------------------------------------------


@dataclass(frozen=True)
class Succeeded:
    """The tool returned a result (serialised for replay)."""

    result_type: str
    result: bytes


@dataclass(frozen=True)
class Failed:
    """The tool raised a definite error: the provider applied nothing."""

    result_type: str
    result: bytes
    error: str
    raised: bool = False
    """The caller gets the exception (``True``), not an error message (see `raised`)."""


@dataclass(frozen=True)
class Ambiguous:
    """Anything else (a timeout, an unknown exception): it may have landed."""

    evidence: Mapping[str, Any]


Outcome = Succeeded | Failed | Ambiguous
"""What the tool did when it ran, as `settle` records it."""


def settle(outcome: Outcome, *, sender: Mapping[str, Any] | None = None) -> Change:
    """The change that records ``outcome`` on the operation the call dispatched.

    ``sender`` (host and pid of the lease holder) is kept with a result, so the
    ledger says who sent the effect."""
    if isinstance(outcome, Succeeded):
        return Change(
            Event.SUCCEED,
            evidence={"kind": EvidenceKind.RESULT, **({"sender": dict(sender)} if sender else {})},
            result_type=outcome.result_type,
            result=outcome.result,
        )
    if isinstance(outcome, Failed):
        evidence: dict[str, Any] = {"kind": EvidenceKind.ERROR, "error": outcome.error}
        if outcome.raised:
            evidence["raised"] = True
        return Change(
            Event.FAIL,
            evidence=evidence,
            result_type=outcome.result_type,
            result=outcome.result,
        )
    return Change(Event.LOSE, evidence=dict(outcome.evidence))


def late(
    current: Operation, outcome: Outcome, *, token: str, sender: Mapping[str, Any] | None = None
) -> Change:
    """A result that arrived after another worker took the operation over.

    It is evidence, never a reason to send: a success proves the effect landed, so
    it settles an operation still ``unknown`` or waiting for a human (its request was
    the only one). In any other state the taker may have sent a request of its own (it
    is re-sending, it settled, or an operator cleared a re-send), so the late send is
    noted in the audit trail (``late``, see `NOTES`) for an operator
    to see that a second request may have reached the provider; nothing else moves.
    The caller must not note it on an operation another worker is sending right now
    (its outcome's compare-and-set would lose to the note): wait for that worker first.
    """
    if isinstance(outcome, Succeeded) and current.state in (State.UNKNOWN, State.REVIEW):
        evidence = {"kind": EvidenceKind.RESULT, "late": True, "owner_token": token}
        if current.state is State.UNKNOWN:
            return Change(
                Event.CONFIRM,
                evidence=evidence,
                result_type=outcome.result_type,
                result=outcome.result,
            )
        return Change(
            Event.LANDED,
            evidence=evidence,
            result_type=outcome.result_type,
            result=outcome.result,
            decision_id=f"late-result:{token}",
            decision={"decision": "landed", "by": "late tool result"},
        )
    note: dict[str, Any] = {
        "kind": EvidenceKind.LATE,
        "outcome": _LATE_OUTCOMES[type(outcome)],
        "owner_token": token,
        "state_then": current.state.value,
    }
    if sender:
        note["sender"] = dict(sender)
    if isinstance(outcome, Failed):
        note["error"] = outcome.error
    elif isinstance(outcome, Ambiguous) and outcome.evidence.get("error"):
        note["error"] = outcome.evidence["error"]
    return Change(Event.LATE, evidence=note)


_LATE_OUTCOMES: Mapping[type, str] = {Succeeded: "result", Failed: "error", Ambiguous: "ambiguous"}


def after_record(moved: bool, outcome: Outcome) -> str:
    """After trying to record ``outcome``: ``"answer"`` (return the tool's own outcome,
    settled or kept as late evidence) or ``"reconcile"`` (ours and ambiguous: find
    out from the provider, which may re-send under a new lease)."""
    if moved and isinstance(outcome, Ambiguous):
        return "reconcile"
    return "answer"
