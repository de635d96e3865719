"""Decide what recovery does with one thread, from what `observe` saw. Pure.

No ledger, no graph, no clock, no process table: every fact (the operations, the
thread's checkpoint, whose lease is over, the time) is in the `Observation`,
so each rule can be tested with a table of cases.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from .._runtime.pending import NO_CHECKPOINT
from ..core.operation import EvidenceKind, Operation, State
from .narrative import forecast
from .report import (
    OperationReport,
    Settlement,
    ThreadAction,
    ThreadReport,
    _awaiting_approval,
    _report,
    _untouched,
)

RecoveryAction = ThreadAction | Literal["resume"]
"""A `ThreadAction`, or ``resume``: resume the thread now (not a dry run)."""


@dataclass(frozen=True)
class Observation:
    """What recovery read about one thread (ledger and checkpoint), with no decision in it."""

    thread_id: str
    ops: tuple[Operation, ...]
    """Every operation of the thread (of the tenant recovery runs for)."""
    now: float
    has_next: bool = False
    """The checkpoint has work left: nodes to run, or task writes no checkpoint applied yet."""
    ours: int = 0
    """Interrupts the thread is paused at that are an effect review or approval."""
    others: int = 0
    """Interrupts the thread is paused at that are not ours (a human-input node)."""
    listed: frozenset[str] = frozenset()
    """Operation ids our pending interrupts ask about."""
    asked: frozenset[str] = frozenset()
    """Tool call ids the model asked for (in the thread's messages)."""
    answered: frozenset[str] = frozenset()
    """Tool call ids a ToolMessage answered."""
    has_checkpoint: bool = True
    checkpoint_at: float | None = None
    """When the last checkpoint was written (``None``: unknown)."""
    sender_gone: frozenset[str] = frozenset()
    """``dispatched`` operations whose sender is gone (lease expired, or owner dead)."""
    senders: Mapping[str, str] = field(default_factory=dict)
    """Who sends each ``dispatched`` operation, for a human (``pid 12 on this host``)."""

    @property
    def paused(self) -> bool:
        """Paused at an interrupt (ours or not)."""
        return bool(self.ours or self.others)

    @property
    def pending_work(self) -> bool:
        """A resume has something to run."""
        return self.has_next or self.paused

    @property
    def unfinished_run(self) -> bool:
        """A run stopped with work left and not at an interrupt: a crash (or a worker
        still running it). The thread is done only when nothing is pending."""
        return self.has_next and not self.paused


@dataclass(frozen=True)
class Policy:
    """How recovery was asked to run (the arguments of `recover` that decide)."""

    tenant: str | None = None
    explicit: bool = False
    """The thread was named by the caller (reported even with nothing to do)."""
    dry_run: bool = False
    min_idle: float = 0.0
    configured_tenant: str | None = None
    """The ``tenant_id`` the caller's config sets, if any."""


@dataclass(frozen=True)
class ThreadDecision:
    """What to do with one thread, and why."""

    action: RecoveryAction
    reason: str
    tenant: str
    involved: tuple[Operation, ...]
    """The operations a resume would move or answer."""
    operations: tuple[OperationReport, ...] = ()

    def report(self, thread_id: str) -> ThreadReport:
        """The report of a thread recovery does not resume."""
        return ThreadReport(
            thread_id=thread_id,
            tenant=self.tenant,
            action="resumed" if self.action == "resume" else self.action,
            reason=self.reason,
            operations=self.operations,
        )


def waits_for_human(op: Operation) -> bool:
    """It waits for an operator's verdict or an approval."""
    return op.state is State.REVIEW or _awaiting_approval(op)


def decided_out_of_band(op: Operation) -> bool:
    """The operation's last change is an operator's verdict given through the console or API."""
    evidence = op.evidence or {}
    if evidence.get("kind") == EvidenceKind.COMPENSATION:  # "landed, undo it" from the console
        evidence = evidence.get("cause") or {}
    return evidence.get("kind") == EvidenceKind.VERDICT and evidence.get("channel") in ("console", "api")


def tenant_of(ops: Sequence[Operation], wanted: str | None) -> str:
    """The tenant a resume runs under: the wanted one, or the operations' only tenant."""
    if wanted is not None:
        return wanted
    tenants = sorted({o.tenant for o in ops})
    return tenants[0] if len(tenants) == 1 else ""


def involved(seen: Observation) -> tuple[list[Operation], list[Operation]]:
    """(unresolved operations, settled operations whose answer the thread still lacks)."""
    unresolved = [o for o in seen.ops if not o.terminal]
    if seen.paused:
        # Only those our interrupts still list: a resume then re-raises the interrupt for
        # the rest, listing only them, so a second run finds nothing to do.
        unanswered = [o for o in seen.ops if o.terminal and o.op_id in seen.listed]
    else:
        unanswered = [
            o
            for o in seen.ops
            if o.terminal
            and seen.pending_work
            and not o.checkpoint_ns
            and o.tool_call_id in seen.asked
            and o.tool_call_id not in seen.answered
        ]
    return unresolved, unanswered


def classify(seen: Observation, policy: Policy) -> ThreadDecision | None:
    """What to do with the thread; ``None``: nothing to report (not named, nothing to do)."""
    unresolved, unanswered = involved(seen)
    moved = tuple(unresolved + unanswered)
    tenant = tenant_of(moved or seen.ops, policy.tenant)
    if not seen.ops and policy.tenant is None and policy.configured_tenant is not None:
        tenant = policy.configured_tenant  # nothing recorded says otherwise

    def quiet(action: ThreadAction, reason: str, how: Settlement = "not_resumed") -> ThreadDecision:
        ops = tuple(_untouched(o, how) for o in moved)
        return ThreadDecision(action, reason, tenant, moved, ops)

    if not moved and not seen.unfinished_run:
        if not policy.explicit:
            return None  # e.g. an out-of-band verdict the graph answered since
        if not seen.ops and not seen.has_checkpoint:
            return quiet("nothing_to_do", NO_CHECKPOINT.format(thread=seen.thread_id))
        if not seen.ops:
            return quiet("nothing_to_do", "the ledger has no operation of this thread")
        return quiet("nothing_to_do", "no operation of this thread is unresolved or waiting to be answered")
    live = [o for o in unresolved if o.state is State.DISPATCHED and o.op_id not in seen.sender_gone]
    if live:
        ops = tuple(_untouched(o, "in_flight_elsewhere" if o in live else "not_resumed") for o in moved)
        return ThreadDecision("in_flight_elsewhere", _live_reason(live, seen), tenant, moved, ops)
    blocked = _blocked(seen, policy, unresolved, moved, tenant)
    if blocked is not None:
        return quiet(*blocked)
    why = "paused at the effect review" if seen.paused else "a crash left it mid-run"
    if not moved:
        why += (
            " with work left and nothing of it in the ledger (input never processed, or a step "
            "that recorded no tool call)"
        )
    decided = [o for o in moved if decided_out_of_band(o)]
    if decided:
        why += f"; {len(decided)} verdict(s) recorded out of band wait to be answered"
    elif seen.paused:
        why += "; a resume can move some of its operations"
    if policy.dry_run:
        ops = tuple(_report(o, o, "would_resume", forecast(o)) for o in moved)
        return ThreadDecision("would_resume", why + "; a dry run, so nothing was resumed", tenant, moved, ops)
    return ThreadDecision("resume", why, tenant, moved)


#: Why a Functional API thread whose run ended cannot settle its unresolved calls.
_ENTRYPOINT_MOVED_ON = (
    "its entrypoint ran to the end without calling these again (its calls changed since the "
    "crash: an input read inside it, or an order that is not deterministic), so a resume "
    "cannot settle them; each may have landed: check the provider, then decide them with "
    "`langgraph-effects resolve`"
)


def _blocked(
    seen: Observation,
    policy: Policy,
    unresolved: Sequence[Operation],
    moved: Sequence[Operation],
    tenant: str,
) -> tuple[ThreadAction, str, Settlement] | None:
    """Why a thread with work left cannot be resumed now (action, reason, how), if it cannot."""
    if not seen.pending_work:
        if not seen.has_checkpoint:
            return (
                "not_resumable",
                "the graph's checkpointer has no checkpoint for this thread (is this the graph "
                "that ran it?); decide its operations with `langgraph-effects resolve`",
                "not_resumed",
            )
        if any("call" in o.extra for o in unresolved):
            return ("not_resumable", _ENTRYPOINT_MOVED_ON, "not_resumed")
        return (
            "not_resumable",
            "the thread has no pending work (its run ended without them), so a resume cannot "
            "settle these operations; decide them with `langgraph-effects resolve`",
            "not_resumed",
        )
    if seen.others:
        return (
            "paused_at_other_interrupt",
            f"the thread is paused at {seen.others} interrupt(s) that are not an effect review "
            "(e.g. a human-input node); answering them is the application's business",
            "not_resumed",
        )
    waiting = [o for o in unresolved if waits_for_human(o)]
    if seen.paused and all(o in waiting for o in moved):
        return (
            "awaiting_review",
            f"paused at the effect review ({seen.ours} interrupt(s)); {len(waiting)} operation(s) "
            "wait for an operator's verdict or approval",
            "awaiting_review",
        )
    busy = recently_active(seen, unresolved, policy.min_idle)
    if busy is not None:
        return "recently_active", busy, "not_resumed"
    tenants = {o.tenant for o in moved}
    if len(tenants) > 1:
        why = f"its operations belong to several tenants ({sorted(tenants)}); resume it by hand"
        return "failed", why, "not_resumed"
    configured = policy.configured_tenant
    if configured is not None and configured != tenant:
        return (
            "failed",
            f"config sets tenant_id={configured!r} but the thread's operations were recorded "
            f"under tenant {tenant!r}; resuming under another tenant would make new operations",
            "not_resumed",
        )
    return None


def recently_active(seen: Observation, unresolved: Sequence[Operation], min_idle: float) -> str | None:
    """Why the thread may be running right now, or ``None`` if it has been still."""
    if min_idle <= 0:
        return None
    if any(o.state is State.DISPATCHED for o in unresolved):
        # An expired lease: its sender is gone. Another worker may have resumed the
        # thread since; that is not proof of the contrary, and needs none: the
        # checkpointer lets only one of us move the thread on (running_elsewhere).
        return None
    wait = (
        f"it may be running right now. Run recovery again once it has been still for {min_idle:g}s "
        "(or with min_idle=0 / --min-idle 0 if no other worker can be running it)"
    )
    for o in unresolved:
        if decided_out_of_band(o) or (seen.paused and waits_for_human(o)):
            continue  # an operator's verdict, or a steady wait at our interrupt
        age = seen.now - o.updated_at
        if age < min_idle:
            return (
                f"{o.op_id} ({o.state.value}) changed {age:.0f}s ago and no expired lease proves "
                f"its worker gone: {wait}"
            )
    stamp = seen.checkpoint_at
    if not seen.paused and stamp is not None and seen.now - stamp < min_idle:
        return (
            f"its last checkpoint is {seen.now - stamp:.0f}s old and no expired lease proves its "
            f"worker gone: {wait}"
        )
    return None


def _live_reason(live: Sequence[Operation], seen: Observation) -> str:
    parts = []
    for o in live:
        who = seen.senders.get(o.op_id, "a worker")
        left = max(0.0, (o.lease_expires_at or seen.now) - seen.now)
        parts.append(f"{o.op_id} ({o.tool}) is being sent by {who} (lease live for another {left:.0f}s)")
    return "; ".join(parts) + ": not touched"
