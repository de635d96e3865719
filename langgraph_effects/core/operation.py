"""The operation state machine: pure code, no I/O.

Every allowed transition is one row of `TRANSITIONS` ("Rule 1": if it is not
in the table, it cannot happen). Backends never decide anything: they load an
[`Operation`][langgraph_effects.Operation], call `advance`, and store what it returns under a
compare-and-set on [`Operation.version`][langgraph_effects.Operation.version]. The docs' state diagram
(``docs/states.md``) is generated from the same table by `mermaid`.
"""

from __future__ import annotations

import enum
import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import (
    ApprovalError,
    DecisionConflictError,
    IllegalTransitionError,
    NotResolvableError,
    StaleVersionError,
)


class State(str, enum.Enum):
    """Where an operation stands. Only evidence moves it."""

    PENDING = "pending"
    """Intent recorded; nothing has left the worker (or an operator cleared a re-send)."""
    DISPATCHED = "dispatched"
    """Committed immediately before the request left; carries an owner and a lease."""
    UNKNOWN = "unknown"
    """The request may or may not have landed: a crash, an expired lease, a timeout."""
    REVIEW = "review"
    """Evidence cannot settle it; waiting for an operator's verdict."""
    CONFIRMED = "confirmed"
    """The effect landed (tool result, provider lookup, dedup replay or verdict)."""
    FAILED = "failed"
    """The provider definitely did not apply it (a definite error). Terminal: nothing is
    left to resolve. When the error was raised to the caller (not answered as a message),
    a retry of the call is a new attempt under the same key (``retry``)."""
    ABANDONED = "abandoned"
    """An operator (or a rejected approval) closed it without confirming the effect."""

    def __str__(self) -> str:
        return self.value


#: States with a recorded outcome, replayed to every later call (``failed`` reopens only
#: for a caller's retry of a failure it was raised, see `REOPENING`).
TERMINAL: frozenset[State] = frozenset({State.CONFIRMED, State.FAILED, State.ABANDONED})
#: States whose call is not over: what recovery and the console look for.
UNRESOLVED: frozenset[State] = frozenset(set(State) - TERMINAL)


class Event(str, enum.Enum):
    """What happened to an operation."""

    DISPATCH = "dispatch"
    """The worker is about to send the request (first send, or after a verdict)."""
    SUCCEED = "succeed"
    """The tool returned a result."""
    FAIL = "fail"
    """The tool raised a definite error: nothing happened at the provider."""
    LOSE = "lose"
    """The outcome is ambiguous: a timeout, an unknown exception, an expired lease."""
    WITHDRAW = "withdraw"
    """The tool paused itself with ``interrupt()`` before completing; it re-runs later."""
    CONFIRM = "confirm"
    """Reconciliation found evidence that the effect landed (lookup, dedup replay)."""
    RESEND = "resend"
    """Reconciliation proved a re-send safe (dedup key in its window, or authoritative absence)."""
    RETRY = "retry"
    """The caller tried again (``RetryPolicy``, ``ToolRetryMiddleware``, a re-run of the task)
    after a definite failure it was raised: a new attempt under the same key."""
    ESCALATE = "escalate"
    """Evidence cannot settle it: ask an operator."""
    LANDED = "landed"
    """Verdict: the operator checked and the effect landed."""
    NOT_LANDED = "not_landed"
    """Verdict: the operator checked and it did not land; cleared to send again."""
    ABANDON = "abandon"
    """Verdict (or rejected approval): close without confirming the effect."""
    COMPENSATE = "compensate"
    """A confirmed effect is to be undone: its undo (a new operation, named in the
    evidence's ``compensated_by``) is recorded in the same commit. It stays confirmed:
    the effect did land; the undo's own state says how the compensation stands."""
    LATE = "late"
    """The tool of a dispatch that was taken over finished anyway (a late send by an
    overtaken owner): a second request may have reached the provider. A note in the
    audit trail (see `NOTES`); nothing else changes."""

    def __str__(self) -> str:
        return self.value


#: Rule 1. (state, event) -> next state. Nothing else is allowed.
TRANSITIONS: Mapping[tuple[State, Event], State] = {
    (State.PENDING, Event.DISPATCH): State.DISPATCHED,
    (State.PENDING, Event.ABANDON): State.ABANDONED,
    (State.DISPATCHED, Event.SUCCEED): State.CONFIRMED,
    (State.DISPATCHED, Event.FAIL): State.FAILED,
    (State.DISPATCHED, Event.LOSE): State.UNKNOWN,
    (State.DISPATCHED, Event.WITHDRAW): State.PENDING,
    (State.FAILED, Event.RETRY): State.DISPATCHED,
    (State.UNKNOWN, Event.CONFIRM): State.CONFIRMED,
    (State.UNKNOWN, Event.RESEND): State.DISPATCHED,
    (State.UNKNOWN, Event.ESCALATE): State.REVIEW,
    (State.UNKNOWN, Event.LANDED): State.CONFIRMED,
    (State.UNKNOWN, Event.NOT_LANDED): State.PENDING,
    (State.UNKNOWN, Event.ABANDON): State.ABANDONED,
    (State.REVIEW, Event.LANDED): State.CONFIRMED,
    (State.REVIEW, Event.NOT_LANDED): State.PENDING,
    (State.REVIEW, Event.ABANDON): State.ABANDONED,
    (State.CONFIRMED, Event.COMPENSATE): State.CONFIRMED,
    # A note, from every state to itself (see NOTES).
    **{(state, Event.LATE): state for state in State},
}

#: Events that put a request on the wire: they take a lease and count an attempt.
SENDING: frozenset[Event] = frozenset({Event.DISPATCH, Event.RESEND, Event.RETRY})
#: The one way out of a terminal state: a caller's retry of a definite failure it was
#: raised. ``failed`` is terminal (nothing landed, nothing to resolve) until then.
REOPENING: Mapping[State, Event] = {State.FAILED: Event.RETRY}
#: Rows of the table that leave a terminal state where it is and only mark it: a
#: confirmed effect marked for compensation (see `compensation`).
MARKS: Mapping[State, Event] = {State.CONFIRMED: Event.COMPENSATE}
#: Events that only annotate the audit trail: the operation keeps its state, evidence,
#: result, owner and lease; only its version moves (so the note has its place in the
#: trail). The change's evidence goes to the audit row alone.
NOTES: frozenset[Event] = frozenset({Event.LATE})
#: Events that are an operator's verdict: they need a decision id.
VERDICTS: frozenset[Event] = frozenset({Event.LANDED, Event.NOT_LANDED, Event.ABANDON})
#: States a verdict may land on, derived from the table: the one place that says so.
DECIDABLE: frozenset[State] = frozenset(
    state for state in State if all((state, verdict) in TRANSITIONS for verdict in VERDICTS)
)


class EvidenceKind(str, enum.Enum):
    """What an audit entry's ``evidence["kind"]`` says moved the operation."""

    INTENT = "intent"
    """The intent (and, for direct calls, the dispatch marker) was recorded."""
    APPROVAL = "approval"
    """An approver approved, edited or rejected the call before its first send."""
    RESULT = "result"
    """The tool returned (``late`` when it arrived after a takeover)."""
    ERROR = "error"
    """The tool raised: definite or ambiguous, as the contract says."""
    RETRY = "retry"
    """The caller retried a definite failure it was raised (a new attempt, same key)."""
    TIMEOUT = "timeout"
    """The tool timed out: ambiguous."""
    LEASE = "lease"
    """The sender's lease expired or its owner died."""
    LATE = "late"
    """The tool of an overtaken dispatch finished after the takeover: a second request
    may have reached the provider (``outcome`` says what the tool did, ``sender`` who)."""
    INTERRUPT = "interrupt"
    """The tool paused itself with ``interrupt()``."""
    LOOKUP = "lookup"
    """The provider's lookup answered."""
    DEDUP = "dedup"
    """The provider deduplicates on the key within its window: a re-send is safe."""
    BLIND = "blind"
    """The provider can prove nothing: only an operator can settle it."""
    POLICY = "policy"
    """The tenant or policy version changed since the intent: no automatic re-send."""
    ATTEMPTS = "attempts"
    """The call used up its ``max_attempts``."""
    NOT_RUN = "not_run"
    """The call never started."""
    CONTROL = "control"
    """A budget or circuit breaker refused the send: nothing left."""
    VERDICT = "verdict"
    """An operator's verdict (interrupt answer, console or API)."""
    COMPENSATION = "compensation"
    """A compensation was requested: the undo it names was recorded (on a confirmed
    effect), or the outcome must be settled first (an ``unknown`` one goes to review)."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Owner:
    """Who holds a dispatch lease: enough to tell, on the same host, that it died."""

    host: str
    pid: int
    started: float
    """The process start time, so a recycled pid is not mistaken for the owner."""
    token: str
    """Unique per dispatch: siblings in one process are told apart by it."""
    lock: str | None = None
    """The lock file the owner holds while the dispatch runs (same-host liveness)."""
    since: float | None = None
    """When the dispatch began, in the unit of ``started`` (clock ticks since boot):
    processes the owner's process started since then are part of the dispatch."""
    node: str | None = None
    """The kernel (boot id) and pid namespace the owner runs in: its pid means
    something only there (containers may share a hostname)."""

    def to_json(self) -> dict[str, Any]:
        """The owner as stored in the ledger's ``owner`` column (JSON)."""
        # Field by field, not ``dataclasses.asdict`` (a recursive deep copy): every
        # dispatched row is encoded through here on the ledger's thread.
        data: dict[str, Any] = {
            "host": self.host,
            "pid": self.pid,
            "started": self.started,
            "token": self.token,
        }
        # Rows written before these fields existed look the same.
        if self.lock is not None:
            data["lock"] = self.lock
        if self.since is not None:
            data["since"] = self.since
        if self.node is not None:
            data["node"] = self.node
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Owner:
        """The owner `to_json` stored (rows without the newer fields included)."""
        return cls(
            host=str(data["host"]),
            pid=int(data["pid"]),
            started=float(data["started"]),
            token=str(data["token"]),
            lock=str(data["lock"]) if data.get("lock") else None,
            since=float(data["since"]) if data.get("since") is not None else None,
            node=str(data["node"]) if data.get("node") else None,
        )


@dataclass(frozen=True)
class Change:
    """One event with what it carries; the input of `advance`."""

    event: Event
    evidence: Mapping[str, Any] | None = None
    """What justified it: ``{"kind": EvidenceKind, ...}``, stored as plain JSON values."""
    owner: Owner | None = None
    lease_expires_at: float | None = None
    result_type: str | None = None
    result: bytes | None = None
    """The serialized tool output to replay, for ``succeed`` and ``fail``."""
    decision_id: str | None = None
    decision: Mapping[str, Any] | None = None
    """The verdict's content, bound to ``decision_id`` (for idempotency)."""
    lease_seen: float | None = None
    """For a takeover (``lose`` by lease): the lease expiry the taker saw. A heartbeat
    renews a lease without a new version, so the taker also compares this: a lease
    renewed since is still its owner's and the takeover is refused as stale."""

    def __post_init__(self) -> None:
        # Evidence reaches checkpoints (message artifacts, interrupt values), whose
        # serializer should see plain JSON values, never this package's enum types.
        if self.evidence is not None:
            object.__setattr__(self, "evidence", plain(self.evidence))


#: Values `plain` returns as they are, by exact type (an enum member of a ``str``
#: enum is not one): most of what evidence holds, told apart without the ``Mapping``
#: ABC check, which costs a Python-level call every time.
_LEAVES = frozenset({str, int, float, bool, type(None)})


def plain(value: Any) -> Any:
    """``value`` with enum members replaced by their values, mappings by dicts and
    sequences by lists: what JSON would give back."""
    if type(value) in _LEAVES:
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (dict, Mapping)):  # dict first: no ABC check for the usual case
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


@dataclass(frozen=True)
class Operation:
    """One logical side effect of one tool call: a row of the ledger."""

    op_id: str
    thread_id: str
    tool: str
    tool_call_id: str
    args: Mapping[str, Any]
    """The model's arguments, with secret fields redacted."""
    args_hash: str
    provider_key: str
    contract: str
    """What the provider can tell us: ``dedup``, ``lookup``, ``lookup-eventual`` or ``blind``."""
    checkpoint_ns: str = ""
    tenant: str = ""
    policy_version: str | None = None
    message_id: str | None = None
    task_id: str | None = None
    checkpoint_id: str | None = None
    state: State = State.PENDING
    version: int = 1
    attempts: int = 0
    owner: Owner | None = None
    lease_expires_at: float | None = None
    dispatched_at: float | None = None
    result_type: str | None = None
    result: bytes | None = None
    evidence: Mapping[str, Any] | None = None
    decisions: tuple[tuple[str, str], ...] = ()
    """(decision id, content digest) of every verdict applied, for idempotency."""
    created_at: float = 0.0
    updated_at: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Context recorded at intent. The runtime reads three keys: ``approval``
    (``"required"``: the call waits for an approver before its first send, see
    `needs_approval`), ``turn`` and ``origin`` (the checkpoint coordinates re-plan
    detection compares). ``edited_from`` (the operation an approver's edit replaced) is
    written for operators and never read; ``traceparent`` (the W3C span context of the
    call's first span, written only when a tracing SDK records it) is read by the
    telemetry alone, to link later spans to it. Other keys are kept and shown, never read."""

    @property
    def compensates(self) -> str | None:
        """For an undo: the id of the operation it undoes (recorded at its intent)."""
        found = self.extra.get("compensates")
        return str(found) if found else None

    @property
    def compensated_by(self) -> str | None:
        """For an effect marked for compensation: the id of its undo operation."""
        evidence = self.evidence or {}
        if evidence.get("kind") == "compensation" and evidence.get("compensated_by"):
            return str(evidence["compensated_by"])
        return None

    @property
    def terminal(self) -> bool:
        """Whether its state is in `TERMINAL`."""
        return self.state in TERMINAL

    def lease_live(self, now: float) -> bool:
        """Whether it is ``dispatched`` under a lease that has not run out at ``now``."""
        return (
            self.state is State.DISPATCHED
            and self.lease_expires_at is not None
            and self.lease_expires_at > now
        )


def decision_digest(decision: Mapping[str, Any] | None) -> str:
    """A stable digest of a verdict's content, to detect a reused decision id."""
    canonical = json.dumps(decision or {}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def create(op: Operation, *, now: float, change: Change | None = None) -> Operation:
    """The first row of an operation: ``pending``, or ``dispatched`` when ``change``
    is a ``dispatch`` (intent and dispatch marker in one commit)."""
    base = replace(op, state=State.PENDING, version=1, attempts=0, created_at=now, updated_at=now)
    if change is None:
        return base
    moved = advance(base, change, expected_version=1, now=now)
    assert moved is not None
    return replace(moved, version=1)


def advance(
    op: Operation,
    change: Change,
    *,
    expected_version: int | None,
    now: float,
    decidable_only: bool = False,
) -> Operation | None:
    """Apply ``change`` to ``op``. Pure.

    Returns the new operation (``version + 1``), or ``None`` when ``change`` is a
    verdict whose decision id was already applied with the same content (a no-op).
    Raises [`DecisionConflictError`][langgraph_effects.errors.DecisionConflictError] for a reused decision id
    with other content, [`StaleVersionError`][langgraph_effects.errors.StaleVersionError] if
    ``expected_version`` does not match, and
    [`IllegalTransitionError`][langgraph_effects.errors.IllegalTransitionError] if the table has no such row.
    ``decidable_only`` (an operator's verdict): a state outside `DECIDABLE` is refused with
    [`NotResolvableError`][langgraph_effects.errors.NotResolvableError], after the replay and version checks.
    """
    if change.event in VERDICTS and change.decision_id is None:
        raise ValueError(f"a {change.event} verdict needs a decision_id")
    if change.decision_id is not None:
        digest = decision_digest(change.decision)
        for seen_id, seen_digest in op.decisions:
            if seen_id == change.decision_id:
                if seen_digest == digest:
                    return None
                raise DecisionConflictError(op.op_id, change.decision_id)
    if expected_version is not None and expected_version != op.version:
        raise StaleVersionError(op.op_id, expected_version, op.version)
    if change.lease_seen is not None and op.lease_expires_at != change.lease_seen:
        raise StaleVersionError(op.op_id, op.version, op.version)
    if decidable_only and op.state not in DECIDABLE:
        raise NotResolvableError(op, change.event)
    target = TRANSITIONS.get((op.state, change.event))
    if target is None:
        raise IllegalTransitionError(op.op_id, op.state.value, change.event.value)

    sending = change.event in SENDING
    if sending and (change.owner is None or change.lease_expires_at is None):
        raise ValueError(f"a {change.event} needs an owner and a lease")
    if change.event is Event.DISPATCH and needs_approval(op):
        _check_approval(op, change)
    # A send starts a new attempt: an earlier attempt's outcome (a retried failure's
    # error message) must never be replayed as this one's.
    kept_type, kept = (None, None) if sending else (op.result_type, op.result)
    decisions = op.decisions
    if change.decision_id is not None:
        decisions = (*decisions, (change.decision_id, decision_digest(change.decision)))
    if change.event in NOTES:
        return replace(op, version=op.version + 1, decisions=decisions, updated_at=now)
    return replace(
        op,
        state=target,
        version=op.version + 1,
        attempts=op.attempts + 1 if sending else op.attempts,
        owner=change.owner if sending else None,
        lease_expires_at=change.lease_expires_at if sending else None,
        dispatched_at=now if sending else op.dispatched_at,
        result_type=change.result_type if change.result is not None else kept_type,
        result=change.result if change.result is not None else kept,
        evidence=change.evidence if change.evidence is not None else op.evidence,
        decisions=decisions,
        updated_at=now,
    )


def needs_approval(op: Operation) -> bool:
    """Whether the operation's first dispatch still needs a human approval."""
    return op.extra.get("approval") == "required" and op.attempts == 0


def _check_approval(op: Operation, change: Change) -> None:
    """An approval is bound to the arguments' hash and used once, in the dispatch commit."""
    evidence = change.evidence or {}
    if evidence.get("kind") != "approval" or evidence.get("decision") not in ("approve", "edit"):
        raise ApprovalError(op.op_id, "it needs a human approval before its first dispatch")
    if evidence.get("args_hash") != op.args_hash:
        raise ApprovalError(
            op.op_id, "the approval was given for other arguments (args hash differs)"
        )
    if change.decision_id is None:
        raise ApprovalError(op.op_id, "the approval carries no approval id")


#: Contracts whose provider received our provider key (it dedups on it, or is looked up by it).
KEYED_CONTRACTS = frozenset({"dedup", "lookup", "lookup-eventual"})


def _utc(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp))


def provider_check(op: Operation) -> str:
    """What an operator can check at the provider to tell whether ``op`` landed.

    A provider that dedups on our key, or is looked up by it, can be asked for the
    key. A blind one never received a key it keeps: the operator searches its own
    records (dashboard, logs, sent mail) for a call with these arguments in the time
    window it was sent in.
    """
    sent = op.dispatched_at if op.dispatched_at is not None else op.created_at
    window = f"between {_utc(sent)} and {_utc(max(op.updated_at, sent))}"
    if op.contract in KEYED_CONTRACTS:
        return f"Check the provider for key {op.provider_key} (sent {window})."
    return (
        f"Check {op.tool}'s own records at the provider (its dashboard, logs or sent items) for a "
        f"call with these arguments, sent {window}: this provider keeps no key of ours, so look "
        "for what it saw."
    )


def mermaid() -> str:
    """The state diagram, generated from `TRANSITIONS` (for the README)."""
    lines = ["stateDiagram-v2", "    [*] --> pending: intent", "    [*] --> dispatched: intent+dispatch"]
    for (source, event), target in TRANSITIONS.items():
        if event in NOTES:
            continue  # a note on every state, not a move (docs/states.md)
        lines.append(f"    {source.value} --> {target.value}: {event.value}")
    for state in sorted(TERMINAL, key=lambda s: s.value):
        lines.append(f"    {state.value} --> [*]")
    return "\n".join(lines)


@dataclass(frozen=True)
class Scope:
    """The authority a call runs under: recorded at intent, re-checked before a re-send."""

    tenant: str = ""
    policy_version: str | None = None
