"""Run recovery: observe each thread, classify it, resume the ones to resume (the I/O)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .._runtime import telemetry
from .._runtime.compensation import compensations, effects_of, finish_compensations
from .._runtime.lease import DEFAULT_LEASE_SECONDS, lease_expired
from .._runtime.undo import CompensationReport
from ..core.contract import Effect
from ..core.operation import Operation, State
from ..errors import ConfigurationError, NoLedgerError, ThreadConflictError
from ..ledger.attach import ledger_of
from ..ledger.base import Ledger
from .classify import Policy, ThreadDecision, classify
from .narrative import settled
from .observe import _candidate_threads, observe, operations_of, unfinished, unfinished_threads
from .report import OperationReport, RecoveryReport, ThreadReport, TransitionReport, _report

log = logging.getLogger("langgraph_effects.recovery")

#: How far back recover() looks for out-of-band verdicts by default (seconds).
DEFAULT_VERDICTS_WITHIN = 7 * 86400.0

_RUNNING_ELSEWHERE = (
    "another runner resumed this thread at the same time and saved first; recovery's run was "
    "stopped before anything of it landed (one runner per thread). That runner owns the thread now"
)


async def recover(
    graph: Any,
    *,
    ledger: Ledger | None = None,
    tenant: str | None = None,
    thread_ids: Iterable[str] | None = None,
    dry_run: bool = False,
    lease_grace: float = 0.0,
    min_idle: float = DEFAULT_LEASE_SECONDS,
    config: Mapping[str, Any] | None = None,
    context: Any = None,
    durability: Literal["sync", "async"] = "sync",
    verdicts_within: float | None = DEFAULT_VERDICTS_WITHIN,
    effects: Mapping[str, Effect] | None = None,
) -> RecoveryReport:
    """Find threads a crash left mid-effect, resume each once, and report what happened.

    Args:
        graph: the compiled graph that ran the threads, with its checkpointer.
        ledger: default: the ledger of ``graph.checkpointer`` (``AsyncEffectSqliteSaver``,
            ``AsyncEffectPostgresSaver``, or one attached with ``attach_ledger``).
        tenant: only operations (and so threads) of this tenant.
        thread_ids: only these threads. Default: every thread with an unresolved
            operation, or with an operator's out-of-band verdict the graph has not
            answered yet, and (without ``tenant``, with a checkpointer that lists
            them: ``AsyncEffectSqliteSaver``, ``AsyncEffectPostgresSaver``) every thread whose
            last checkpoint has input or a step no run finished. A thread named here
            is also resumed when every operation is settled but a call's answer was
            lost with the crash (it is then replayed), or when work is left.
        dry_run: decide and report, but resume nothing and write nothing.
        lease_grace: extra seconds a lease must be past its expiry before its sender
            counts as gone (clock skew between hosts). An owner on this host that is
            provably dead counts as gone at once.
        min_idle: a thread with no expired lease is resumed only once its operations
            and its last checkpoint have been still this long (a worker may be
            running it right now). Default: the default lease length. ``0`` when no
            other worker can be running (e.g. a single service starting up).
        config: merged into every resume's config (its ``configurable`` entries
            too), e.g. ``{"configurable": {"policy_version": "v7"}}``. Recovery sets
            ``thread_id`` and the tenant recorded with the thread's operations.
        context: the runtime context to resume with, for graphs with a context schema.
        durability: ``"sync"`` (default) or ``"async"``.
        verdicts_within: look for out-of-band verdicts (not yet answered by the
            graph) among operations changed in the last this many seconds only
            (default a week). ``None``: every verdict ever recorded. Either way the
            ledger reads them from an index of the operations that carry a verdict,
            so the lookup costs what the verdicts are, not the whole history. An
            older verdict is still answered by the next run of its thread, or by
            naming it in ``thread_ids``.
        effects: the tool contracts to finish interrupted compensations with, each once
            (default: those of the graph's ``EffectToolNode``/``EffectMiddleware``).

    Returns a [`RecoveryReport`][langgraph_effects.RecoveryReport]. A failing thread is reported (``failed``,
    with the error) and does not stop the others.

    Raises:
        NoLedgerError: no ledger given and the checkpointer carries none.
        ConfigurationError: the graph has no checkpointer.
        ValueError: a negative ``lease_grace``/``min_idle``, or ``durability="exit"``.
    """
    found = _check_arguments(graph, ledger, lease_grace, min_idle, durability)
    wanted = list(dict.fromkeys(str(t) for t in thread_ids)) if thread_ids is not None else None
    started = time.time()
    configured = (dict(config or {}).get("configurable") or {}).get("tenant_id")
    configured = None if configured is None else str(configured)
    policy = Policy(tenant, wanted is not None, dry_run, min_idle, configured)
    run = _Run(graph, found, policy, lease_grace, config or {}, context, durability)
    with telemetry.acting("recover") as told:
        told.attributes(dry_run=dry_run)
        threads = wanted
        if threads is None:
            threads = await _candidate_threads(found, tenant, verdicts_within=verdicts_within)
            if tenant is None:  # a thread with nothing in the ledger has no tenant to match
                threads += [t for t in await unfinished_threads(graph.checkpointer) if t not in threads]
        reports = [r for r in [await run.thread_safely(t) for t in threads] if r is not None]
        report = RecoveryReport(
            ledger=found.where,
            dry_run=dry_run,
            started_at=started,
            compensations=tuple(await _compensations(found, graph, effects, tenant, wanted, dry_run)),
            finished_at=time.time(),
            threads=tuple(reports),
            options={
                "tenant": tenant, "thread_ids": wanted, "min_idle": min_idle, "lease_grace": lease_grace
            },
        )
        told.attributes(threads=len(reports))
        told.result = "failed" if report.failed else "needs_operator" if report.needs_operator else "done"
        return report


async def _compensations(
    ledger: Ledger,
    graph: Any,
    effects: Mapping[str, Effect] | None,
    tenant: str | None,
    threads: list[str] | None,
    dry_run: bool,
) -> list[CompensationReport]:
    """Finish the compensations a crash interrupted (in a dry run: say which)."""
    pending = [
        (undo, op)
        for undo, op in await compensations(ledger, tenant=tenant)
        if op is not None and (threads is None or op.thread_id in threads)
    ]
    if not pending:
        return []
    if dry_run:
        return [CompensationReport(op, undo, "requested", "would finish") for undo, op in pending]
    contracts = effects if effects is not None else effects_of(graph)
    only = [op.op_id for _, op in pending]
    return await finish_compensations(ledger, effects=contracts, tenant=tenant, only=only)


def _check_arguments(
    graph: Any, ledger: Ledger | None, lease_grace: float, min_idle: float, durability: str
) -> Ledger:
    """The ledger recovery reads, once the arguments are known to be usable."""
    if lease_grace < 0 or min_idle < 0:
        raise ValueError("lease_grace and min_idle are seconds >= 0")
    if durability not in ("sync", "async"):
        raise ValueError(
            f"recovery resumes with durability 'sync' or 'async', not {durability!r}: 'exit' would "
            "lose a dispatched call if the resume crashed"
        )
    checkpointer = getattr(graph, "checkpointer", None)
    if checkpointer is None or checkpointer is False or checkpointer is True:
        raise ConfigurationError(
            "recover() needs the compiled graph with its own checkpointer (the one the threads ran "
            "with): compile it with checkpointer=AsyncEffectSqliteSaver(...) or AsyncEffectPostgresSaver(...)"
        )
    found = ledger or ledger_of(checkpointer)
    if found is None:
        raise NoLedgerError(
            "recover() has no ledger: pass ledger=..., or compile the graph with AsyncEffectSqliteSaver / "
            "AsyncEffectPostgresSaver (or attach_ledger(checkpointer, ledger))"
        )
    return found


@dataclass
class _Run:
    graph: Any
    ledger: Ledger
    policy: Policy
    lease_grace: float
    config: Mapping[str, Any]
    context: Any
    durability: str

    async def thread_safely(self, thread_id: str) -> ThreadReport | None:
        """`thread`, with an error reported as the thread's, not raised."""
        try:
            report = await self.thread(thread_id)
        except Exception as error:  # one bad thread must not stop the others
            log.exception("recovery of thread %s failed", thread_id)
            report = ThreadReport(
                thread_id=thread_id,
                tenant="",
                action="failed",
                reason="recovery could not read this thread",
                error=_describe(error),
            )
        if report is not None:
            log.info("recovery: thread %s: %s (%s)", thread_id, report.action, report.reason)
        return report

    async def thread(self, thread_id: str) -> ThreadReport | None:
        """Decide and (unless a dry run) resume one thread; ``None``: nothing to say."""
        with telemetry.acting("recover_thread") as told:
            told.attributes(thread_id=thread_id)
            seen = await observe(
                self.graph, self.ledger, thread_id, tenant=self.policy.tenant, lease_grace=self.lease_grace
            )
            decision = classify(seen, self.policy)
            if decision is None:
                told.result = "nothing"
                return None
            told.linked(decision.involved)
            report = (
                decision.report(thread_id)
                if decision.action != "resume"
                else await self._resume(thread_id, decision, seen.ops)
            )
            told.result = report.action
            if report.outcome is not None:
                told.attributes(outcome=report.outcome)
            return report

    def _run_config(self, thread_id: str, tenant: str) -> dict[str, Any]:
        merged: dict[str, Any] = {k: v for k, v in self.config.items() if k != "configurable"}
        configurable: dict[str, Any] = dict(self.config.get("configurable") or {})
        for private in [k for k in configurable if k.startswith("checkpoint_")]:
            configurable.pop(private)  # always resume the latest checkpoint
        configurable["thread_id"] = thread_id
        if tenant:
            configurable["tenant_id"] = tenant
        merged["configurable"] = configurable
        return merged

    async def _resume(
        self, thread_id: str, decision: ThreadDecision, ops: Iterable[Operation]
    ) -> ThreadReport:
        kwargs: dict[str, Any] = {"durability": self.durability}
        if self.context is not None:
            kwargs["context"] = self.context
        started = time.monotonic()
        error: str | None = None
        conflict = False
        try:
            await self.graph.ainvoke(None, self._run_config(thread_id, decision.tenant), **kwargs)
        except ThreadConflictError as raised:  # another runner moved it on first: not ours now
            log.info("recovery: thread %s is being run by another runner: %s", thread_id, raised)
            conflict = True
        except Exception as raised:  # reported per thread; the others still run
            log.warning("recovery: resuming thread %s raised %s", thread_id, _describe(raised))
            error = _describe(raised)
        seconds = time.monotonic() - started
        snapshot = await self.graph.aget_state({"configurable": {"thread_id": thread_id}})
        reports = await self._settlements(thread_id, decision.involved, {o.op_id for o in ops})
        interrupts = tuple(str(i.id) for i in snapshot.interrupts)
        if conflict:
            return ThreadReport(
                thread_id=thread_id,
                tenant=decision.tenant,
                action="running_elsewhere",
                reason=_RUNNING_ELSEWHERE,
                operations=reports,
                interrupts=interrupts,
                seconds=seconds,
            )
        outcome: Literal["completed", "interrupted", "stopped", "error"] = (
            "error"
            if error is not None
            else "interrupted"
            if snapshot.interrupts
            else "stopped"
            if unfinished(snapshot)
            else "completed"
        )
        return ThreadReport(
            thread_id=thread_id,
            tenant=decision.tenant,
            action="failed" if error is not None else "resumed",
            reason=decision.reason,
            operations=reports,
            outcome=outcome,
            error=error,
            interrupts=interrupts,
            seconds=seconds,
        )

    async def _settlements(
        self, thread_id: str, involved: Iterable[Operation], known: set[str]
    ) -> tuple[OperationReport, ...]:
        """How the resume settled each involved operation, and the ones it created."""
        after_ops = {o.op_id: o for o in await operations_of(self.ledger, thread_id, self.policy.tenant)}
        now = time.time()
        pairs: list[tuple[Operation | None, Operation, int | None]] = [
            (o, after_ops.get(o.op_id, o), o.version) for o in involved
        ]
        pairs += [(None, after, None) for op_id, after in after_ops.items() if op_id not in known]
        reports: list[OperationReport] = []
        for before, after, since in pairs:
            audit = await self.ledger.audit(after.op_id)
            transitions = [TransitionReport.of(e) for e in audit if since is None or e.seq > since]
            sending = after.state is State.DISPATCHED and not lease_expired(after, now=now)
            how, detail = settled(before, after, transitions, sending=sending)
            reports.append(_report(before, after, how, detail, transitions))
        return tuple(reports)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:1000]
