"""What recovery reports: per thread, per operation, and the whole run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

from .._runtime.shapes import (
    OperationReportJSON,
    RecoveryReportJSON,
    StateAtJSON,
    ThreadReportJSON,
    TransitionJSON,
)
from ..core.operation import Operation, State, needs_approval
from ..ledger.base import AuditEntry

if TYPE_CHECKING:
    from .._runtime.undo import CompensationReport

ThreadAction = Literal[
    "resumed",
    "would_resume",
    "in_flight_elsewhere",
    "recently_active",
    "awaiting_review",
    "paused_at_other_interrupt",
    "not_resumable",
    "failed",
    "nothing_to_do",
    "running_elsewhere",
]
"""What recovery did with a thread:

``resumed``
    resumed once (see [`ThreadReport.outcome`][langgraph_effects.ThreadReport.outcome]);
``would_resume``
    a dry run: it would have been resumed;
``in_flight_elsewhere``
    an operation is under a live lease: someone is sending it right now. Not touched;
``recently_active``
    changed less than ``min_idle`` seconds ago and no expired lease proves its
    worker gone: it may be running right now. Not touched; run recovery again later;
``awaiting_review``
    paused at our interrupt, and every unresolved operation waits for a verdict
    (or an approval): only a human can move it. Not touched;
``paused_at_other_interrupt``
    paused at an interrupt that is not ours: answering it is the application's
    business. Not touched;
``not_resumable``
    unresolved operations, but the thread has no pending work (its run ended, or
    the graph has no checkpoint for it): decide them with ``langgraph-effects resolve``;
``failed``
    the resume raised (see [`ThreadReport.error`][langgraph_effects.ThreadReport.error]), or the thread could
    not be resumed safely (operations of several tenants, a conflicting ``tenant_id``);
``nothing_to_do``
    (threads named explicitly) nothing is unresolved or waiting to be answered;
``running_elsewhere``
    another runner (a worker, another recovery) resumed the thread at the same time
    and saved first: the checkpointer stopped recovery's run before anything of it
    landed (one runner per thread). That runner owns the thread now. Not a failure.
"""

Settlement = Literal[
    "confirmed_by_lookup",
    "settled_by_dedup",
    "resent_under_key",
    "sent",
    "confirmed",
    "sent_to_review",
    "awaiting_review",
    "decided_by_operator",
    "replayed",
    "failed",
    "in_flight_elsewhere",
    "unsettled",
    "not_resumed",
    "would_resume",
]
"""How one operation was settled, derived from the audit entries its resume recorded:

``confirmed_by_lookup``
    an authoritative lookup found the effect (its receipt is in the evidence);
``settled_by_dedup``
    re-sent under the same provider key, which the provider deduplicates on: the
    effect happened once;
``resent_under_key``
    proven absent (by a lookup, or by an operator's ``not_landed``) and sent again
    under the same provider key;
``sent``
    nothing had been sent before the crash (a ``pending`` intent): sent now;
``confirmed``
    the tool ran and returned a result;
``sent_to_review``
    evidence cannot settle it (blind provider, dedup window over, lookup
    inconclusive, policy changed): it waits for an operator's verdict;
``awaiting_review``
    it already waited for a verdict (or an approval) and still does;
``decided_by_operator``
    an operator's verdict was applied while the thread ran;
``replayed``
    its outcome was already recorded (a verdict given out of band, or a result the
    crash kept from the checkpoint): answered from the ledger, nothing sent;
``failed``
    the provider rejected the re-send definitely;
``in_flight_elsewhere``
    under a live lease: not touched;
``unsettled``
    the resume did not settle it (see the thread's error);
``not_resumed``
    its thread was not resumed (see the thread's action);
``would_resume``
    a dry run: its thread would have been resumed (`OperationReport.detail`
    says what the resume is expected to do).
"""


# -- the report --------------------------------------------------------------------


@dataclass(frozen=True)
class TransitionReport:
    """One transition recorded while recovery resumed the thread (an audit entry)."""

    event: str
    from_state: State | None
    to_state: State
    version: int
    evidence: Mapping[str, Any] | None
    actor: str
    at: float

    @classmethod
    def of(cls, entry: AuditEntry) -> TransitionReport:
        """The transition an audit entry records."""
        return cls(**{f.name: getattr(entry, f.name) for f in fields(cls)})

    def to_json(self) -> TransitionJSON:
        """A JSON-ready dict (named as an audit entry's fields are)."""
        return {
            "event": self.event,
            "from_state": self.from_state.value if self.from_state is not None else None,
            "to_state": self.to_state.value,
            "version": self.version,
            "evidence": dict(self.evidence) if self.evidence is not None else None,
            "actor": self.actor,
            "at": self.at,
        }


@dataclass(frozen=True)
class OperationReport:
    """One operation of a thread recovery looked at: before -> after, and how."""

    op_id: str
    tool: str
    tool_call_id: str
    contract: str
    provider_key: str
    before: Operation | None
    """As stored before the resume (``None`` for an operation the resumed run created)."""
    after: Operation
    """As stored afterwards (the same as ``before`` when the thread was not resumed)."""
    how: Settlement
    detail: str
    """One sentence for a human: what happened and on what evidence."""
    transitions: tuple[TransitionReport, ...] = ()
    """The transitions recorded during the resume, oldest first."""

    @property
    def new(self) -> bool:
        """The resumed run created this operation (the model asked for more after recovery)."""
        return self.before is None

    def to_json(self) -> OperationReportJSON:
        """A JSON-ready dict (arguments and results are not included: use ``show``)."""
        return {
            "operation_id": self.op_id,
            "tool": self.tool,
            "tool_call_id": self.tool_call_id,
            "contract": self.contract,
            "provider_key": self.provider_key,
            "new": self.new,
            "before": _state_json(self.before) if self.before is not None else None,
            "after": _state_json(self.after),
            "how": self.how,
            "detail": self.detail,
            "transitions": [t.to_json() for t in self.transitions],
        }


@dataclass(frozen=True)
class ThreadReport:
    """What recovery did with one thread."""

    thread_id: str
    tenant: str
    action: ThreadAction
    reason: str
    """Why, in one sentence."""
    operations: tuple[OperationReport, ...] = ()
    outcome: Literal["completed", "interrupted", "stopped", "error"] | None = None
    """After a resume: the run ``completed``, was ``interrupted`` (something needs a
    human), ``stopped`` with work left, or raised an ``error``."""
    error: str | None = None
    interrupts: tuple[str, ...] = ()
    """Ids of the interrupts the thread is paused at afterwards."""
    seconds: float = 0.0

    @property
    def awaiting_review(self) -> tuple[str, ...]:
        """Operations of this thread that wait for an operator's verdict or an approval."""
        return tuple(
            op.op_id
            for op in self.operations
            if op.after.state is State.REVIEW or _awaiting_approval(op.after)
        )

    @property
    def needs_operator(self) -> bool:
        """Only a human can move this thread on now."""
        return bool(self.awaiting_review) or self.action in (
            "awaiting_review",
            "paused_at_other_interrupt",
            "not_resumable",
        )

    def to_json(self) -> ThreadReportJSON:
        """A JSON-ready dict."""
        return {
            "thread_id": self.thread_id,
            "tenant": self.tenant,
            "action": self.action,
            "reason": self.reason,
            "outcome": self.outcome,
            "error": self.error,
            "interrupts": list(self.interrupts),
            "awaiting_review": list(self.awaiting_review),
            "seconds": round(self.seconds, 3),
            "operations": [op.to_json() for op in self.operations],
        }


@dataclass(frozen=True)
class RecoveryReport:
    """What `recover` found and did, per thread and per operation."""

    ledger: str
    dry_run: bool
    started_at: float
    finished_at: float
    threads: tuple[ThreadReport, ...]
    options: Mapping[str, Any] = field(default_factory=dict)
    """The arguments recovery ran with (tenant, threads, min_idle, lease_grace)."""
    compensations: tuple[CompensationReport, ...] = ()
    """The interrupted compensations recovery finished (or, in a dry run, would):
    [`CompensationReport`][langgraph_effects.CompensationReport] each."""

    @property
    def resumed(self) -> tuple[ThreadReport, ...]:
        """Threads that were resumed."""
        return tuple(t for t in self.threads if t.action == "resumed")

    @property
    def nothing_to_do(self) -> bool:
        """No thread was (or, in a dry run, would be) resumed."""
        return not self.compensations and not any(
            t.action in ("resumed", "would_resume") for t in self.threads
        )

    @property
    def in_flight(self) -> tuple[ThreadReport, ...]:
        """Threads left alone because someone is sending one of their operations now."""
        return tuple(t for t in self.threads if t.action == "in_flight_elsewhere")

    @property
    def running_elsewhere(self) -> tuple[ThreadReport, ...]:
        """Threads another runner moved on first while recovery resumed them (not failures)."""
        return tuple(t for t in self.threads if t.action == "running_elsewhere")

    @property
    def failed(self) -> tuple[ThreadReport, ...]:
        """Threads whose resume raised or that could not be resumed safely."""
        return tuple(t for t in self.threads if t.action == "failed")

    @property
    def awaiting_review(self) -> tuple[str, ...]:
        """Every operation that now waits for an operator (verdict or approval)."""
        return tuple(op_id for t in self.threads for op_id in t.awaiting_review)

    @property
    def needs_operator(self) -> tuple[ThreadReport, ...]:
        """Threads only a human can move on (review, another interrupt, not resumable)."""
        return tuple(t for t in self.threads if t.needs_operator)

    def counts(self) -> dict[str, int]:
        """How many threads got each action, plus totals."""
        out: dict[str, int] = {}
        for t in self.threads:
            out[t.action] = out.get(t.action, 0) + 1
        out["threads"] = len(self.threads)
        out["operations_awaiting_review"] = len(self.awaiting_review)
        if self.compensations:
            out["compensations"] = len(self.compensations)
        return out

    def to_json(self) -> RecoveryReportJSON:
        """A JSON-ready dict (what ``langgraph-effects recover --json`` prints);
        each compensation in the shape ``compensate --json`` prints."""
        return {
            "ledger": self.ledger,
            "dry_run": self.dry_run,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "options": dict(self.options),
            "nothing_to_do": self.nothing_to_do,
            "counts": self.counts(),
            "awaiting_review": list(self.awaiting_review),
            "threads": [t.to_json() for t in self.threads],
            "compensations": [c.to_json() for c in self.compensations],
        }

    def summary(self) -> str:
        """A plain-text account, one line per thread and per operation (for logs)."""
        head = "Recovery (dry run)" if self.dry_run else "Recovery"
        undos = [
            f"  compensation of {c.operation.op_id} {c.operation.tool}: {c.state} ({c.reason})"
            for c in self.compensations
        ]
        if not self.threads:
            if undos:
                return "\n".join([f"{head} of {self.ledger}: no thread needs recovery.", *undos])
            return f"{head} of {self.ledger}: nothing to do, no thread needs recovery."
        resumed = sum(1 for t in self.threads if t.action in ("resumed", "would_resume"))
        verb = "would resume" if self.dry_run else "resumed"
        lines = [
            f"{head} of {self.ledger}: {len(self.threads)} thread(s) looked at, {resumed} {verb}"
            + (" (nothing to do)" if self.nothing_to_do else "")
            + "."
        ]
        for t in self.threads:
            outcome = f" -> {t.outcome}" if t.outcome else ""
            lines.append(f"  thread {t.thread_id}: {t.action.replace('_', ' ')}{outcome}: {t.reason}")
            if t.error:
                lines.append(f"    error: {t.error}")
            for op in t.operations:
                before = (
                    f"{op.before.state.value} v{op.before.version}" if op.before is not None else "new"
                )
                lines.append(
                    f"    {op.op_id} {op.tool}: {before} -> {op.after.state.value} "
                    f"v{op.after.version}: {op.how.replace('_', ' ')}: {op.detail}"
                )
        if self.awaiting_review:
            lines.append(
                f"  {len(self.awaiting_review)} operation(s) wait for an operator: "
                "langgraph-effects show OPERATION, then resolve it."
            )
        return "\n".join([*lines, *undos])


def _awaiting_approval(op: Operation) -> bool:
    """A gated call that waits for its approval."""
    return op.state is State.PENDING and needs_approval(op)


def _state_json(op: Operation) -> StateAtJSON:
    return {
        "state": op.state.value,
        "version": op.version,
        "attempts": op.attempts,
        "evidence": (op.evidence or {}).get("kind"),
    }


def _untouched(op: Operation, how: Settlement) -> OperationReport:
    """The report of an operation recovery did not touch."""
    details = {
        "in_flight_elsewhere": "someone is sending it right now (live lease): not touched",
        "awaiting_review": (
            "waits for an approval before its first send"
            if _awaiting_approval(op)
            else "waits for an operator's verdict"
        ),
    }
    return _report(op, op, how, details.get(how, f"left {op.state.value}: its thread was not resumed"))


def _report(
    before: Operation | None,
    after: Operation,
    how: Settlement,
    detail: str,
    transitions: Sequence[TransitionReport] = (),
) -> OperationReport:
    """The report of one operation (``before`` is ``None`` for one the resume created)."""
    identity = {name: getattr(after, name) for name in _IDENTITY}
    return OperationReport(
        before=before, after=after, how=how, detail=detail, transitions=tuple(transitions), **identity
    )


#: What names an operation in its report (copied from the operation as stored).
_IDENTITY = ("op_id", "tool", "tool_call_id", "contract", "provider_key")


