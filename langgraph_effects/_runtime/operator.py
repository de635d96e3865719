"""The operator API's implementation: find unresolved operations, inspect one, record
a verdict. Import it from [`langgraph_effects.operator`][langgraph_effects.operator],
the public face the console (``langgraph-effects list/show/resolve``) is built on too.

A verdict is bound to the version the operator saw (``expected_version``): if the
operation moved since, it is refused and nothing changes. It is idempotent by its
decision id. It is written with ``verdict_change`` (``_runtime/decisions.py``), the same
change an answer to the graph's ``interrupt()`` produces, so the graph honours it on
its next resume exactly as if it had been given through ``Command(resume=...)``.
"""

from __future__ import annotations

import hashlib
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, ParamSpec, TypeVar, cast

from pydantic import BaseModel

from ..core.operation import DECIDABLE, UNRESOLVED, Change, Event, Operation, State
from ..core.text import require_json, require_text
from ..errors import (
    LeaseLiveError,
    OperationNotFoundError,
    StaleVersionError,
    VerdictNotRecordedError,
)
from ..ledger.base import AuditEntry, Ledger, OperationQuery, Transition
from ..ledger.controls import verdict_plan
from ..ledger.query import Cursor
from . import telemetry
from .decisions import (
    AnyVerdict,
    parse_verdict,
    verdict_change,
)
from .lease import lease_expired, owner_alive
from .shapes import (
    AuditEntryJSON,
    OperationJSON,
    OperationListJSON,
    OperationViewJSON,
    OwnerJSON,
    ResultSummaryJSON,
    Verdict,
    VerdictReportJSON,
)

__all__ = [
    "VERDICTS",
    "LeaseStatus",
    "OperationView",
    "VerdictReport",
    "allowed_verdicts",
    "audit_to_json",
    "lease_status",
    "list_operations",
    "new_decision_id",
    "operation_to_json",
    "operations_to_json",
    "resolve",
    "resolve_report",
    "show",
]

#: The verdicts an operator can give, in the order the console offers them.
VERDICTS: tuple[str, ...] = ("landed", "not_landed", "abandon")

LeaseStatus = Literal["live", "expired", "owner_dead"]
"""A ``dispatched`` operation's lease: someone is sending it (``live``), or its sender
is gone (``expired`` by time, or ``owner_dead``: its process is provably dead)."""


# -- reading ------------------------------------------------------------------------


def lease_status(op: Operation, *, now: float | None = None) -> LeaseStatus | None:
    """The lease of a ``dispatched`` operation (``None`` in any other state).

    Consistent with `langgraph_effects._runtime.lease.lease_expired`: ``live`` exactly
    when it is not expired.
    """
    if op.state is not State.DISPATCHED:
        return None
    if not lease_expired(op, now=now):
        return "live"
    if op.owner is not None and owner_alive(op.owner) is False:
        return "owner_dead"
    return "expired"


def allowed_verdicts(op: Operation, *, now: float | None = None) -> tuple[str, ...]:
    """The verdicts an operator may give on ``op`` now (empty: none may be given now)."""
    if op.state in DECIDABLE:
        return VERDICTS
    if op.state is State.DISPATCHED and lease_expired(op, now=now):
        return VERDICTS
    return ()


@dataclass(frozen=True)
class OperationView:
    """Everything an operator needs to decide on one operation."""

    operation: Operation
    audit: tuple[AuditEntry, ...]
    """Every transition, oldest first."""
    lease: LeaseStatus | None
    """The dispatch lease, for a ``dispatched`` operation."""
    allowed_verdicts: tuple[str, ...]
    """``landed``/``not_landed``/``abandon`` when a verdict may be given now, else empty."""

    @property
    def late_sends(self) -> tuple[AuditEntry, ...]:
        """The audit entries noting a late send (``late``): the tool of a dispatch that
        another worker took over finished anyway, so a second request may have reached
        the provider (see ``docs/leases.md``)."""
        return tuple(entry for entry in self.audit if entry.event == Event.LATE.value)

    def to_json(self) -> OperationViewJSON:
        """What ``langgraph-effects show --json`` prints (the result bytes are
        summarised, never included)."""
        return {
            "operation": operation_to_json(self.operation),
            "lease": self.lease,
            "allowed_verdicts": cast(list[Verdict], list(self.allowed_verdicts)),
            "audit": [audit_to_json(entry) for entry in self.audit],
            "late_sends": [audit_to_json(entry) for entry in self.late_sends],
        }


async def list_operations(
    ledger: Ledger,
    *,
    states: Iterable[State | str] | None = None,
    thread_id: str | None = None,
    tenant: str | None = None,
    tool: str | None = None,
    older_than: float | None = None,
    limit: int = 100,
    now: float | None = None,
    after: Cursor | None = None,
) -> list[Operation]:
    """Operations matching the filters, least recently changed first.

    ``states`` defaults to the unresolved ones (``pending``, ``dispatched``,
    ``unknown``, ``review``). ``older_than`` (seconds) keeps only operations that
    have not changed for at least that long. Use `lease_status` to tell a
    ``dispatched`` operation whose sender is gone from one being sent right now.
    """
    wanted = frozenset(State(s) for s in states) if states is not None else UNRESOLVED
    if not wanted:
        wanted = UNRESOLVED
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    updated_before = None
    if older_than is not None:
        if older_than < 0:
            raise ValueError(f"older_than must be a number of seconds >= 0, not {older_than}")
        updated_before = (time.time() if now is None else now) - older_than
    query = OperationQuery(wanted, thread_id, tenant, tool, updated_before, limit=limit, after=after)
    return await ledger.list_operations(query)


async def _get_scoped(ledger: Ledger, op_id: str, tenant: str | None) -> Operation:
    op = await ledger.get(op_id)
    if op is None or (tenant is not None and op.tenant != tenant):
        # Another tenant's operation is reported exactly like a missing one.
        raise OperationNotFoundError(op_id)
    return op


async def show(ledger: Ledger, op_id: str, *, tenant: str | None = None) -> OperationView:
    """One operation with its audit trail, lease status and the verdicts allowed now.

    With ``tenant``, an operation of another tenant is reported as not found.
    Arguments are stored redacted; the stored result is never part of the view's
    JSON (only its type, size and digest).
    """
    op = await _get_scoped(ledger, op_id, tenant)
    trail = await ledger.audit(op_id)
    stamp = time.time()
    return OperationView(
        operation=op,
        audit=tuple(trail),
        lease=lease_status(op, now=stamp),
        allowed_verdicts=allowed_verdicts(op, now=stamp),
    )


# -- resolving ----------------------------------------------------------------------


def new_decision_id() -> str:
    """A fresh decision id (``dec_`` + a uuid4). Reuse it to retry the same verdict."""
    return f"dec_{uuid.uuid4().hex}"


@dataclass(frozen=True)
class VerdictReport:
    """What `resolve_report` did."""

    operation: Operation
    """The operation as stored afterwards."""
    decision_id: str
    replayed: bool
    """The decision id was already applied with this content: nothing changed."""
    lease_lost: bool
    """The operation was ``dispatched`` with an expired lease: it was first recorded as
    lost (``dispatched -> unknown``), then the verdict was applied."""
    from_state: State
    """The state the operation was in when the verdict was given."""
    verdict: Mapping[str, Any]
    """The verdict as recorded (``{"type": "landed", "receipt": ...}``...)."""

    def to_json(self) -> VerdictReportJSON:
        """What ``langgraph-effects resolve --json`` prints."""
        return {
            "operation": operation_to_json(self.operation),
            "decision_id": self.decision_id,
            "verdict": dict(self.verdict),
            "from_state": self.from_state.value,
            "replayed": self.replayed,
            "lease_lost": self.lease_lost,
        }


#: The parameters of the function whose signature `_takes_arguments_of` copies.
P = ParamSpec("P")
#: What the decorated coroutine function returns.
T = TypeVar("T")


def _takes_arguments_of(
    model: Callable[P, Any],
) -> Callable[[Callable[..., Awaitable[T]]], Callable[P, Awaitable[T]]]:
    """Give the decorated function ``model``'s parameters: for type checkers and for
    ``inspect.signature``/``help()``; it must pass them on to ``model`` unchanged."""

    def decorate(function: Callable[..., Awaitable[T]]) -> Callable[P, Awaitable[T]]:
        returns = inspect.signature(function).return_annotation
        function.__signature__ = inspect.signature(model).replace(  # type: ignore[attr-defined]
            return_annotation=returns
        )
        return function

    return decorate


async def resolve_report(
    ledger: Ledger,
    op_id: str,
    verdict: AnyVerdict | Mapping[str, Any],
    *,
    expected_version: int,
    decision_id: str | None = None,
    actor: str,
    tenant: str | None = None,
    channel: Literal["console", "api"] = "api",
) -> VerdictReport:
    """`resolve`, reporting what happened (replayed, lease recorded as lost)."""
    if isinstance(expected_version, bool) or not isinstance(expected_version, int):
        raise TypeError(f"expected_version must be an int, not {expected_version!r}")
    if expected_version < 1:
        raise ValueError(f"expected_version must be at least 1, not {expected_version}")
    if not actor:
        raise ValueError("actor must name who gives the verdict (it goes into the audit trail)")
    _check_text(op_id, verdict, decision_id=decision_id, actor=actor, tenant=tenant)
    parsed = parse_verdict(verdict)
    did = decision_id if decision_id is not None else new_decision_id()
    if not did:
        raise ValueError("decision_id must not be empty")
    change = verdict_change(parsed, decision_id=did, actor=actor, channel=channel)
    with telemetry.acting("resolve", channel=channel) as told:
        op = await _get_scoped(ledger, op_id, tenant)
        told.operation(op)
        told.attributes(state_before=op.state.value)
        report = await _resolved(ledger, op, change, did, expected_version, actor, channel)
        if not report.replayed:
            lost = (Event.LOSE,) if report.lease_lost else ()
            told.moved(op, report.operation, (*lost, change.event))
        told.result = "replayed" if report.replayed else parsed.type
        return report


async def _resolved(
    ledger: Ledger, op: Operation, change: Change, did: str, expected_version: int, actor: str, channel: str
) -> VerdictReport:
    """The verdict ``change`` on ``op`` as read, recorded (see `resolve_report`)."""
    if op.state is State.DISPATCHED and did not in dict(op.decisions):
        return await _resolve_lost(ledger, op, change, did, expected_version, actor, channel)
    # The state machine checks the rest, in this order: a decision id already applied
    # (a replay, or a conflict), the version, then whether the state takes a verdict.
    result = await _verdict(ledger, op.op_id, change, expected_version, actor)
    return VerdictReport(
        result.op, did, replayed=not result.applied, lease_lost=False, from_state=op.state,
        verdict=change.decision or {},  # verdict_content of the parsed verdict
    )


_VERDICT_ADVICE = (
    "Give ids, the actor, notes and reasons as valid text, and the receipt as JSON (what the "
    "provider returned, e.g. {'id': 'ch_123'})."
)


def _check_text(
    op_id: str, verdict: Any, *, decision_id: str | None, actor: str, tenant: str | None
) -> None:
    """Refuse a verdict holding what cannot be stored as it is (a lone surrogate, a receipt
    that is not JSON), naming the value, before anything is read or written."""
    for value, name in ((op_id, "op_id"), (decision_id, "decision_id"), (actor, "actor"), (tenant, "tenant")):
        require_text(value, name, _VERDICT_ADVICE)
    content = verdict.model_dump() if isinstance(verdict, BaseModel) else verdict
    if isinstance(content, Mapping):
        require_json(dict(content), "the verdict", _VERDICT_ADVICE)


@_takes_arguments_of(resolve_report)
async def resolve(*args: Any, **kwargs: Any) -> Operation:
    """Record an operator's verdict on ``op_id``; returns the operation afterwards.

    Takes the arguments of [`resolve_report`][langgraph_effects.operator.resolve_report]:
    ``resolve(ledger, op_id, verdict, *, expected_version, decision_id=None, actor,
    tenant=None, channel="api")``.

    ``verdict`` is a verdict model or a mapping such as
    ``{"type": "landed", "receipt": {...}}``, ``{"type": "not_landed"}`` or
    ``{"type": "abandon", "reason": "..."}`` (the models:
    [`LandedVerdict`][langgraph_effects.LandedVerdict],
    [`NotLandedVerdict`][langgraph_effects.NotLandedVerdict],
    [`AbandonVerdict`][langgraph_effects.AbandonVerdict]). ``not_landed`` also gives
    back, in the same commit, the budget shares the operation was charged (see the
    Budgets page); the others keep them.

    Refusals change nothing:

    * ``expected_version`` is not the operation's version:
      [`StaleVersionError`][langgraph_effects.errors.StaleVersionError] (read it again);
    * the operation is ``dispatched`` under a live lease:
      [`LeaseLiveError`][langgraph_effects.errors.LeaseLiveError] (someone is sending
      it right now);
    * it is ``pending`` or terminal:
      [`NotResolvableError`][langgraph_effects.errors.NotResolvableError] (an
      [`IllegalTransitionError`][langgraph_effects.errors.IllegalTransitionError]);
    * ``decision_id`` was already used with other content:
      [`DecisionConflictError`][langgraph_effects.errors.DecisionConflictError];
    * with ``tenant``, an operation of another tenant:
      [`OperationNotFoundError`][langgraph_effects.errors.OperationNotFoundError].

    The same ``decision_id`` with the same content again is a no-op that returns the
    stored operation (safe to retry). A ``dispatched`` operation whose lease expired
    (or whose owner died) is first recorded as lost (``dispatched -> unknown``, at
    ``expected_version``), then resolved at ``expected_version + 1``; if that second
    write fails, [`VerdictNotRecordedError`][langgraph_effects.errors.VerdictNotRecordedError]
    says so (the operation is then ``unknown``, waiting for a verdict at the new
    version).
    """
    return (await resolve_report(*args, **kwargs)).operation


async def _resolve_lost(
    ledger: Ledger,
    op: Operation,
    change: Change,
    did: str,
    expected_version: int,
    actor: str,
    channel: str,
) -> VerdictReport:
    """A verdict on a ``dispatched`` operation: only once its lease is gone, and after
    recording it as lost (``dispatched -> unknown``)."""
    stamp = time.time()
    if not lease_expired(op, now=stamp):
        if op.version != expected_version:
            raise StaleVersionError(op.op_id, expected_version, op.version)  # read it again first
        raise LeaseLiveError(op, now=stamp)
    lost = await ledger.transition(
        op.op_id,
        Change(event=Event.LOSE, evidence=_lease_evidence(op, actor, channel, stamp)),
        expected_version=expected_version,
        actor=actor,
    )
    try:
        after = (await _verdict(ledger, op.op_id, change, lost.version, actor)).op
    except Exception as error:
        raise VerdictNotRecordedError(lost, error) from error
    return VerdictReport(
        after, did, replayed=False, lease_lost=True, from_state=op.state, verdict=change.decision or {}
    )


def _verdict(
    ledger: Ledger, op_id: str, change: Change, expected_version: int, actor: str
) -> Awaitable[Transition]:
    """Record a verdict in one commit, with what it does to the budgets the operation
    was charged (``not_landed`` gives the share back; see `verdict_plan`)."""
    where, stores = ledger.where, ledger.stores_controls
    return ledger.transact(lambda: verdict_plan(op_id, change, expected_version, actor, where, stores))


def _lease_evidence(op: Operation, actor: str, channel: str, now: float) -> dict[str, Any]:
    alive = owner_alive(op.owner) if op.owner is not None else None
    return {
        "kind": "lease",
        "reason": "owner_dead" if alive is False else "expired",
        "owner": op.owner.to_json() if op.owner is not None else None,
        "lease_expires_at": op.lease_expires_at,
        "observed_at": now,
        "actor": actor,
        "channel": channel,
    }


# -- JSON -----------------------------------------------------------------------------


def operation_to_json(op: Operation, *, now: float | None = None) -> OperationJSON:
    """A JSON-ready dict of ``op`` (as stored: arguments redacted), in the shape every
    console command and report uses for an operation (``OperationJSON``).

    The stored tool result is never included, only ``{"type", "bytes", "sha256"}``.
    """
    stamp = time.time() if now is None else now
    result: ResultSummaryJSON | None = None
    if op.result is not None:
        result = {
            "type": op.result_type,
            "bytes": len(op.result),
            "sha256": hashlib.sha256(op.result).hexdigest(),
        }
    return {
        "operation_id": op.op_id,
        "state": op.state.value,
        "version": op.version,
        "terminal": op.terminal,
        "lease": lease_status(op, now=stamp),
        "allowed_verdicts": cast(list[Verdict], list(allowed_verdicts(op, now=stamp))),
        "tool": op.tool,
        "contract": op.contract,
        "thread_id": op.thread_id,
        "checkpoint_ns": op.checkpoint_ns,
        "tenant": op.tenant,
        "policy_version": op.policy_version,
        "tool_call_id": op.tool_call_id,
        "message_id": op.message_id,
        "task_id": op.task_id,
        "checkpoint_id": op.checkpoint_id,
        "args": dict(op.args),
        "args_hash": op.args_hash,
        "provider_key": op.provider_key,
        "attempts": op.attempts,
        "owner": cast(OwnerJSON, op.owner.to_json()) if op.owner is not None else None,
        "lease_expires_at": op.lease_expires_at,
        "dispatched_at": op.dispatched_at,
        "result": result,
        "evidence": dict(op.evidence) if op.evidence is not None else None,
        "decision_ids": [decision for decision, _ in op.decisions],
        "extra": dict(op.extra),
        "compensates": op.compensates,
        "compensated_by": op.compensated_by,
        "created_at": op.created_at,
        "updated_at": op.updated_at,
    }


def audit_to_json(entry: AuditEntry) -> AuditEntryJSON:
    """A JSON-ready dict of one audit entry (``AuditEntryJSON``)."""
    return {
        "operation_id": entry.op_id,
        "seq": entry.seq,
        "at": entry.at,
        "actor": entry.actor,
        "from_state": entry.from_state.value if entry.from_state is not None else None,
        "to_state": entry.to_state.value,
        "event": entry.event,
        "version": entry.version,
        "evidence": dict(entry.evidence) if entry.evidence is not None else None,
    }


def operations_to_json(
    ops: Sequence[Operation], *, limit: int, now: float | None = None, following: str | None = None
) -> OperationListJSON:
    """What ``langgraph-effects list --json`` prints for ``ops``, found with ``limit``;
    ``following`` is the cursor of the next page (``list --after``), if there is one."""
    stamp = time.time() if now is None else now
    return {
        "count": len(ops),
        "limit": limit,
        "truncated": len(ops) >= limit,
        "next": following,
        "operations": [operation_to_json(op, now=stamp) for op in ops],
    }
