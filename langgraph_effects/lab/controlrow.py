"""The reliability controls' columns (issue 34): budgets, circuit breakers, compensation.

One row of ours, ``EffectToolNode (controls)``, against the dedup provider, runs three
opt-in columns (``langgraph-effects lab --controls``, or each named in
``--crash-points``). The other rows have no such feature, so only this row runs them:

``budget-race``
    ``Effect(budgets=[Budget("lab-sends", max_sends=1, per="run")])``: each operation is
    a run allowed one send. On every faulted operation two workers start two threads of
    that run (``op-i`` and ``op-i-twin``, the same notification) and are released
    together before either decides anything. Meant: one effect per run at the provider,
    no request beyond what landed, and the loser answered with ``BudgetExceededError``
    (nothing sent), its operation recorded ``abandoned``.
``circuit-open``
    ``Effect(circuit=CircuitBreaker("lab-provider", failures=2, cooldown=600))``. From the
    operation before the first faulted one on, the provider answers every send with a
    429 the contract declares definite; the faulted operations run on two workers at
    once, so the failure that opens the circuit races the other worker's send. Meant:
    every request the provider received was dispatched before the circuit's
    ``opened_at`` (the cooldown outlasts the cell: no half-open probe), every later call
    answered with ``CircuitOpenError`` without a request.
``undo-killed``
    A saga: the thread sends a notification whose ``Effect`` declares an undo
    (``compensate=Undo(cancel, effect=Effect(dedup_window=...))``), then a charge of the
    same saga that the provider refuses (a 422, definite): the node undoes the
    notification. On a faulted operation the worker is SIGKILLed in the undo, before it
    is sent (``after_intent``) or after the provider applied it (``before_outcome``),
    taking turns, and the thread is taken up by a plain resume or by ``recover()``,
    taking turns. Meant: the notification and exactly one undo at the provider.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt.tool_node import ToolCallRequest

from .._integrations.node import EffectToolNode
from .._runtime.context import current_operation
from .._runtime.messages import load
from ..core.contract import Effect, Undo, UndoRequest
from ..core.controls import Budget, CircuitBreaker
from ..core.operation import Operation, State
from ..ledger.query import OperationQuery
from ..ledger.registry import open_ledger
from .faults import CIRCUIT_COOLDOWN, CONTROL_COLUMNS, CRASH_POINTS
from .ours import DEFINITE_ERRORS, audit_ledger, install_fault_points
from .strategies import (
    CHARGE_TOOL,
    TOOL_NAME,
    UNDO,
    AuditCounts,
    BuildContext,
    CellFiles,
    CellReport,
    Strategy,
    register,
)

NAME = "EffectToolNode (controls)"
BUDGET = Budget("lab-sends", max_sends=1, per="run")
#: Two failures open it; after each cooldown one probe may go (and fails: it reopens it).
CIRCUIT = CircuitBreaker("lab-provider", failures=2, within=600, cooldown=CIRCUIT_COOLDOWN)
#: Clock reads of one transaction differ by microseconds: what a timestamp rule forgives.
CLOCK_SLACK = 0.005

ToolOutput = ToolMessage | Any


def _saga(args: Any, config: Any) -> str:
    return f"trip:{args['operation']}"


def _tools(ctx: BuildContext) -> tuple[list[BaseTool], dict[str, Effect]]:
    """The send (and, in ``undo-killed``, the charge) with the column's contract."""
    client = ctx.client
    window = client.provider.retention

    @tool(TOOL_NAME)
    async def send_notification(operation: str, body: str) -> str:
        """Send one notification."""
        receipt = client.send({"operation": operation, "body": body}, key=current_operation().provider_key)
        return f"sent {receipt.effect_id}"

    if ctx.crash_point == "budget-race":
        effect = Effect(dedup_window=window, definite_errors=DEFINITE_ERRORS, budgets=[BUDGET])
        return [send_notification], {TOOL_NAME: effect}
    if ctx.crash_point == "circuit-open":
        effect = Effect(dedup_window=window, definite_errors=DEFINITE_ERRORS, circuit=CIRCUIT)
        return [send_notification], {TOOL_NAME: effect}

    async def cancel(operation: str) -> str:
        # The undo's own operation: its provider key is its idempotency key.
        payload = {"operation": operation + UNDO}
        receipt = client.provider.apply(payload, key=current_operation().provider_key)
        return f"cancelled {receipt.effect_id}"

    @tool(CHARGE_TOOL)
    async def charge_card(operation: str, amount: int) -> str:
        """Charge the card for the trip."""
        payload = {"operation": operation + "/charge", "amount": amount, "reject": True}
        receipt = client.send(payload, key=current_operation().provider_key)
        return f"charged {receipt.effect_id}"

    undo = Undo(
        cancel,
        args=_undo_args,
        effect=Effect(dedup_window=window, definite_errors=DEFINITE_ERRORS),
    )
    effects = {
        TOOL_NAME: Effect(dedup_window=window, definite_errors=DEFINITE_ERRORS, saga=_saga, compensate=undo),
        CHARGE_TOOL: Effect(dedup_window=window, definite_errors=DEFINITE_ERRORS, saga=_saga),
    }
    return [send_notification, charge_card], effects


def _undo_args(request: UndoRequest) -> dict[str, Any]:
    return {"operation": request.args["operation"]}


async def build(ctx: BuildContext) -> EffectToolNode:
    """``EffectToolNode`` with the column's budget, circuit breaker or undo."""
    faults = ctx.faults
    install_fault_points(faults, undo_points=True)

    async def line_up(
        request: ToolCallRequest, execute: Callable[[ToolCallRequest], Awaitable[ToolOutput]]
    ) -> ToolOutput:
        faults.meet()  # two workers racing meet here, before either decides anything
        return await execute(request)

    tools, effects = _tools(ctx)
    return EffectToolNode(tools, effects=effects, handle_tool_errors=True, awrap_tool_call=line_up)


# -- the parent side ---------------------------------------------------------------


def _artifact_error(op: Operation) -> str | None:
    """The ``error`` of the ToolMessage recorded as ``op``'s answer (a refusal's)."""
    if op.result is None or op.result_type is None:
        return None
    message = load(op.result_type, op.result)
    artifact = getattr(message, "artifact", None)
    return str(artifact.get("error")) if isinstance(artifact, dict) else None


async def _ledger_view(files: CellFiles) -> tuple[list[Operation], list[Any]]:
    async with open_ledger(str(files.ledger), read_only=True) as ledger:
        ops = await ledger.list_operations(OperationQuery(limit=100_000))
        return ops, list(await ledger.control_rows())


def audit_controls(files: CellFiles) -> AuditCounts:
    """`audit_ledger`, and what the controls recorded: refusals by control
    (and what the model was told), undos by state, the circuit's ``opened_at`` and the
    sends dispatched after it."""
    base = audit_ledger(files)
    ops, rows = asyncio.run(_ledger_view(files))
    abandoned = [op for op in ops if op.state is State.ABANDONED]
    told = [_artifact_error(op) for op in abandoned]
    undos = [op for op in ops if op.compensates is not None]
    circuit = next((r for r in rows if r.control == CIRCUIT.control), None)
    failed = [op for op in ops if op.state is State.FAILED]
    before, probes, while_open = circuit_sends(failed) if circuit is not None else (0, 0, 0)
    details = {
        **base.details,
        "refused_budget": sum(1 for op in abandoned if _control(op) == BUDGET.control),
        "refused_circuit": sum(1 for op in abandoned if _control(op) == CIRCUIT.control),
        "told_budget_exceeded": told.count("BudgetExceededError"),
        "told_circuit_open": told.count("CircuitOpenError"),
        "abandoned": len(abandoned),
        "failed": len(failed),
        "undos": len(undos),
        "undos_confirmed": sum(1 for op in undos if op.state is State.CONFIRMED),
        "circuit_opened": int(circuit is not None and circuit.state.get("opened_at") is not None),
        "sent_before_open": before,
        "probes": probes,
        "sent_while_open": while_open,
    }
    return AuditCounts(base.non_terminal, details, base.open_by_thread)


def circuit_sends(failed: list[Operation]) -> tuple[int, int, int]:
    """The failed sends of ``circuit-open`` against the breaker's rule: how many were
    dispatched before the circuit opened (at the failure that made the count reach the
    threshold), how many are half-open probes (dispatched a cooldown or more after the
    failure that last opened it; each probe's own failure opens it again), and how many
    were dispatched while it was open (the rule broken)."""
    by_failure = sorted(op.updated_at for op in failed)
    if len(by_failure) < CIRCUIT.failures:
        return len(failed), 0, 0
    opened = by_failure[CIRCUIT.failures - 1]
    before = probes = while_open = 0
    for op in sorted(failed, key=lambda o: o.dispatched_at or 0.0):
        at = op.dispatched_at or 0.0
        if at <= opened + CLOCK_SLACK and not probes:
            before += 1
        elif at + CLOCK_SLACK >= opened + CIRCUIT_COOLDOWN:
            probes += 1
            opened = op.updated_at  # the probe failed: open again from here
        else:
            while_open += 1
    return before, probes, while_open


def _control(op: Operation) -> str | None:
    evidence = op.evidence or {}
    return str(evidence["control"]) if "control" in evidence else None


def check_controls(report: CellReport) -> list[str]:
    """The column's own verdict, beyond 0 duplicates / 0 missing / 0 left open."""
    d = report.audit.details if report.audit is not None else {}
    problems: list[str] = []
    if report.sent_to_review:
        problems.append(f"{report.sent_to_review} operations sent to review (nothing here is in doubt)")
    if report.crash_point == "budget-race":
        if report.sends != report.effects:
            problems.append(f"the provider got {report.sends} requests for {report.effects} effects")
        wanted = (report.faulted, report.faulted, report.faulted, report.faulted)
        got = (d.get("refused_budget"), d.get("told_budget_exceeded"), d.get("abandoned"), report.tool_errors)
        if got != wanted:
            problems.append(
                f"{report.faulted} races, but {got[0]} refused by the budget, {got[1]} answered "
                f"BudgetExceededError, {got[2]} abandoned, {got[3]} error ToolMessages"
            )
    elif report.crash_point == "circuit-open":
        failed, probes = d.get("failed", 0), d.get("probes", 0)
        if not d.get("circuit_opened"):
            problems.append("the circuit never opened")
        if d.get("sent_while_open"):
            problems.append(f"{d['sent_while_open']} sends dispatched while the circuit was open")
        if probes < report.faulted - 1:  # every later race met it half-open: one probes
            problems.append(f"{probes} half-open probes for {report.faulted - 1} races after the opening")
        if report.sends != report.effects + failed:
            problems.append(
                f"the provider got {report.sends} requests for {report.effects} effects and "
                f"{failed} sends the ledger recorded failed"
            )
        before = d.get("sent_before_open", 0)
        if not CIRCUIT.failures <= before <= CIRCUIT.failures + 1:
            meant = f"{CIRCUIT.failures} or one more"
            problems.append(f"{before} sends before the circuit opened, expected {meant}")
        refused = d.get("refused_circuit")
        if not refused or refused != d.get("told_circuit_open") or d.get("abandoned") != refused:
            problems.append("a call was refused without being told CircuitOpenError")
    elif report.crash_point == "undo-killed":
        threads = report.intended // 2
        if (d.get("undos"), d.get("undos_confirmed")) != (threads, threads):
            done = d.get("undos_confirmed")
            problems.append(f"{done} of {d.get('undos')} undos confirmed, {threads} meant")
        if report.tool_errors != threads:
            errors = report.tool_errors
            problems.append(f"{errors} error ToolMessages, {threads} meant (one refused charge each)")
    return problems


STRATEGY = register(
    Strategy(
        NAME,
        build,
        providers=("dedup",),
        ours=True,
        crash_points=tuple(c for c in CONTROL_COLUMNS if c in CRASH_POINTS),
        audit=audit_controls,
        check=check_controls,
        summary="EffectToolNode with a budget, a circuit breaker or an undo (--controls)",
        effect_saver=True,
    )
)
