"""A ledger that lives for years: the plans that remove settled operations (retention,
a deleted thread) and erase the personal data of settled ones (arguments, results,
notes), keeping ids, states and times so the audit trail stays whole.

Each plan is one short transaction over a bounded batch of ids (see `Forget` and
`Erase`): a purge of millions of rows never holds a lock a running worker needs for
longer than one batch. Only settled (`TERMINAL`) operations are ever erased; they are
removed only when the caller names the states (retention and an unforced thread
deletion name the settled ones, a forced thread deletion every state).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Collection, Generator, Mapping, Sequence
from typing import Any

from ..core.operation import Operation, State
from .codec import erased_evidence, read_text, stored_text
from .steps import Erase, Forget, LedgerStep, ListDeletions, Lock, RecordDeletion

#: The audit event of an erasure (not a transition: the state stays where it was).
ERASE_EVENT = "erase"


def is_erased(op: Operation) -> bool:
    """Whether ``op``'s arguments, result and notes were erased."""
    return bool((op.evidence or {}).get("erased")) or bool(op.extra.get("erased"))


def forget_plan(
    op_ids: Sequence[str], states: Collection[State | str], updated_before: float | None = None
) -> Generator[LedgerStep, Any, list[str]]:
    """Delete the rows among ``op_ids`` in ``states`` (changed before ``updated_before``),
    their audit rows and their budget holds, in one transaction; the ids deleted."""
    if not op_ids:
        return []
    names = tuple(sorted({State(s).value for s in states}))
    deleted = yield Forget(tuple(sorted(set(op_ids))), names, updated_before)
    return list(deleted)


def erased_operation(op: Operation, actor: str, at: float) -> Operation:
    """``op`` with its arguments, result and notes erased, one version later.

    Ids, state, contract, provider key, args hash, attempts and times stay; ``extra``
    keeps only what links the operation to others (``turn``, ``origin``, ``call``,
    ``saga``, ``compensates``, ``edited_from``) and records the erasure.
    """
    mark = {"by": actor, "at": at}
    kept = ("turn", "origin", "call", "saga", "compensates", "edited_from", "approval")
    extra: dict[str, Any] = {k: op.extra[k] for k in kept if k in op.extra}
    extra["erased"] = mark
    evidence = erased_evidence(op.evidence, mark) or {"erased": mark}
    return dataclasses.replace(
        op,
        args={},
        result=None,
        result_type=None,
        evidence=evidence,
        extra=extra,
        version=op.version + 1,
        updated_at=at,
    )


def erase_plan(op_ids: Sequence[str], actor: str) -> Generator[LedgerStep, Any, list[str]]:
    """Erase each settled operation among ``op_ids`` not erased yet (under its row lock,
    in id order), with one audit row each (event ``erase``, who and when); the ids
    erased. Unresolved rows are left as they are: their arguments are still needed to
    settle them."""
    erased: list[str] = []
    for op_id in sorted(set(op_ids)):
        before = yield Lock(op_id)
        if before is None or not before.terminal or is_erased(before):
            continue
        at = time.time()
        after = erased_operation(before, actor, at)
        audit = {
            "op_id": stored_text(op_id),
            "seq": after.version,
            "at": at,
            "actor": stored_text(actor),
            "from_state": before.state.value,
            "to_state": after.state.value,
            "event": ERASE_EVENT,
            "version": after.version,
            "evidence": None,
        }
        if (yield Erase(after, before.version, audit)):
            erased.append(op_id)
    return erased


def record_deletion_plan(
    thread_id: str, at: float, actor: str, operations: Sequence[Mapping[str, Any]]
) -> Generator[LedgerStep, Any, None]:
    """Record that ``actor`` deleted ``thread_id`` by force at ``at`` while
    ``operations`` (each a dict of JSON values) were unresolved (`RecordDeletion`)."""
    row = {
        "thread_id": stored_text(thread_id),
        "at": at,
        "actor": stored_text(actor),
        "operations": stored_text(json.dumps([dict(o) for o in operations], ensure_ascii=False)),
    }
    yield RecordDeletion(row)


def deletions_plan(thread_id: str | None) -> Generator[LedgerStep, Any, list[dict[str, Any]]]:
    """The forced deletions recorded (of ``thread_id``, if given), oldest first, as
    `record_deletion_plan` was given them (``thread_id``, ``at``, ``actor``,
    ``operations``)."""
    rows = yield ListDeletions(None if thread_id is None else stored_text(thread_id))
    return [
        {
            "thread_id": read_text(row["thread_id"]),
            "at": float(row["at"]),
            "actor": read_text(row["actor"]),
            "operations": json.loads(read_text(row["operations"])),
        }
        for row in rows
    ]
