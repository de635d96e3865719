"""The ledger over years, for operators: `purge` (retention), `delete_thread` (a
thread's operations with it) and `erase` (one tenant's or one thread's personal data).

Every function works in small batches, each one short transaction (see
`langgraph_effects.ledger.lifecycle`): a purge of a large ledger never holds a lock a
running worker needs for longer than one batch. Unresolved operations are never
removed by time, nor erased: their arguments and provider key are what settles them.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from ..core._fields import seconds
from ..core.operation import TERMINAL, UNRESOLVED, Operation, State
from ..core.text import require_text
from ..errors import UnresolvedOperationsError
from ..ledger.base import DEFAULT_ACTOR, Ledger, OperationQuery
from ..ledger.lifecycle import is_erased, record_deletion_plan
from .shapes import DeletedOperationJSON, DeletionJSON, ErasureReportJSON, PurgeReportJSON

log = logging.getLogger("langgraph_effects.lifecycle")

#: Rows read (and removed or erased) per transaction.
DEFAULT_BATCH = 500


def in_dedup_window(op: Operation, now: float) -> bool:
    """Whether the provider may still honour ``op``'s key at ``now``: the dedup window
    recorded at the operation's intent (``extra["dedup_window"]``, seconds; none when
    its provider does not deduplicate) runs from the intent, as reconciliation counts it."""
    window = op.extra.get("dedup_window")
    return isinstance(window, int | float) and now - op.created_at <= window


@dataclass
class PurgeReport:
    """What `purge` removed (or, in a dry run, would remove)."""

    older_than: float
    """The retention window, in seconds."""
    cutoff: float
    """Settled operations last changed before this time were candidates."""
    dry_run: bool
    removed: list[str] = field(default_factory=list)
    """The ids removed (dry run: that would be removed)."""
    kept_in_dedup_window: list[str] = field(default_factory=list)
    """Settled and past the cutoff, but their provider may still honour their key:
    kept until their dedup window has run out."""
    kept_undo_pending: list[str] = field(default_factory=list)
    """Confirmed effects marked for compensation whose undo is not settled yet."""
    batches: int = 0

    def to_json(self) -> PurgeReportJSON:
        """What ``langgraph-effects purge --json`` prints."""
        return {
            "older_than_seconds": self.older_than,
            "cutoff": self.cutoff,
            "dry_run": self.dry_run,
            "removed": len(self.removed),
            "kept_in_dedup_window": len(self.kept_in_dedup_window),
            "kept_undo_pending": len(self.kept_undo_pending),
            "batches": self.batches,
        }


async def purge(
    ledger: Ledger,
    older_than: float | timedelta,
    *,
    dry_run: bool = True,
    tenant: str | None = None,
    batch_size: int = DEFAULT_BATCH,
    now: float | None = None,
) -> PurgeReport:
    """Remove settled operations (``confirmed``, ``failed``, ``abandoned``) last changed
    more than ``older_than`` ago, with their audit rows and budget holds.

    A dry run (the default) removes nothing and reports what would go. Each batch of
    ``batch_size`` ids is removed in its own short transaction, and a row that moved
    since it was read (a failure retried, an effect marked for compensation) is kept.
    Never removed: unresolved operations; a settled one whose provider may still honour
    its key (its dedup window, recorded at intent, has not run out: the clamp is per
    operation); a confirmed effect whose undo is not settled yet. With ``tenant``, only
    that tenant's operations.
    """
    window = seconds(older_than)
    if window is None or not window > 0:
        raise ValueError(
            f"older_than must be a positive duration (seconds or a timedelta), not {older_than!r}: "
            "say how long settled operations are kept, e.g. 90 days. Nothing was removed."
        )
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size!r}. Nothing was removed.")
    stamp = time.time() if now is None else now
    report = PurgeReport(older_than=window, cutoff=stamp - window, dry_run=dry_run)
    after: float | None = None
    seen: set[str] = set()  # the ids read at the boundary instant (`after`)
    while True:
        page = await ledger.list_operations(
            OperationQuery(
                states=TERMINAL, tenant=tenant, updated_before=report.cutoff,
                updated_after=after, limit=batch_size,
            )
        )
        fresh = [op for op in page if op.op_id not in seen]
        if not fresh:
            return report
        chosen = await _removable(ledger, fresh, stamp, report)
        if chosen and not dry_run:
            report.removed.extend(
                await ledger.forget_operations([op.op_id for op in chosen], updated_before=report.cutoff)
            )
        elif chosen:
            report.removed.extend(op.op_id for op in chosen)
        report.batches += 1
        # Re-read the last instant (rows sharing it may not all have fit this page).
        last = page[-1].updated_at
        seen = {op.op_id for op in page if op.updated_at == last}
        after = _just_before(last)


def _just_before(stamp: float) -> float:
    """The largest float below ``stamp``: ``updated_after`` is strict."""
    return math.nextafter(stamp, -math.inf)


async def _removable(
    ledger: Ledger, page: Sequence[Operation], now: float, report: PurgeReport
) -> list[Operation]:
    """The rows of ``page`` that may go, noting in ``report`` those kept and why."""
    undos = [op.compensated_by for op in page if op.compensated_by]
    stored = await ledger.get_many([u for u in undos if u]) if undos else {}
    chosen = []
    for op in page:
        if in_dedup_window(op, now):
            report.kept_in_dedup_window.append(op.op_id)
        elif op.compensated_by and (undo := stored.get(op.compensated_by)) and undo.state in UNRESOLVED:
            report.kept_undo_pending.append(op.op_id)
        else:
            chosen.append(op)
    return chosen


async def all_operations(
    ledger: Ledger,
    *,
    thread_id: str | None = None,
    tenant: str | None = None,
    batch_size: int = DEFAULT_BATCH,
) -> list[Operation]:
    """Every operation of ``thread_id`` or ``tenant`` (all states), read a page at a time."""
    found: dict[str, Operation] = {}
    after: float | None = None
    while True:
        page = await ledger.list_operations(
            OperationQuery(thread_id=thread_id, tenant=tenant, updated_after=after, limit=batch_size)
        )
        fresh = [op for op in page if op.op_id not in found]
        if not fresh:
            return list(found.values())
        found.update((op.op_id, op) for op in fresh)
        after = _just_before(page[-1].updated_at)


async def delete_thread_operations(
    ledger: Ledger,
    thread_id: str,
    *,
    force: bool = False,
    actor: str = DEFAULT_ACTOR,
    batch_size: int = DEFAULT_BATCH,
) -> list[str]:
    """Remove every operation of ``thread_id`` (with audit rows and budget holds); the
    ids removed. A saver's ``adelete_thread`` does the same around deleting the
    checkpoints (`check_thread_deletable`, then `forget_thread`).

    While the thread has unresolved operations, raises
    [`UnresolvedOperationsError`][langgraph_effects.errors.UnresolvedOperationsError]
    naming them and removes nothing, unless ``force``: then they are removed too, and
    the decision (who, when, which operations, in which states) is recorded in the
    ledger, kept after they are gone (`forced_deletions`, ``langgraph-effects
    deletions``), and logged at WARNING on the ``langgraph_effects.lifecycle`` logger.
    """
    await check_thread_deletable(ledger, thread_id, force=force, actor=actor, batch_size=batch_size)
    return await forget_thread(ledger, thread_id, force=force, batch_size=batch_size)


async def check_thread_deletable(
    ledger: Ledger, thread_id: str, *, force: bool, actor: str, batch_size: int = DEFAULT_BATCH
) -> None:
    """Refuse the deletion of ``thread_id`` while it has unresolved operations
    (`UnresolvedOperationsError`), or, with ``force``, record the decision in the
    ledger (a `Deletion`, see `forced_deletions`) and log it."""
    require_text(thread_id, "thread_id", "Pass the thread id the graph ran with; nothing was deleted.")
    ops = await all_operations(ledger, thread_id=thread_id, batch_size=batch_size)
    unresolved = [op for op in ops if op.state in UNRESOLVED]
    if unresolved and not force:
        raise UnresolvedOperationsError(thread_id, unresolved)
    if unresolved:
        kept = [_deleted(op) for op in unresolved]
        at = time.time()
        await ledger.transact(lambda: record_deletion_plan(thread_id, at, actor, kept))
        log.warning(
            "%s deleted thread %r with %d unresolved operation(s), forced: %s",
            actor, thread_id, len(unresolved),
            ", ".join(f"{o.op_id} ({o.state.value}, {o.tool}, key {o.provider_key})" for o in unresolved),
        )


@dataclass(frozen=True)
class Deletion:
    """A thread deleted by force while some of its operations were unresolved: who
    decided, when, and what those operations were (kept after they are gone)."""

    thread_id: str
    at: float
    actor: str
    operations: tuple[DeletedOperationJSON, ...]
    """Each unresolved operation as it was when the thread was deleted."""

    def to_json(self) -> DeletionJSON:
        """One entry of ``langgraph-effects deletions --json``."""
        return {
            "thread_id": self.thread_id,
            "at": self.at,
            "actor": self.actor,
            "operations": list(self.operations),
        }


def _deleted(op: Operation) -> DeletedOperationJSON:
    """What a `Deletion` keeps of one unresolved operation."""
    return {
        "operation_id": op.op_id,
        "state": op.state.value,
        "tool": op.tool,
        "provider_key": op.provider_key,
        "tenant": op.tenant,
        "updated_at": op.updated_at,
    }


async def forced_deletions(ledger: Ledger, *, thread_id: str | None = None) -> list[Deletion]:
    """The threads deleted by force while they had unresolved operations (of
    ``thread_id``, if given), oldest first: who decided, when, and what those
    operations were. Kept after the operations are gone (``langgraph-effects
    deletions``)."""
    rows = await ledger.deletion_rows(thread_id)
    return [
        Deletion(
            thread_id=row["thread_id"],
            at=row["at"],
            actor=row["actor"],
            operations=tuple(row["operations"]),
        )
        for row in rows
    ]


async def forget_thread(
    ledger: Ledger, thread_id: str, *, force: bool, batch_size: int = DEFAULT_BATCH
) -> list[str]:
    """Remove the operations of ``thread_id``: settled ones, or every one with
    ``force``, a batch per transaction; the ids removed. An operation a run started
    since the check (still unresolved) is kept unless ``force``."""
    ops = await all_operations(ledger, thread_id=thread_id, batch_size=batch_size)
    states = frozenset(State) if force else TERMINAL
    ids = [op.op_id for op in ops]
    removed: list[str] = []
    for start in range(0, len(ids), batch_size):
        removed.extend(await ledger.forget_operations(ids[start : start + batch_size], states=states))
    return removed


@dataclass(frozen=True)
class ErasureReport:
    """What `erase` erased (or, in a dry run, would erase)."""

    tenant: str | None
    thread_id: str | None
    actor: str
    dry_run: bool
    erased: list[str] = field(default_factory=list)
    already_erased: list[str] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    """Not settled yet: left as they are (their arguments settle them). Settle them,
    then erase again."""

    def to_json(self) -> ErasureReportJSON:
        """What ``langgraph-effects erase --json`` prints."""
        return {
            "tenant": self.tenant,
            "thread_id": self.thread_id,
            "actor": self.actor,
            "dry_run": self.dry_run,
            "erased": self.erased,
            "already_erased": self.already_erased,
            "unresolved": self.unresolved,
        }


async def erase(
    ledger: Ledger,
    *,
    tenant: str | None = None,
    thread_id: str | None = None,
    actor: str,
    dry_run: bool = False,
    batch_size: int = DEFAULT_BATCH,
) -> ErasureReport:
    """Erase the arguments, results and notes of one tenant's or one thread's settled
    operations, keeping their ids, states, keys, hashes and times.

    Each operation erased gets an audit entry (event ``erase``, ``actor``, when), and
    the evidence of its earlier entries keeps only its kind. `show` then says the data
    was erased; a replay of an erased call tells the model what it did without its
    result. Unresolved operations are left as they are and listed in ``unresolved``.
    Give exactly one of ``tenant`` and ``thread_id``.
    """
    if (tenant is None) == (thread_id is None):
        raise ValueError("give exactly one of tenant= and thread_id= (what to erase). Nothing was erased.")
    require_text(actor, "actor", "Name who erases in valid text; nothing was erased.")
    for name, value in (("tenant", tenant), ("thread_id", thread_id)):
        require_text(value, name, "Pass it as the graph recorded it; nothing was erased.")
    if not actor.strip():
        raise ValueError("actor must name who erases (it goes in the audit trail). Nothing was erased.")
    ops = await all_operations(ledger, thread_id=thread_id, tenant=tenant, batch_size=batch_size)
    report = ErasureReport(tenant=tenant, thread_id=thread_id, actor=actor, dry_run=dry_run)
    todo = []
    for op in ops:
        if op.state in UNRESOLVED:
            report.unresolved.append(op.op_id)
        elif is_erased(op):
            report.already_erased.append(op.op_id)
        else:
            todo.append(op.op_id)
    if dry_run:
        report.erased.extend(todo)
        return report
    for start in range(0, len(todo), batch_size):
        report.erased.extend(await ledger.erase_operations(todo[start : start + batch_size], actor=actor))
    return report

