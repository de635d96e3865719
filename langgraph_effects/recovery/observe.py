"""Read what recovery needs to know about threads: the ledger and the checkpoints. No decisions."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from .._runtime.decisions import APPROVAL_TYPE, REVIEW_TYPE
from .._runtime.lease import lease_expired, owner_alive
from ..core.operation import UNRESOLVED, Operation, State
from ..ledger.base import Ledger, OperationQuery
from ..ledger.query import cursor
from .classify import Observation, decided_out_of_band

#: The ``type`` of our interrupts (see `langgraph_effects._runtime.decisions`).
_OUR_INTERRUPTS = frozenset({REVIEW_TYPE, APPROVAL_TYPE})

#: How many rows one read of :func:`every_operation` asks for.
PAGE = 10_000


async def every_operation(ledger: Ledger, query: OperationQuery) -> list[Operation]:
    """Every operation matching ``query`` (its limit ignored), in listing order: read a
    page at a time, each starting after the last row of the one before (keyset), so
    no cap leaves rows unread and no page costs more than what it holds."""
    found: list[Operation] = []
    after = None
    while True:
        rows = await ledger.list_operations(dataclasses.replace(query, limit=PAGE, after=after))
        found += rows
        if len(rows) < PAGE:
            return found
        after = cursor(rows[-1])


async def operations_of(ledger: Ledger, thread_id: str, tenant: str | None) -> list[Operation]:
    """Every operation of the thread (of ``tenant``, if given), undos left out: no call
    of the graph answers for them (recovery finishes them on their own)."""
    found = await every_operation(ledger, OperationQuery(thread_id=thread_id, tenant=tenant))
    return [op for op in found if op.compensates is None]


async def _candidate_threads(
    ledger: Ledger, tenant: str | None, *, verdicts_within: float | None = None
) -> list[str]:
    """Threads with an unresolved operation or a recent out-of-band verdict, oldest first.

    Both reads follow indexes on what they ask for (unresolved rows; rows carrying a
    verdict), so their cost is the unresolved work and the verdicts, whatever the size
    of the ledger. Decided operations are read only if they changed within
    ``verdicts_within`` seconds (``None``: whenever): a thread whose graph answered the
    verdict since is then skipped by `classify` (nothing left to answer)."""
    since = time.time() - verdicts_within if verdicts_within is not None else None
    first_seen: dict[str, float] = {}
    unresolved = await every_operation(ledger, OperationQuery(states=UNRESOLVED, tenant=tenant))
    for op in unresolved:
        if op.compensates is None:  # an undo is finished on its own, not by a resume
            first_seen.setdefault(op.thread_id, op.updated_at)
    decided = await every_operation(
        ledger,
        OperationQuery(
            states=frozenset({State.CONFIRMED, State.ABANDONED}),
            tenant=tenant,
            updated_after=since,
            verdicts=True,
        ),
    )
    for op in decided:
        if decided_out_of_band(op):
            first_seen.setdefault(op.thread_id, op.updated_at)
    return sorted(first_seen, key=lambda t: first_seen[t])


async def unfinished_threads(checkpointer: Any) -> list[str]:
    """Threads whose last checkpoint has work no run finished, as the checkpointer
    lists them (``AsyncEffectSqliteSaver``/``AsyncEffectPostgresSaver``: input never processed,
    or a step's writes saved with no checkpoint after them), oldest first; ``[]`` for
    a checkpointer that cannot list them. The ledger cannot know such a thread when
    none of its tool calls was recorded yet."""
    lister = getattr(checkpointer, "unfinished_threads", None)
    return list(await lister()) if lister is not None else []


def unfinished(snapshot: Any) -> bool:
    """The state has work left: nodes to run, or tasks whose writes were saved but no
    checkpoint applied (LangGraph then reports ``next == ()``: the ``__start__`` task
    of input that a crash kept from its first checkpoint)."""
    return bool(snapshot.next or snapshot.tasks)


async def observe(
    graph: Any, ledger: Ledger, thread_id: str, *, tenant: str | None, lease_grace: float
) -> Observation:
    """Read one thread's operations and checkpoint state, and whose senders are gone."""
    ops = await operations_of(ledger, thread_id, tenant)
    snapshot = await graph.aget_state({"configurable": {"thread_id": thread_id}})
    now = time.time()
    ours = [i for i in snapshot.interrupts if _interrupt_type(i) in _OUR_INTERRUPTS]
    asked, answered = _calls_in(snapshot.values)
    dispatched = [o for o in ops if o.state is State.DISPATCHED]
    return Observation(
        thread_id=thread_id,
        ops=tuple(ops),
        now=now,
        has_next=unfinished(snapshot),
        ours=len(ours),
        others=len(snapshot.interrupts) - len(ours),
        listed=frozenset(_listed_operations(ours)),
        asked=frozenset(asked),
        answered=frozenset(answered),
        has_checkpoint=snapshot.created_at is not None,
        checkpoint_at=_timestamp(snapshot.created_at),
        sender_gone=frozenset(
            o.op_id for o in dispatched if lease_expired(o, now=now - lease_grace)
        ),
        senders={o.op_id: _sender(o) for o in dispatched},
    )


def _sender(op: Operation) -> str:
    """Who sends ``op``, for a human."""
    if op.owner is None:
        return "a worker"
    where = "this host" if owner_alive(op.owner) is not None else op.owner.host
    return f"pid {op.owner.pid} on {where}"


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


def _timestamp(created_at: str | None) -> float | None:
    if not created_at:
        return None
    try:
        return datetime.fromisoformat(created_at).timestamp()
    except ValueError:
        return None
