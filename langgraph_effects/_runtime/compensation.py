"""Compensation, for an operator: undo one effect (`compensate`), list the undos
(`compensations`), and finish every undo a crash interrupted (`finish_compensations`),
outside any graph.

The undo is recorded bound to the effect it undoes (`request_compensation`,
``_runtime/undo.py``) and run as the one call of a `Session` of its own
(`run_undo`), the same per-call protocol every tool call goes through. A graph's own
undos (an operator's verdict that asked for one, a saga's failed step) are run the same
way by the session of the call that orders them, before that call answers.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from ..core import identity
from ..core.compensation import undo_state
from ..core.contract import Effect
from ..core.operation import Operation, State
from ..ledger.base import DEFAULT_ACTOR, Ledger, OperationQuery
from . import telemetry
from .calls import Settings
from .lease import DEFAULT_LEASE_SECONDS, owner_alive_async
from .operator import operation_to_json
from .session import run_undo
from .shapes import CompensationListJSON
from .undo import TO_FINISH, CompensationReport, request_compensation, run_requested, undo_for


async def compensate(
    ledger: Ledger,
    op_id: str,
    *,
    effects: Mapping[str, Effect],
    actor: str = DEFAULT_ACTOR,
    reason: str | None = None,
    channel: str = "api",
    tenant: str | None = None,
    hash_key: bytes | None = None,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
) -> CompensationReport:
    """Undo effect ``op_id`` exactly once: record the undo, then run it.

    Args:
        ledger: the ledger holding the effect.
        op_id: the operation to undo (it must be ``confirmed``).
        effects: the tool contracts the graph runs with (the ``effects=`` of
            ``EffectToolNode``/``EffectMiddleware``); the effect's tool must declare
            ``Effect(compensate=...)``.
        actor: who asks (recorded in the audit trail).
        reason: why (recorded in the audit trail).
        channel: where the request came from (``"api"``, ``"console"``), for the audit.
        tenant: only an operation of this tenant (others count as missing).
        hash_key: the key of the undo's arguments hash (default: the environment's,
            as for the graph).
        lease_seconds: how long the undo's dispatch lease lasts.

    Safe to call again after a crash, from any process: the undo recorded the first
    time is finished, never a second one minted. An ``unknown`` effect is sent to
    review (``verdict == "review_first"``) and nothing is undone; after an operator's
    ``landed`` verdict, call it again.

    Raises:
        CompensationError: nothing landed, no undo is declared, or the effect is being
            sent right now; nothing was written.
        OperationNotFoundError: no such operation (in ``tenant``).
    """
    key = hash_key if hash_key is not None else identity.hash_key_from_env()
    with telemetry.acting("compensate", channel=channel) as told:
        requested = await request_compensation(
            ledger, op_id, effects=effects, actor=actor, reason=reason, channel=channel,
            tenant=tenant, hash_key=key,
        )
        run = partial(run_undo, ledger, hash_key=key, lease_seconds=lease_seconds)
        report = await run_requested(run, requested, effects)
        told.operation(report.operation)
        told.attributes(state_after=report.operation.state.value)
        told.result = report.verdict
        return report


async def compensations(
    ledger: Ledger, *, tenant: str | None = None, unfinished: bool = True, limit: int = 1000
) -> list[tuple[Operation, Operation | None]]:
    """``(undo, effect)`` pairs: every undo not settled yet (``unfinished``) or every
    undo, of ``tenant`` if given; ``effect`` is ``None`` if it is not in the ledger."""
    states = frozenset({*TO_FINISH, State.REVIEW}) if unfinished else frozenset(State)
    rows = await ledger.list_operations(OperationQuery(states=states, tenant=tenant, limit=limit))
    undos = [op for op in rows if op.compensates is not None]
    originals = await ledger.get_many(sorted({str(u.compensates) for u in undos}))
    return [(u, originals.get(str(u.compensates))) for u in undos]


def compensations_to_json(pairs: Sequence[tuple[Operation, Operation | None]]) -> CompensationListJSON:
    """What ``langgraph-effects compensations --json`` prints for the pairs
    [`compensations`][langgraph_effects.operator.compensations] found: each undo, the
    effect it undoes (``operation``) and how the compensation stands."""
    return {
        "compensations": [
            {
                "operation": operation_to_json(effect) if effect is not None else None,
                "undo": operation_to_json(undo),
                "compensation": undo_state(undo),
            }
            for undo, effect in pairs
        ]
    }


async def finish_compensations(
    ledger: Ledger,
    *,
    effects: Mapping[str, Effect],
    tenant: str | None = None,
    hash_key: bytes | None = None,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    only: Sequence[str] | None = None,
) -> list[CompensationReport]:
    """Finish every compensation a crash interrupted (an undo ``pending``,
    ``dispatched`` by a sender that is gone, or ``unknown``), each exactly once; undos in
    review, or being sent right now by a live worker, are reported and left alone.
    ``only``: just the undos of these effects."""
    key = hash_key if hash_key is not None else identity.hash_key_from_env()
    run = partial(run_undo, ledger, hash_key=key, lease_seconds=lease_seconds)
    reports: list[CompensationReport] = []
    for undo_op, effect_op in await compensations(ledger, tenant=tenant):
        if effect_op is None or (only is not None and effect_op.op_id not in only):
            continue
        undo = undo_for(effect_op, effects)
        if undo is None:
            why = _NO_UNDO.format(effect_op.tool)
            reports.append(CompensationReport(effect_op, undo_op, "irreversible", why))
            continue
        if undo_op.state is State.REVIEW:
            reports.append(CompensationReport(effect_op, undo_op, "requested", "the undo waits for review"))
            continue
        if undo_op.lease_live(time.time()) and (
            undo_op.owner is None or await owner_alive_async(undo_op.owner) is not False
        ):
            reports.append(CompensationReport(effect_op, undo_op, "requested", "the undo is being sent now"))
            continue
        with telemetry.acting("compensate") as told:
            told.operation(effect_op)
            told.result = "finished"
            ran, error = await run(undo_op, effect_op, undo)
        reports.append(CompensationReport(effect_op, ran, "requested", "finished", error))
    return reports


_NO_UNDO = (
    "the undo of {} is not among the effects given (Effect(compensate=...)): pass the "
    "graph's effects to finish it"
)


def effects_of(graph: Any) -> dict[str, Effect]:
    """The tool contracts a compiled graph's ``EffectToolNode``s and ``EffectMiddleware``s
    run with (what finishing its compensations needs), found by walking its nodes."""
    found: dict[str, Effect] = {}
    seen: set[int] = set()

    def walk(value: Any, depth: int) -> None:
        if value is None or depth > 4 or id(value) in seen:
            return
        seen.add(id(value))
        settings = getattr(value, "_settings", None)
        if isinstance(settings, Settings):
            found.update(settings.effects)
            return
        for name in ("bound", "_wrap_tool_call", "_awrap_tool_call", "func", "__self__"):
            inner = getattr(value, name, None)
            if inner is not None and not isinstance(inner, (str, int, float)):
                walk(inner, depth + 1)
        for cell in getattr(value, "__closure__", None) or ():
            try:
                walk(cell.cell_contents, depth + 1)
            except ValueError:  # an empty cell
                continue

    for node in getattr(graph, "nodes", {}).values():
        walk(node, 0)
    return found


