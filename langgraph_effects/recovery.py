"""Crash recovery: find the threads a crash left mid-effect and resume each one once.

A service calls it on start-up (or an operator runs ``langgraph-effects recover``)::

    async with EffectSqliteSaver.from_conn_string("agent.sqlite") as saver:
        await saver.setup()
        graph = builder.compile(checkpointer=saver)
        report = await recover(graph)
        log.info("%s", report.summary())

The ledger, not the checkpoints, says where to look: a killed task leaves no trace
LangGraph can tell from "never started", the ledger does. Recovery looks at every
thread with an unresolved operation (``pending``, ``dispatched``, ``unknown``,
``review``) and every thread with an operation an operator decided out of band
(``langgraph-effects resolve``) that the graph has not answered yet, and per thread:

* an operation under a **live lease** (someone is sending it right now, here or on
  another machine): the thread is not touched, reported *in flight elsewhere*;
* nothing that a resume could move (every unresolved operation waits for a verdict
  or an approval, and the thread is already paused asking for it): reported
  *awaiting review*;
* paused at an interrupt that is not ours (a human-input node): not touched;
* changed less than ``min_idle`` seconds ago, with no expired lease to prove its
  worker gone (a worker may be running it right now): reported *recently active*;
* otherwise it is **resumed once** with ``graph.ainvoke(None, config)``. The node
  re-reads the ledger: expired leases become ``unknown`` and are reconciled from
  evidence (lookup, the provider's dedup, or review), pending intents are sent,
  settled outcomes and out-of-band verdicts are replayed as ToolMessages.

Measured on langgraph 1.2.24: ``ainvoke(None)`` on a thread paused at an interrupt
re-runs the interrupted node from the top without answering it, so the node reads
the ledger again and, if something still needs a verdict, raises the same interrupt
(same id) again. A ``Command(resume={})`` works too, but consumes an answer slot
and mints a new interrupt id on every run, so recovery does not use it.

Resuming runs the rest of the graph like any resume does (the model is called
again once the tools answered). Every resume runs with ``durability="sync"``, the
thread's ``thread_id`` and the tenant recorded with its operations (the tenant is
part of an operation's identity: resumed without it, a call would become a new
operation). Pass anything else your graph reads from ``configurable`` (such as
``policy_version``: without it, an operation recorded under a policy version is
sent to review rather than re-sent) with ``config=``.

Every decision is re-read from the ledger right before the thread is resumed, and
the engine itself never sends under a live lease. What makes recovery safe to run
while workers run (or twice at once) is the checkpointer: ``EffectSqliteSaver`` and
``EffectPostgresSaver`` let one runner per thread move it on (a checkpoint gets at
most one child). If a worker resumed the thread too, whichever saves second is
stopped before anything of its run lands; when that is recovery, the thread is
reported *running elsewhere*, not as a failure. ``min_idle`` only spares a thread
that looks busy a resume that would lose that race. With a checkpointer that does
not fence threads (a plain LangGraph saver with ``attach_ledger``), run recovery only
when no worker can be running the threads.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from .checkpoint import ledger_of
from .errors import ConfigurationError, NoLedgerError, ThreadConflictError
from .lease import DEFAULT_LEASE_SECONDS, lease_expired, owner_alive
from .ledger.base import AuditEntry, Ledger, OperationQuery
from .operation import UNRESOLVED, Operation, State, needs_approval
from .review import APPROVAL_TYPE, REVIEW_TYPE

__all__ = [
    "OperationReport",
    "RecoveryReport",
    "Step",
    "ThreadReport",
    "recover",
]

log = logging.getLogger("langgraph_effects.recovery")

#: The approval interrupt's ``type`` (see :mod:`langgraph_effects.review`).
_OUR_INTERRUPTS = frozenset({REVIEW_TYPE, APPROVAL_TYPE})
_SCAN_LIMIT = 1_000_000
#: How far back recover() looks for out-of-band verdicts by default (seconds).
DEFAULT_VERDICTS_WITHIN = 7 * 86400.0

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
    resumed once (see :attr:`ThreadReport.outcome`);
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
    the resume raised (see :attr:`ThreadReport.error`), or the thread could not be
    resumed safely (operations of several tenants, a conflicting ``tenant_id``);
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
    a dry run: its thread would have been resumed (:attr:`OperationReport.detail`
    says what the resume is expected to do).
"""


# -- the report --------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One transition recorded while recovery resumed the thread (an audit entry)."""

    event: str
    from_state: State | None
    to_state: State
    version: int
    evidence: Mapping[str, Any] | None
    actor: str
    at: float

    @classmethod
    def of(cls, entry: AuditEntry) -> Step:
        """The step an audit entry records."""
        return cls(
            event=entry.event,
            from_state=entry.from_state,
            to_state=entry.to_state,
            version=entry.version,
            evidence=entry.evidence,
            actor=entry.actor,
            at=entry.at,
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "event": self.event,
            "from": self.from_state.value if self.from_state is not None else None,
            "to": self.to_state.value,
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
    steps: tuple[Step, ...] = ()
    """The transitions recorded during the resume, oldest first."""

    @property
    def new(self) -> bool:
        """The resumed run created this operation (the model asked for more after recovery)."""
        return self.before is None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (arguments and results are not included: use ``show``)."""
        return {
            "op_id": self.op_id,
            "tool": self.tool,
            "tool_call_id": self.tool_call_id,
            "contract": self.contract,
            "provider_key": self.provider_key,
            "new": self.new,
            "before": _state_json(self.before),
            "after": _state_json(self.after),
            "how": self.how,
            "detail": self.detail,
            "steps": [step.to_json() for step in self.steps],
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

    def to_json(self) -> dict[str, Any]:
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
    """What :func:`recover` found and did, per thread and per operation."""

    ledger: str
    dry_run: bool
    started_at: float
    finished_at: float
    threads: tuple[ThreadReport, ...]
    options: Mapping[str, Any] = field(default_factory=dict)
    """The arguments recovery ran with (tenant, threads, min_idle, lease_grace)."""

    @property
    def resumed(self) -> tuple[ThreadReport, ...]:
        """Threads that were resumed."""
        return tuple(t for t in self.threads if t.action == "resumed")

    @property
    def nothing_to_do(self) -> bool:
        """No thread was (or, in a dry run, would be) resumed."""
        return not any(t.action in ("resumed", "would_resume") for t in self.threads)

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
        return out

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``langgraph-effects recover --json`` prints)."""
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
        }

    def summary(self) -> str:
        """A plain-text account, one line per thread and per operation (for logs)."""
        head = "Recovery (dry run)" if self.dry_run else "Recovery"
        if not self.threads:
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
        return "\n".join(lines)


# -- recover -----------------------------------------------------------------------


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
) -> RecoveryReport:
    """Find threads a crash left mid-effect, resume each once, and report what happened.

    Args:
        graph: the compiled graph that ran the threads, with its checkpointer.
        ledger: default: the ledger of ``graph.checkpointer`` (``EffectSqliteSaver``,
            ``EffectPostgresSaver``, or one attached with ``attach_ledger``).
        tenant: only operations (and so threads) of this tenant.
        thread_ids: only these threads. Default: every thread with an unresolved
            operation, or with an operator's out-of-band verdict the graph has not
            answered yet. A thread named here is also resumed when every operation is
            settled but a call's answer was lost with the crash (it is then replayed).
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
            (default a week), so the scan costs what changed, not the whole
            history. ``None``: every decided operation. An older verdict is still
            answered by the next run of its thread, or by naming it in ``thread_ids``.

    Returns a :class:`RecoveryReport`. A failing thread is reported (``failed``, with
    the error) and does not stop the others.

    Raises:
        NoLedgerError: no ledger given and the checkpointer carries none.
        ConfigurationError: the graph has no checkpointer.
        ValueError: a negative ``lease_grace``/``min_idle``, or ``durability="exit"``.
    """
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
            "with): compile it with checkpointer=EffectSqliteSaver(...) or EffectPostgresSaver(...)"
        )
    found = ledger or ledger_of(checkpointer)
    if found is None:
        raise NoLedgerError(
            "recover() has no ledger: pass ledger=..., or compile the graph with EffectSqliteSaver / "
            "EffectPostgresSaver (or attach_ledger(checkpointer, ledger))"
        )
    explicit = thread_ids is not None
    wanted = list(dict.fromkeys(str(t) for t in thread_ids)) if thread_ids is not None else None
    started = time.time()
    run = _Run(
        graph=graph,
        ledger=found,
        tenant=tenant,
        dry_run=dry_run,
        lease_grace=lease_grace,
        min_idle=min_idle,
        config=config or {},
        context=context,
        durability=durability,
    )
    threads = (
        wanted
        if wanted is not None
        else await _candidate_threads(found, tenant, verdicts_within=verdicts_within)
    )
    reports: list[ThreadReport] = []
    for thread_id in threads:
        try:
            report = await run.thread(thread_id, explicit=explicit)
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
            reports.append(report)
    return RecoveryReport(
        ledger=found.where,
        dry_run=dry_run,
        started_at=started,
        finished_at=time.time(),
        threads=tuple(reports),
        options={
            "tenant": tenant,
            "thread_ids": wanted,
            "min_idle": min_idle,
            "lease_grace": lease_grace,
        },
    )


async def _candidate_threads(
    ledger: Ledger, tenant: str | None, *, verdicts_within: float | None = None
) -> list[str]:
    """Threads with an unresolved operation or a recent out-of-band verdict, oldest first.

    Decided operations are read only if they changed within ``verdicts_within`` seconds
    (a filter in the ledger's query): a thread whose graph answered the verdict since
    is then skipped by :meth:`_Run.thread` (nothing left to answer)."""
    since = time.time() - verdicts_within if verdicts_within is not None else None
    first_seen: dict[str, float] = {}
    unresolved = await ledger.list_operations(
        OperationQuery(states=UNRESOLVED, tenant=tenant, limit=_SCAN_LIMIT)
    )
    for op in unresolved:
        first_seen.setdefault(op.thread_id, op.updated_at)
    decided = await ledger.list_operations(
        OperationQuery(
            states=frozenset({State.CONFIRMED, State.ABANDONED}),
            tenant=tenant,
            updated_after=since,
            limit=_SCAN_LIMIT,
        )
    )
    for op in decided:
        if _decided_out_of_band(op):
            first_seen.setdefault(op.thread_id, op.updated_at)
    return sorted(first_seen, key=lambda t: first_seen[t])


@dataclass
class _Run:
    graph: Any
    ledger: Ledger
    tenant: str | None
    dry_run: bool
    lease_grace: float
    min_idle: float
    config: Mapping[str, Any]
    context: Any
    durability: str

    async def _ops(self, thread_id: str) -> list[Operation]:
        return await self.ledger.list_operations(
            OperationQuery(thread_id=thread_id, tenant=self.tenant, limit=_SCAN_LIMIT)
        )

    async def thread(self, thread_id: str, *, explicit: bool) -> ThreadReport | None:
        """Decide and (unless a dry run) resume one thread; ``None``: nothing to say."""
        ops = await self._ops(thread_id)
        read_config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
        snapshot = await self.graph.aget_state(read_config)
        pending_work = bool(snapshot.next) or bool(snapshot.interrupts)
        ours = [i for i in snapshot.interrupts if _interrupt_type(i) in _OUR_INTERRUPTS]
        others = [i for i in snapshot.interrupts if _interrupt_type(i) not in _OUR_INTERRUPTS]
        paused = bool(snapshot.interrupts)
        unresolved = [o for o in ops if not o.terminal]
        # Settled operations whose answer the thread still lacks: a resume replays them.
        if paused:
            # Only those our interrupts still list: a resume then re-raises the interrupt for
            # the rest, listing only them, so a second run finds nothing to do.
            listed = _listed_operations(ours)
            unanswered = [o for o in ops if o.terminal and o.op_id in listed]
        else:
            asked, answered = _calls_in(snapshot.values)
            unanswered = [
                o
                for o in ops
                if o.terminal
                and pending_work
                and not o.checkpoint_ns
                and o.tool_call_id in asked
                and o.tool_call_id not in answered
            ]
        involved = unresolved + unanswered
        tenant = _tenant_of(involved or ops, self.tenant)

        def quiet(action: ThreadAction, reason: str, *, how: Settlement = "not_resumed") -> ThreadReport:
            return ThreadReport(
                thread_id=thread_id,
                tenant=tenant,
                action=action,
                reason=reason,
                operations=tuple(_untouched(o, how) for o in involved),
            )

        if not involved:
            if not explicit:
                return None  # e.g. an out-of-band verdict the graph answered since
            why = (
                "the ledger has no operation of this thread"
                if not ops
                else "no operation of this thread is unresolved or waiting to be answered"
            )
            return quiet("nothing_to_do", why)

        now = time.time()
        live = [
            o
            for o in unresolved
            if o.state is State.DISPATCHED and not lease_expired(o, now=now - self.lease_grace)
        ]
        if live:
            return ThreadReport(
                thread_id=thread_id,
                tenant=tenant,
                action="in_flight_elsewhere",
                reason=_live_reason(live, now),
                operations=tuple(
                    _untouched(o, "in_flight_elsewhere" if o in live else "not_resumed")
                    for o in involved
                ),
            )

        if not pending_work:
            if snapshot.created_at is None:
                return quiet(
                    "not_resumable",
                    "the graph's checkpointer has no checkpoint for this thread (is this the graph "
                    "that ran it?); decide its operations with `langgraph-effects resolve`",
                )
            return quiet(
                "not_resumable",
                "the thread has no pending work (its run ended without them), so a resume cannot "
                "settle these operations; decide them with `langgraph-effects resolve`",
            )

        if others:
            return quiet(
                "paused_at_other_interrupt",
                f"the thread is paused at {len(others)} interrupt(s) that are not an effect review "
                "(e.g. a human-input node); answering them is the application's business",
            )

        waiting = [o for o in unresolved if _waits_for_human(o)]
        movable = [o for o in involved if o not in waiting]
        if paused and not movable:
            return quiet(
                "awaiting_review",
                f"paused at the effect review ({len(ours)} interrupt(s)); {len(waiting)} operation(s) "
                "wait for an operator's verdict or approval",
                how="awaiting_review",
            )

        busy = self._recently_active(unresolved, snapshot.created_at, paused=paused, now=now)
        if busy is not None:
            return quiet("recently_active", busy)

        tenants = {o.tenant for o in involved}
        if len(tenants) > 1:
            return quiet(
                "failed",
                f"its operations belong to several tenants ({sorted(tenants)}); resume it by hand",
            )
        configured = (self.config.get("configurable") or {}).get("tenant_id")
        if configured is not None and str(configured) != tenant:
            return quiet(
                "failed",
                f"config sets tenant_id={configured!r} but the thread's operations were recorded "
                f"under tenant {tenant!r}; resuming under another tenant would make new operations",
            )

        why = "paused at the effect review" if paused else "a crash left it mid-run"
        decided = [o for o in involved if _decided_out_of_band(o)]
        if decided:
            why += f"; {len(decided)} verdict(s) recorded out of band wait to be answered"
        elif paused:
            why += "; a resume can move some of its operations"
        if self.dry_run:
            return ThreadReport(
                thread_id=thread_id,
                tenant=tenant,
                action="would_resume",
                reason=why + "; a dry run, so nothing was resumed",
                operations=tuple(
                    OperationReport(
                        op_id=o.op_id,
                        tool=o.tool,
                        tool_call_id=o.tool_call_id,
                        contract=o.contract,
                        provider_key=o.provider_key,
                        before=o,
                        after=o,
                        how="would_resume",
                        detail=_forecast(o, now),
                    )
                    for o in involved
                ),
            )
        return await self._resume(thread_id, tenant, why, ops, involved)

    def _recently_active(
        self, unresolved: Sequence[Operation], created_at: str | None, *, paused: bool, now: float
    ) -> str | None:
        """Why the thread may be running right now, or ``None`` if it has been still."""
        if self.min_idle <= 0:
            return None
        if any(o.state is State.DISPATCHED for o in unresolved):
            # An expired lease: its sender is gone. Another worker may have resumed the
            # thread since; that is not proof of the contrary, and needs none: the
            # checkpointer lets only one of us move the thread on (running_elsewhere).
            return None
        for o in unresolved:
            if _decided_out_of_band(o) or (paused and _waits_for_human(o)):
                continue  # an operator's verdict, or a steady wait at our interrupt
            age = now - o.updated_at
            if age < self.min_idle:
                return (
                    f"{o.op_id} ({o.state.value}) changed {age:.0f}s ago and no expired lease proves "
                    f"its worker gone: it may be running right now. Run recovery again once it has "
                    f"been still for {self.min_idle:g}s (or with min_idle=0 / --min-idle 0 if no "
                    "other worker can be running it)"
                )
        stamp = _timestamp(created_at)
        if not paused and stamp is not None and now - stamp < self.min_idle:
            return (
                f"its last checkpoint is {now - stamp:.0f}s old and no expired lease proves its "
                f"worker gone: it may be running right now. Run recovery again once it has been "
                f"still for {self.min_idle:g}s (or with min_idle=0 / --min-idle 0 if no other "
                "worker can be running it)"
            )
        return None

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
        self,
        thread_id: str,
        tenant: str,
        why: str,
        ops: Sequence[Operation],
        involved: Sequence[Operation],
    ) -> ThreadReport:
        before = {o.op_id: o for o in ops}
        kwargs: dict[str, Any] = {"durability": self.durability}
        if self.context is not None:
            kwargs["context"] = self.context
        started = time.monotonic()
        error: str | None = None
        conflict: ThreadConflictError | None = None
        try:
            await self.graph.ainvoke(None, self._run_config(thread_id, tenant), **kwargs)
        except ThreadConflictError as raised:  # another runner moved it on first: not ours now
            log.info("recovery: thread %s is being run by another runner: %s", thread_id, raised)
            conflict = raised
        except Exception as raised:  # reported per thread; the others still run
            log.warning("recovery: resuming thread %s raised %s", thread_id, _describe(raised))
            error = _describe(raised)
        seconds = time.monotonic() - started
        snapshot = await self.graph.aget_state({"configurable": {"thread_id": thread_id}})
        after_ops = {o.op_id: o for o in await self._ops(thread_id)}
        now = time.time()

        reports: list[OperationReport] = []
        for o in involved:
            after = after_ops.get(o.op_id, o)
            steps = [Step.of(e) for e in await self.ledger.audit(o.op_id) if e.seq > o.version]
            how, detail = _settled(o, after, steps, now=now)
            reports.append(_report(o, after, how, detail, steps))
        for op_id, after in after_ops.items():
            if op_id in before:
                continue
            steps = [Step.of(e) for e in await self.ledger.audit(op_id)]
            how, detail = _settled(None, after, steps, now=now)
            reports.append(_report(None, after, how, detail, steps))

        outcome: Literal["completed", "interrupted", "stopped", "error"]
        if error is not None:
            outcome = "error"
        elif snapshot.interrupts:
            outcome = "interrupted"
        elif snapshot.next:
            outcome = "stopped"
        else:
            outcome = "completed"
        if conflict is not None:
            return ThreadReport(
                thread_id=thread_id,
                tenant=tenant,
                action="running_elsewhere",
                reason=(
                    "another runner resumed this thread at the same time and saved first; recovery's "
                    "run was stopped before anything of it landed (one runner per thread). That "
                    "runner owns the thread now"
                ),
                operations=tuple(reports),
                interrupts=tuple(str(i.id) for i in snapshot.interrupts),
                seconds=seconds,
            )
        return ThreadReport(
            thread_id=thread_id,
            tenant=tenant,
            action="failed" if error is not None else "resumed",
            reason=why,
            operations=tuple(reports),
            outcome=outcome,
            error=error,
            interrupts=tuple(str(i.id) for i in snapshot.interrupts),
            seconds=seconds,
        )


# -- reading threads and operations --------------------------------------------------


def _messages_in(values: Any) -> list[BaseMessage]:
    """Every message in a thread's state values (any channel holding a list of them)."""
    found: list[BaseMessage] = []
    if isinstance(values, Mapping):
        candidates: Iterable[Any] = values.values()
    elif isinstance(values, list):
        candidates = [values]
    else:
        candidates = []
    for value in candidates:
        if isinstance(value, BaseMessage):
            found.append(value)
        elif isinstance(value, list | tuple):
            found.extend(m for m in value if isinstance(m, BaseMessage))
    return found


def _calls_in(values: Any) -> tuple[set[str], set[str]]:
    """(tool_call ids the model asked for, tool_call ids a ToolMessage answered)."""
    asked: set[str] = set()
    answered: set[str] = set()
    for message in _messages_in(values):
        if isinstance(message, AIMessage):
            asked.update(str(c["id"]) for c in message.tool_calls if c.get("id"))
        elif isinstance(message, ToolMessage):
            answered.add(str(message.tool_call_id))
    return asked, answered


def _interrupt_type(pending: Any) -> str | None:
    value = getattr(pending, "value", None)
    if isinstance(value, Mapping):
        kind = value.get("type")
        return str(kind) if kind is not None else None
    return None


def _listed_operations(interrupts: Iterable[Any]) -> set[str]:
    """The operation ids our pending interrupts ask about."""
    listed: set[str] = set()
    for pending in interrupts:
        value = getattr(pending, "value", None)
        entries = value.get("operations") if isinstance(value, Mapping) else None
        for entry in entries or ():
            if isinstance(entry, Mapping) and entry.get("operation_id"):
                listed.add(str(entry["operation_id"]))
    return listed


def _awaiting_approval(op: Operation) -> bool:
    """A gated call that waits for its approval."""
    return op.state is State.PENDING and needs_approval(op)


def _waits_for_human(op: Operation) -> bool:
    return op.state is State.REVIEW or _awaiting_approval(op)


def _decided_out_of_band(op: Operation) -> bool:
    """The operation's last change is an operator's verdict given through the console or API."""
    evidence = op.evidence or {}
    return evidence.get("kind") == "verdict" and evidence.get("channel") in ("console", "api")


def _tenant_of(ops: Sequence[Operation], wanted: str | None) -> str:
    if wanted is not None:
        return wanted
    tenants = sorted({o.tenant for o in ops})
    return tenants[0] if len(tenants) == 1 else ""


def _timestamp(created_at: str | None) -> float | None:
    if not created_at:
        return None
    try:
        return datetime.fromisoformat(created_at).timestamp()
    except ValueError:
        return None


def _live_reason(live: Sequence[Operation], now: float) -> str:
    parts = []
    for o in live:
        who = "a worker"
        if o.owner is not None:
            alive = owner_alive(o.owner)
            where = "this host" if alive is not None else o.owner.host
            who = f"pid {o.owner.pid} on {where}"
        left = max(0.0, (o.lease_expires_at or now) - now)
        parts.append(f"{o.op_id} ({o.tool}) is being sent by {who} (lease live for another {left:.0f}s)")
    return "; ".join(parts) + ": not touched"


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:1000]


def _state_json(op: Operation | None) -> dict[str, Any] | None:
    if op is None:
        return None
    return {
        "state": op.state.value,
        "version": op.version,
        "attempts": op.attempts,
        "evidence": (op.evidence or {}).get("kind"),
    }


def _untouched(op: Operation, how: Settlement) -> OperationReport:
    details = {
        "in_flight_elsewhere": "someone is sending it right now (live lease): not touched",
        "awaiting_review": (
            "waits for an approval before its first send"
            if _awaiting_approval(op)
            else "waits for an operator's verdict"
        ),
    }
    return OperationReport(
        op_id=op.op_id,
        tool=op.tool,
        tool_call_id=op.tool_call_id,
        contract=op.contract,
        provider_key=op.provider_key,
        before=op,
        after=op,
        how=how,
        detail=details.get(how, f"left {op.state.value}: its thread was not resumed"),
    )


def _report(
    before: Operation | None, after: Operation, how: Settlement, detail: str, steps: Sequence[Step]
) -> OperationReport:
    return OperationReport(
        op_id=after.op_id,
        tool=after.tool,
        tool_call_id=after.tool_call_id,
        contract=after.contract,
        provider_key=after.provider_key,
        before=before,
        after=after,
        how=how,
        detail=detail,
        steps=tuple(steps),
    )


def _receipt(evidence: Mapping[str, Any] | None) -> str:
    receipt = (evidence or {}).get("receipt")
    if receipt is None:
        return ""
    return f" (receipt {json.dumps(receipt, sort_keys=True, default=str)})"


def _forecast(op: Operation, now: float) -> str:
    """What resuming is expected to do with ``op`` (for a dry run)."""
    if op.terminal:
        return f"its outcome is recorded ({op.state.value}): it will be answered from the ledger"
    if op.state is State.REVIEW:
        return "waits for an operator's verdict: the review is asked again"
    if _awaiting_approval(op):
        return "waits for an approval: it is asked for again"
    if op.state is State.PENDING:
        if op.attempts:
            return f"cleared to send again: it will be re-sent under {op.provider_key}"
        return "nothing was sent yet: it will be sent"
    lost = "its sender is gone; " if op.state is State.DISPATCHED else ""
    by_contract = {
        "dedup": f"re-sent under {op.provider_key}, which the provider deduplicates on (within its window)",
        "lookup": "looked up at the provider: confirmed if found, re-sent under the same key if not",
        "lookup-eventual": "looked up (re-polled until the listing settles): confirmed or re-sent",
        "blind": "nothing can prove whether it landed: it goes to review",
    }
    return lost + by_contract.get(op.contract, "reconciled from the evidence its contract allows")


def _settled(
    before: Operation | None, after: Operation, steps: Sequence[Step], *, now: float
) -> tuple[Settlement, str]:
    """How the operation got from ``before`` to ``after``, from the steps recorded meanwhile."""
    last: dict[str, Step] = {}
    for step in steps:
        last[step.event] = step
    cause = ""
    lost = last.get("lose")
    if lost is not None:
        kind = (lost.evidence or {}).get("kind")
        cause = "its sender was gone (lease lost); " if kind == "lease" else f"the call was lost ({kind}); "
    if before is None:
        prefix = "created by the resumed run (the model asked for more); "
        if after.state is State.CONFIRMED:
            return "sent", prefix + "sent and confirmed"
        return "unsettled" if not after.terminal else "failed", prefix + f"now {after.state.value}"
    if not steps:
        if after.terminal:
            evidence = after.evidence or {}
            if evidence.get("kind") == "verdict":
                who = evidence.get("actor") or "an operator"
                what = f"{after.state.value} by {who}'s verdict"
            else:
                what = f"{after.state.value} ({evidence.get('kind', 'result')})"
            return "replayed", f"answered from the ledger, nothing sent: {what}{_receipt(evidence)}"
        if _waits_for_human(after):
            return "awaiting_review", _untouched(after, "awaiting_review").detail
        if after.state is State.DISPATCHED and not lease_expired(after, now=now):
            return "in_flight_elsewhere", "someone is sending it right now (live lease)"
        return "unsettled", f"still {after.state.value}: the resume did not reach it"
    if after.state is State.REVIEW:
        escalated = last.get("escalate")
        why = (escalated.evidence or {}).get("kind", "no evidence") if escalated else "no evidence"
        return "sent_to_review", (
            cause + f"evidence cannot settle it ({why}): it waits for an operator's verdict"
        )
    if after.state is State.CONFIRMED:
        if "confirm" in last:
            found = last["confirm"].evidence
            return "confirmed_by_lookup", cause + "the provider's lookup found it" + _receipt(found)
        if "landed" in last:
            return "decided_by_operator", "an operator ruled it landed" + _receipt(last["landed"].evidence)
        if "resend" in last:
            kind = (last["resend"].evidence or {}).get("kind")
            if kind == "dedup":
                return "settled_by_dedup", (
                    cause + f"re-sent under the same provider key {after.provider_key}, which the "
                    "provider deduplicates on"
                )
            return "resent_under_key", (
                cause + f"the lookup proved it absent: re-sent under the same provider key "
                f"{after.provider_key}"
            )
        if "dispatch" in last:
            if before.attempts == 0:
                return "sent", "nothing had been sent before the crash: sent now"
            return "resent_under_key", (
                f"an operator ruled it did not land: re-sent under the same provider key {after.provider_key}"
            )
        return "confirmed", cause + "the tool returned a result"
    if after.state is State.FAILED:
        error = (after.evidence or {}).get("error", "a definite error")
        return "failed", cause + f"the provider rejected it definitely: {error}"
    if after.state is State.ABANDONED:
        reason = (after.evidence or {}).get("reason")
        return "decided_by_operator", "closed without confirming the effect" + (
            f": {reason}" if reason else ""
        )
    if after.state is State.DISPATCHED and not lease_expired(after, now=now):
        return "in_flight_elsewhere", cause + "someone else took it over and is sending it now"
    return "unsettled", cause + f"now {after.state.value}: the resume did not settle it"
