"""Crash recovery: find the threads a crash left mid-effect and resume each one once.

A service calls it on start-up (or an operator runs ``langgraph-effects recover``):

    async with AsyncEffectSqliteSaver.from_conn_string("agent.sqlite") as saver:
        await saver.setup()
        graph = builder.compile(checkpointer=saver)
        report = await recover(graph)
        log.info("%s", report.summary())

The ledger says where to look: a killed task leaves no trace LangGraph can tell
from "never started", the ledger does. Recovery looks at every thread with an
unresolved operation (``pending``, ``dispatched``, ``unknown``, ``review``) and every
thread with an operation an operator decided out of band (``langgraph-effects
resolve``) that the graph has not answered yet. The checkpoints add the threads the
ledger cannot know: with ``AsyncEffectSqliteSaver``/``AsyncEffectPostgresSaver`` (and no
``tenant`` filter), every thread whose newest checkpoint is unprocessed input or holds
a step's writes with no checkpoint after them (a worker died between saving the
``__start__`` writes and the first checkpoint: LangGraph then reports ``next == ()``).
A thread is done only when nothing is pending: no next node, no task with saved
writes, no interrupt. Per thread:

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
the dispatcher itself never sends under a live lease. What makes recovery safe to run
while workers run (or twice at once) is the checkpointer: ``AsyncEffectSqliteSaver`` and
``AsyncEffectPostgresSaver`` let one runner per thread move it on (a checkpoint gets at
most one child). If a worker resumed the thread too, whichever saves second is
stopped before anything of its run lands; when that is recovery, the thread is
reported *running elsewhere*, not as a failure. ``min_idle`` only spares a thread
that looks busy a resume that would lose that race. With a checkpointer that does
not fence threads (a plain LangGraph saver with ``attach_ledger``), run recovery only
when no worker can be running the threads.

The package reads in three steps: `observe` reads a thread's operations and
checkpoint state, `classify` decides from that alone (pure, no I/O) what to do
and why, `resume` does it; `narrative` tells, from the audit trail, how
each operation was settled, and `report` holds what is reported.
"""

from .classify import Observation, Policy, ThreadDecision, classify
from .report import OperationReport, RecoveryReport, Settlement, ThreadAction, ThreadReport, TransitionReport
from .resume import DEFAULT_VERDICTS_WITHIN, recover

__all__ = [
    "DEFAULT_VERDICTS_WITHIN",
    "Observation",
    "OperationReport",
    "Policy",
    "RecoveryReport",
    "Settlement",
    "ThreadAction",
    "ThreadDecision",
    "ThreadReport",
    "TransitionReport",
    "classify",
    "recover",
]
