"""Our rows: ``EffectToolNode`` under each provider, with the contract it really offers.

One strategy, one row per provider. The tool is the seed's ``send_notification``;
what changes is that it runs under [`EffectToolNode`][langgraph_effects.EffectToolNode]
with the [`Effect`][langgraph_effects.Effect] a user would declare for that provider
after reading its documentation:

``dedup``
    ``Effect(dedup_window=<the provider's retention>)``; the tool sends
    ``current_operation().provider_key`` as the idempotency key.
``lookup``
    ``Effect(lookup=get)``: the tool sends the provider key as its reference, and
    a single-item get by it is strongly consistent.
``lagging``
    ``Effect(lookup=listing, lookup_consistency="eventual", settle_after=lag + margin)``:
    the only lookup is a search that lags, so "not found" is believed only once
    the listing has had time to catch up.
``withdrawn``
    ``Effect(lookup=get)`` on the single-item route, which answers 410 for a
    withdrawn record (``Landed(withdrawn=True)``). The listing is not used: it
    hides withdrawn records, so it would read a landed effect as absent.
``blind``
    Nothing declared (an undeclared tool is blind): every ambiguity goes to an
    operator, and the lab answers as one would after checking the provider.

Crash points map onto the product's own fault points: ``A`` is the dispatcher's
``after_intent`` (the intent is durable, nothing was sent), ``C`` its
``before_outcome`` (the tool returned, the outcome is not committed yet); ``B``
and the lost response (``timeout``) are inside the lab's client.

The graph checkpoints through [`AsyncEffectSqliteSaver`][langgraph_effects.AsyncEffectSqliteSaver], as
this package recommends: the ledger lives in the checkpoints' file on its own
connection (a strategy run on a plain saver gets one attached with
[`attach_ledger`][langgraph_effects.attach_ledger]). The audit counts operations left
non-terminal from that file with plain SQL.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import closing
from types import SimpleNamespace
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from .._integrations.node import EffectToolNode
from .._runtime import faults as _faults
from .._runtime.context import current_operation
from .._runtime.decisions import REVIEW_TYPE, resume_command
from .._runtime.lease import DEFAULT_LEASE_SECONDS
from ..core.contract import Effect, Inconclusive, Landed, LookupRequest, NotLanded
from ..core.operation import Operation
from ..ledger.attach import attach_ledger, ledger_of
from ..ledger.query import unresolved_values
from ..ledger.sqlite import SqliteLedger, connect
from .faults import CRASH_POINTS, Faults
from .providers import (
    KEYED_MODES,
    MODES,
    EffectRecord,
    IdempotencyMismatch,
    ProviderMode,
    ProviderRejected,
    RateLimited,
    Withdrawn,
)
from .strategies import (
    TOOL_NAME,
    AuditCounts,
    BuildContext,
    CellFiles,
    CellReport,
    ReviewCase,
    Strategy,
    register,
    scenario_tools,
)

NAME = "EffectToolNode"

#: The eventual contract believes "not found" only this long past the listing's lag
#: after the dispatch: the margin covers the time between the dispatch commit and
#: the provider applying the request (a busy machine stretches it).
SETTLE_MARGIN = 0.5
#: A lookup slower than this is inconclusive (the contract's ``lookup_timeout``).
#: The lab's lookups answer in microseconds, or hang (``lookup-timeout``).
LOOKUP_TIMEOUT = 0.05
#: How often an inconclusive lookup is retried before the operation goes to review.
LOOKUP_ATTEMPTS = 2
#: How long a lookup "hangs" in the ``lookup-timeout`` column: far past the timeout.
LOOKUP_HANG = 3600.0
#: Provider errors that prove nothing was applied (a 422, a key reused with another
#: payload, a 429).
DEFINITE_ERRORS: tuple[type[BaseException], ...] = (ProviderRejected, IdempotencyMismatch, RateLimited)

ToolOutput = ToolMessage | Command[Any]

#: Columns where the first request is still to come (its sender is alive, paused or
#: still running) when someone else looks at the operation: nobody may send it again.
IN_FLIGHT = frozenset({"paused-owner", "tool-interrupt", "child-process"})
#: The soak's pseudo crash point (see ``runner.SOAK_POINT``).
SOAK = "soak"
#: Crash points where the outcome of a send is ambiguous (the effect may have landed).
AMBIGUOUS = frozenset(name for name, point in CRASH_POINTS.items() if point.ambiguous)


# -- the worker side ---------------------------------------------------------------


def effect_for(ctx: BuildContext) -> Effect | None:
    """The contract the cell's provider really offers (``None``: blind, undeclared)."""
    client, faults = ctx.client, ctx.faults
    provider = client.provider

    async def unanswered() -> None:
        # The provider never answers: only the contract's lookup_timeout ends the wait.
        if faults.lookups_time_out:
            await asyncio.sleep(LOOKUP_HANG)

    async def get(request: LookupRequest) -> Landed | NotLanded | Inconclusive:
        await unanswered()
        found = client.get(request.provider_key)
        if isinstance(found, Withdrawn):
            return Landed(receipt={"effect_id": found.record.effect_id}, withdrawn=True)
        if isinstance(found, EffectRecord):
            return Landed(receipt={"effect_id": found.effect_id})
        return NotLanded()

    async def listing(request: LookupRequest) -> Landed | NotLanded | Inconclusive:
        await unanswered()
        found = client.list_by_reference(request.provider_key)
        return Landed(receipt={"effect_id": found[0].effect_id}) if found else NotLanded()

    common: dict[str, Any] = {
        "definite_errors": DEFINITE_ERRORS,
        "lookup_timeout": LOOKUP_TIMEOUT,
        "lookup_attempts": LOOKUP_ATTEMPTS,
    }
    mode = ctx.provider_mode
    if mode == "dedup":
        return Effect(dedup_window=provider.retention, definite_errors=DEFINITE_ERRORS)
    if mode in ("lookup", "withdrawn"):
        return Effect(lookup=get, **common)
    if mode == "lagging":
        return Effect(
            lookup=listing,
            lookup_consistency="eventual",
            settle_after=provider.lag + SETTLE_MARGIN,
            **common,
        )
    point = CRASH_POINTS.get(ctx.crash_point)
    if point is not None and point.rate_limited:
        # Still blind (no key, no lookup), but its documentation says a 429 applied nothing.
        return Effect(definite_errors=DEFINITE_ERRORS)
    return None


def send_tool(ctx: BuildContext) -> BaseTool:
    """The seed's tool, sending our provider key as the key or reference."""
    client = ctx.client
    keyed = ctx.provider_mode in KEYED_MODES

    @tool(TOOL_NAME)
    async def send_notification(operation: str, body: str) -> str:
        """Send one notification."""
        key = current_operation().provider_key if keyed else None
        receipt = await client.asend({"operation": operation, "body": body}, key=key)
        return f"sent {receipt.effect_id}"

    return send_notification


def install_fault_points(faults: Faults, *, undo_points: bool = False) -> None:
    """Make the dispatcher's own fault points the lab's A (``after_intent``) and C
    (``before_outcome``) for our rows; an undo's the lab's undo-A and undo-C when
    ``undo_points``."""

    def at(point: str) -> _faults.Hook:
        def hook(name: str, op: Operation) -> None:
            faults.reach(("undo-" + point) if undo_points and op.compensates is not None else point)

        return hook

    _faults.install("after_intent", at("A"))
    _faults.install("before_outcome", at("C"))


async def build_effect_node(ctx: BuildContext) -> EffectToolNode:
    """``EffectToolNode`` over the cell's provider, its ledger beside the checkpoints."""
    if ledger_of(ctx.checkpointer) is None:
        # A plain checkpointer: the ledger goes beside it, in the same file.
        ledger = SqliteLedger(await connect(ctx.files.ledger), where=f"sqlite:{ctx.files.ledger}")
        ctx.exits.push_async_callback(ledger.aclose)
        await ledger.setup()
        attach_ledger(ctx.checkpointer, ledger)

    faults = ctx.faults
    install_fault_points(faults)

    async def line_up(
        request: ToolCallRequest, execute: Callable[[ToolCallRequest], Awaitable[ToolOutput]]
    ) -> ToolOutput:
        # Two workers delivered the same resume meet here, before either has decided
        # anything about the call (lease, reconciliation, dispatch), so they race for
        # it truly at once. (The seed rows meet at A: deciding to send is all they do.)
        faults.meet()
        return await execute(request)

    effect = effect_for(ctx)
    extra = scenario_tools(ctx)
    effects = {tool.name: Effect.read_only() for tool in extra}
    if effect is not None:
        effects[TOOL_NAME] = effect
    point = CRASH_POINTS.get(ctx.crash_point)
    lease = point.lease_seconds if point is not None else None
    # ToolNode turns whatever a wrap_tool_call wrapper raises into an error message
    # whenever handle_tool_errors is set (whatever its types), so the 429 that the
    # definite-retry column's RetryPolicy must see cannot pass through one: that
    # column runs without the rendezvous (it has no second runner to line up).
    rate_limited = point is not None and point.rate_limited
    return EffectToolNode(
        [send_tool(ctx), *extra],
        effects=effects,
        handle_tool_errors=ctx.handled_errors,
        awrap_tool_call=None if rate_limited else line_up,
        lease_seconds=lease if lease is not None else DEFAULT_LEASE_SECONDS,
    )


# -- the parent side ---------------------------------------------------------------


def verdict(effects: Sequence[EffectRecord]) -> dict[str, Any]:
    """What an operator who checked the provider answers."""
    if not effects:
        return {"type": "not_landed"}
    first = effects[0]
    return {"type": "landed", "receipt": {"effect_id": first.effect_id, "withdrawn": first.withdrawn}}


def answer_from_provider(case: ReviewCase) -> Any:
    """Answer every pending effect review with the provider's truth for the operation
    each entry names (the ``operation`` label in its arguments)."""
    pending = [SimpleNamespace(id=interrupt_id, value=value) for interrupt_id, value in case.interrupts]

    def evidence(entry: Mapping[str, Any]) -> list[EffectRecord]:
        label = (entry.get("args") or {}).get("operation")
        return [e for e in case.effects if label is None or e.operation == label]

    decisions = {
        entry["operation_id"]: verdict(evidence(entry))
        for _, value in case.interrupts
        if isinstance(value, Mapping) and value.get("type") == REVIEW_TYPE
        for entry in value.get("operations", ())
    }
    return resume_command(pending, decisions).resume


def audit_ledger(files: CellFiles) -> AuditCounts:
    """Count from the ledger file: states of ``effect_operations``, events of ``effect_audit``."""
    with closing(sqlite3.connect(files.ledger)) as db:
        states = dict(db.execute("SELECT state, COUNT(*) FROM effect_operations GROUP BY state"))
        by_thread = list(db.execute("SELECT thread_id, state FROM effect_operations"))
        events = dict(db.execute("SELECT event, COUNT(*) FROM effect_audit GROUP BY event"))
        escalations = [
            json.loads(evidence or "{}")
            for (evidence,) in db.execute("SELECT evidence FROM effect_audit WHERE event = 'escalate'")
        ]
    open_states = set(unresolved_values())
    details = {
        "operations": sum(states.values()),
        "confirmed": states.get("confirmed", 0),
        "resends": events.get("resend", 0),
        "escalations": len(escalations),
        "escalations_naming_change": sum(1 for e in escalations if e.get("changed")),
        "verdicts_landed": events.get("landed", 0),
        "verdicts_not_landed": events.get("not_landed", 0),
    }
    open_by_thread: dict[str, int] = {}
    for thread_id, state in by_thread:
        if state in open_states:
            open_by_thread[thread_id] = open_by_thread.get(thread_id, 0) + 1
    return AuditCounts(
        non_terminal=sum(n for state, n in states.items() if state in open_states),
        details=details,
        open_by_thread=open_by_thread,
    )


def expected_reviews(mode: ProviderMode, point: str, faulted: int) -> int:
    """Operations that must reach an operator: exactly those evidence cannot settle."""
    if point not in AMBIGUOUS:
        return 0  # nothing was sent, or it was sent and the answer recorded
    if mode == "blind":
        return faulted  # no evidence at all
    if point == "policy":
        # A lookup that finds the effect confirms it (no authority needed); only a
        # re-send needs the policy in force at intent, and the dedup row re-sends.
        return faulted if mode == "dedup" else 0
    if point == "lookup-timeout":
        return 0 if mode == "dedup" else faulted  # dedup needs no lookup: it re-sends
    return 0


def check_cell(report: CellReport) -> list[str]:
    """Our invariants beyond 0 duplicates / 0 missing / 0 left non-terminal."""
    problems = []
    details = report.audit.details if report.audit is not None else {}
    # The soak's faults are drawn at random (and land anywhere): no fixed review count.
    expected = expected_reviews(report.provider_mode, report.crash_point, report.faulted)
    if report.crash_point != SOAK and report.sent_to_review != expected:
        problems.append(
            f"{report.sent_to_review} operations sent to review, expected {expected} "
            "(an operator is asked exactly when evidence cannot settle it)"
        )
    if report.tool_errors:
        problems.append(f"{report.tool_errors} error ToolMessages: the model was told a call failed")
    point = CRASH_POINTS.get(report.crash_point)
    # definite-retry: each faulted operation's 429 is one more request, nothing applied.
    refusals = report.faulted if point is not None and point.rate_limited else 0
    if report.provider_mode == "blind":
        if report.sends != report.effects + refusals:
            problems.append(
                f"blind provider got {report.sends} requests for {report.effects} effects"
                + (f" and {refusals} answered 429" if refusals else "")
                + ": something was re-sent without an operator"
            )
        if details.get("resends"):
            problems.append(f"{details['resends']} automatic re-sends to a blind provider")
    if report.crash_point in IN_FLIGHT and report.sends != report.effects:
        problems.append(
            f"the provider got {report.sends} requests for {report.effects} effects: a request "
            "whose sender was alive was sent again (a dedup provider may hide it, a 409 may not)"
        )
    if report.crash_point == "policy":
        if details.get("resends"):
            problems.append(f"{details['resends']} automatic re-sends under a changed policy version")
        unnamed = details.get("escalations", 0) - details.get("escalations_naming_change", 0)
        if unnamed:
            problems.append(
                f"{unnamed} reviews under a changed policy whose evidence does not say what changed"
            )
    return problems


STRATEGY = register(
    Strategy(
        NAME,
        build_effect_node,
        providers=MODES,
        ours=True,
        crash_points=tuple(CRASH_POINTS),
        answer_review=answer_from_provider,
        audit=audit_ledger,
        check=check_cell,
        summary="EffectToolNode with the contract each provider offers (blind: undeclared)",
        effect_saver=True,
    )
)
