"""An effect's undo: the call that undoes it, recorded bound to the effect, and the
undos a settled call orders.

1. **Request** (`request_compensation`): one ledger transaction locks the
   effect's row, asks the pure rule (`may_compensate`)
   and, for a confirmed effect with a declared undo, marks it (``compensate``: it stays
   ``confirmed``, its evidence names the undo) and inserts the undo's operation
   (``pending``, its ``extra`` names the effect) in the same commit. The undo's id is
   derived from the effect's id, so asking twice finds the same undo. An ``unknown``
   effect is sent to review instead: nothing is undone while its outcome is in doubt.
2. **Run**: the undo is a tool call like any other, driven through the per-call
   protocol by a `Session` (`run_undo`), which this module is handed as ``run``
   (`RunUndo`): dispatch marker and lease before it leaves, its outcome recorded
   after, and after a crash its dead lease is taken over and the undo reconciled from
   its own contract (dedup, lookup, or review), never blindly sent again.

What a settled call orders (`finish_ordered`: its own undo, marked or asked for by an
operator's verdict; `run_saga`: the undos of the earlier effects of its saga) is run
by the session after the call, before it answers (see `Session.call_steps`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import ToolMessage

from ..core import identity
from ..core.compensation import (
    Decision,
    mark_change,
    may_compensate,
    receipt_of,
    review_change,
    saga_plan,
    undo_call_id,
    undo_operation_id,
    undo_ordered,
    undo_state,
)
from ..core.contract import Effect, Undo, UndoRequest
from ..core.operation import Operation, State, advance
from ..core.text import require_text
from ..errors import CompensationError, OperationNotFoundError
from ..ledger.base import (
    DEFAULT_ACTOR,
    Ledger,
    OperationQuery,
    Plan,
    insert_step,
    now,
)
from ..ledger.codec import audit_row
from ..ledger.steps import CasWithAudit, Load, Lock
from .messages import load
from .operator import operation_to_json
from .shapes import CompensationJSON

log = logging.getLogger("langgraph_effects")

#: Undo states a run drives on (``review`` waits for an operator).
TO_FINISH = frozenset({State.PENDING, State.DISPATCHED, State.UNKNOWN})

RunUndo = Callable[[Operation, Operation, Undo], Awaitable[tuple[Operation, str | None]]]
"""Runs an undo's operation (for the effect it undoes, with its declared `Undo`) as a
call through the per-call protocol until it is settled or waits for a human: its row as
stored afterwards, and what it raised (if it did). The session's `run_undo`."""


@dataclass(frozen=True)
class CompensationReport:
    """How one compensation stands: the effect, its undo (if recorded), and why."""

    operation: Operation
    """The effect, as stored afterwards."""
    undo: Operation | None
    """Its undo's operation as stored afterwards (``None``: none was recorded)."""
    verdict: str
    """What the rule said: ``compensate``, ``requested``, ``review_first``, ... (see
    `may_compensate`)."""
    reason: str
    error: str | None = None
    """What the undo raised, when it raised (its row says how that was recorded)."""

    @property
    def state(self) -> str:
        """How the compensation stands in one phrase (``undone``, ``in review``...)."""
        if self.undo is None and self.verdict == "review_first":
            return "effect sent to review"
        return undo_state(self.undo)

    def to_json(self) -> CompensationJSON:
        """What ``langgraph-effects compensate --json`` prints (and each of a recovery
        report's ``compensations``)."""
        return {
            "operation": operation_to_json(self.operation),
            "undo": operation_to_json(self.undo) if self.undo is not None else None,
            "verdict": self.verdict,
            "reason": self.reason,
            "compensation": self.state,
            "error": self.error,
        }


def undo_for(op: Operation, effects: Mapping[str, Effect]) -> Undo | None:
    """The undo ``op``'s tool declares in ``effects``, if any."""
    effect = effects.get(op.tool)
    return effect.undo if effect is not None else None


def _decoded(op: Operation) -> Any:
    """The recorded output of ``op`` (a ToolMessage's content), or ``None``."""
    if op.result is None or op.result_type is None:
        return None
    try:
        value = load(op.result_type, op.result)
    except Exception:  # an output we cannot read is no receipt
        return None
    return value.content if isinstance(value, ToolMessage) else value


def undo_arguments(op: Operation, undo: Undo) -> dict[str, Any]:
    """The undo's full arguments, derived from the effect as stored (the same every time)."""
    request = UndoRequest(
        operation_id=op.op_id,
        provider_key=op.provider_key,
        tool=op.tool,
        args=dict(op.args),
        receipt=receipt_of(op, _decoded(op)),
    )
    return undo.arguments(request)


def undo_operation(op: Operation, undo: Undo, *, hash_key: bytes | None) -> Operation:
    """The undo's operation for effect ``op`` (not yet stored)."""
    effect = undo.contract
    args = undo_arguments(op, undo)
    op_id = undo_operation_id(op.op_id)
    key = effect.key(args, {}) if effect.key is not None else identity.default_provider_key(op_id)
    return Operation(
        op_id=op_id,
        thread_id=op.thread_id,
        tool=undo.tool_name,
        tool_call_id=undo_call_id(op),
        args=identity.redact(args, effect.secret_fields),
        args_hash=identity.args_hash(identity.identifying_args(args, effect.key_argument), key=hash_key),
        provider_key=key,
        contract=effect.kind,
        checkpoint_ns=op.checkpoint_ns,
        tenant=op.tenant,
        policy_version=op.policy_version,
        checkpoint_id=op.checkpoint_id,
        extra={"compensates": op.op_id},
    )


def request_plan(
    op_id: str,
    effects: Mapping[str, Effect],
    *,
    actor: str,
    channel: str,
    reason: str | None,
    hash_key: bytes | None,
    tenant: str | None = None,
) -> Plan[tuple[Decision, Operation, Operation | None]]:
    """Lock the effect, decide, and record the undo (or send the effect to review),
    in one transaction. Returns the decision and both rows as stored."""
    before = yield Lock(op_id)
    if before is None or (tenant is not None and before.tenant != tenant):
        raise OperationNotFoundError(op_id)
    undo = undo_for(before, effects)
    decision = may_compensate(before, undoable=undo is not None)
    if decision.verdict == "requested":
        assert before.compensated_by is not None
        found = (yield Load((before.compensated_by,))).get(before.compensated_by)
        return decision, before, found
    if decision.verdict not in ("compensate", "review_first"):
        return decision, before, None
    if decision.verdict == "review_first":
        change = review_change(actor=actor, channel=channel, reason=reason)
        after = advance(before, change, expected_version=before.version, now=now())
        assert after is not None
        yield CasWithAudit(after, before.version, audit_row(before, after, change, actor))
        return decision, after, None
    assert undo is not None
    # The undo's intent first: if its provider key is taken nothing was written and the
    # request is refused; otherwise the mark (under the row lock) cannot miss.
    made = undo_operation(before, undo, hash_key=hash_key)
    insert = insert_step([made], None, actor)
    if made.op_id not in (yield insert):
        raise CompensationError(
            op_id,
            "key_taken",
            f"the undo's provider key {made.provider_key!r} already belongs to another "
            "operation in this tenant; give the undo its own key (Undo(effect=Effect(key=...)))",
        )
    change = mark_change(before, made.op_id, actor=actor, channel=channel, reason=reason)
    after = advance(before, change, expected_version=before.version, now=now())
    assert after is not None
    yield CasWithAudit(after, before.version, audit_row(before, after, change, actor))
    return decision, after, insert.ops[0]


async def request_compensation(
    ledger: Ledger,
    op_id: str,
    *,
    effects: Mapping[str, Effect],
    actor: str = DEFAULT_ACTOR,
    channel: str = "api",
    reason: str | None = None,
    hash_key: bytes | None = None,
    tenant: str | None = None,
) -> CompensationReport:
    """Record that effect ``op_id`` must be undone (see the module docstring); runs nothing.

    Raises [`CompensationError`][langgraph_effects.errors.CompensationError] when it cannot be
    compensated (nothing landed, no undo declared, being sent right now...), with the
    reason; an ``unknown`` effect is sent to review and reported (``review_first``).
    An actor, reason or tenant holding a lone surrogate is refused
    (`UnencodableValueError`).
    """
    for value, name in ((op_id, "op_id"), (actor, "actor"), (reason, "reason"), (tenant, "tenant")):
        require_text(value, name, "Give it as valid text.")
    key = hash_key if hash_key is not None else identity.hash_key_from_env()
    decision, op, undo = await ledger.transact(
        lambda: request_plan(
            op_id, effects, actor=actor, channel=channel, reason=reason, hash_key=key, tenant=tenant
        )
    )
    if not decision.allowed and decision.verdict != "review_first":
        raise CompensationError(op_id, decision.verdict, decision.reason)
    return CompensationReport(op, undo, decision.verdict, decision.reason)


async def run_requested(
    run: RunUndo, report: CompensationReport, effects: Mapping[str, Effect]
) -> CompensationReport:
    """``run`` the undo a request recorded (`request_compensation`'s ``report``) unless it
    is settled or in review: the report with the undo as stored afterwards, and what it
    raised (if it did)."""
    undo = undo_for(report.operation, effects)
    if report.undo is None or undo is None or report.undo.state not in TO_FINISH:
        return report
    ran, error = await run(report.undo, report.operation, undo)
    return CompensationReport(report.operation, ran, report.verdict, report.reason, error)


async def finish_ordered(
    run: RunUndo,
    ledger: Ledger,
    op: Operation,
    effects: Mapping[str, Effect],
    *,
    hash_key: bytes | None = None,
) -> CompensationReport | None:
    """Finish the undo ``op``'s own record orders (see
    `undo_ordered`), exactly once: recorded
    now if only the verdict that asked for it was written, run if a crash left it
    unsent (``pending``) or its sender gone (its own contract then decides re-send or
    review), left alone once settled or in review. ``None`` if ``op`` orders no undo.

    What a replay of the call does before it answers, so a resume finishes an undo
    an operator ordered as a saga's failed step finishes its own. Raises
    `CompensationError` when the undo cannot be
    recorded (its tool declares none any more); nothing is written then.
    """
    if not undo_ordered(op):
        return None
    if op.compensated_by is not None:
        found = await ledger.get(op.compensated_by)
        if found is not None and found.state not in TO_FINISH:
            return CompensationReport(op, found, "requested", "already settled")
    evidence = op.evidence or {}  # who ordered it: the verdict's (or the mark's) actor
    report = await request_compensation(
        ledger,
        op.op_id,
        effects=effects,
        actor=str(evidence.get("actor") or DEFAULT_ACTOR),
        channel=str(evidence.get("channel") or "api"),
        hash_key=hash_key,
    )
    return await run_requested(run, report, effects)


@dataclass(frozen=True)
class SagaReport:
    """What a saga did after one of its calls failed definitively."""

    failed: Operation
    compensations: tuple[CompensationReport, ...] = ()
    unsettled: tuple[Operation, ...] = ()
    """Earlier effects in doubt: left to their own reconciliation or review, not undone."""
    irreversible: tuple[Operation, ...] = ()
    """Earlier confirmed effects that declare no undo: reported, never guessed at."""


async def run_saga(
    run: RunUndo,
    ledger: Ledger,
    failed: Operation,
    effects: Mapping[str, Effect],
    *,
    hash_key: bytes | None = None,
) -> SagaReport | None:
    """Undo the earlier confirmed effects of ``failed``'s saga (same thread, same saga
    instance), newest first, each exactly once (see
    `saga_plan`); ``None`` if it is in none.
    Safe to run again: marked effects finish the undo they have."""
    saga = failed.extra.get("saga")
    if not saga:
        return None
    query = OperationQuery(
        states=frozenset(State), thread_id=failed.thread_id, tenant=failed.tenant, limit=10_000
    )
    steps = [op for op in await ledger.list_operations(query) if op.extra.get("saga") == saga]
    plan = saga_plan(steps, failed, lambda op: undo_for(op, effects) is not None)
    if plan is None:
        return None
    reports: list[CompensationReport] = []
    reason = f"saga {saga}: {failed.tool} ({failed.op_id}) failed definitively"
    for op in (*plan.undo, *plan.done):
        try:
            report = await request_compensation(
                ledger, op.op_id, effects=effects, actor="saga", channel="saga", reason=reason,
                hash_key=hash_key,
            )
            reports.append(await run_requested(run, report, effects))
        except CompensationError as error:  # moved since it was read: reported, not raised
            reports.append(CompensationReport(op, None, error.verdict, error.reason))
    for op in plan.unsettled:
        log.warning("%s: %s %s is in doubt (%s); it is not undone", reason, op.tool, op.op_id, op.state)
    for op in plan.irreversible:
        log.warning("%s: %s %s declares no undo; it stands", reason, op.tool, op.op_id)
    return SagaReport(failed, tuple(reports), plan.unsettled, plan.irreversible)
