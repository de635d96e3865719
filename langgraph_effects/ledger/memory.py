"""An in-memory ledger for tests and notebooks. It survives nothing: never for production."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from ..core.controls import ControlRow
from ..core.operation import Operation
from .base import (
    MUTABLE_COLUMNS,
    AuditEntry,
    Ledger,
    OperationQuery,
    Plan,
    T,
    audit_from_row,
    drive_plan,
    from_row,
    may_renew,
    migrate_plan,
    to_row,
)
from .codec import erased_evidence
from .steps import (
    LEDGER_TABLES,
    ApplyMigration,
    CasWithAudit,
    CountMigrations,
    CreateLedger,
    Erase,
    Find,
    Forget,
    InsertWithAudit,
    ListControls,
    ListDeletions,
    Load,
    Lock,
    LockControls,
    OurTables,
    RecordDeletion,
    StepDefaults,
    WriteControls,
    answer,
)

#: The Operation fields behind `MUTABLE_COLUMNS` (one field a column).
MUTABLE_FIELDS: tuple[str, ...] = tuple(c for c in MUTABLE_COLUMNS if c != "op_id")


class InMemoryLedger(StepDefaults, Ledger):
    """The ledger protocol on dictionaries, with the same semantics as the durable ones.

    It answers every storage step (`steps`) itself, schema steps included, and
    works without `setup` (which only records its one migration).
    """

    where = "memory"

    def __init__(self) -> None:
        self._ops: dict[str, Operation] = {}
        self._audit: dict[str, list[AuditEntry]] = {}
        self._keys: set[tuple[str, str]] = set()
        #: Each thread's op ids in the order they were stored: a find reads its
        #: thread's rows, not every row.
        self._by_thread: dict[str, dict[str, None]] = {}
        self._lock = asyncio.Lock()
        #: Transactions that would be durable commits in a real backend.
        self.commits = 0
        #: Migrations recorded (``None``: never set up; the dictionaries work anyway).
        self._migrations: int | None = None
        #: Control rows (budgets, circuit breakers, holds) by (control, scope).
        self._controls: dict[tuple[str, str], ControlRow] = {}
        #: Forced thread deletions recorded, oldest first.
        self._deletions: list[dict[str, Any]] = []

    async def aclose(self) -> None:
        return None

    async def setup(self) -> None:
        async with self._lock:  # not counted in `commits`: no call's write
            drive_plan(migrate_plan(self.SCHEMA_VERSION, self.where, "another ledger"), self._answer)

    async def _transact(self, plan: Plan[T]) -> T:
        async with self._lock:
            result, wrote = drive_plan(plan, self._answer)
            self.commits += wrote
            return result

    def _answer(self, step: Any) -> Any:
        """``step`` answered by this ledger's method for it (see `steps`)."""
        return answer(self, step)

    # -- the steps (see `StepRunner`) ------------------------------------

    def lock(self, step: Lock) -> Operation | None:
        return self._ops.get(step.op_id)  # the ledger's lock is held for the whole plan

    def load(self, step: Load) -> dict[str, Operation]:
        return {i: self._ops[i] for i in step.op_ids if i in self._ops}

    def find(self, step: Find) -> list[Operation]:
        ids, wanted = set(step.op_ids), set(step.pairs)
        thread = self._by_thread.get(step.thread_id, {})
        mine = [
            op
            for op in map(self._ops.__getitem__, thread)
            if op.op_id in ids
            or ((op.tool, op.args_hash) in wanted and step.origin in (None, op.extra.get("origin")))
        ]
        # Rows asked for by id are found whatever thread they were stored under.
        others = [self._ops[i] for i in dict.fromkeys(step.op_ids) if i in self._ops and i not in thread]
        return mine + others

    def insert_with_audit(self, step: InsertWithAudit) -> list[str]:
        inserted = []
        for i, op in enumerate(step.ops):
            key = (op.tenant, op.provider_key)
            if op.op_id in self._ops or key in self._keys:
                continue  # UNIQUE (tenant, provider_key), as in the SQL backends
            # Stored as a SQL backend would hand it back (lists, not tuples).
            self._ops[op.op_id] = from_row(to_row(op))
            self._keys.add(key)
            self._by_thread.setdefault(op.thread_id, {})[op.op_id] = None
            inserted.append(op.op_id)
            self._append_audit(step.audit[i])
        return inserted

    def cas_with_audit(self, step: CasWithAudit) -> bool:
        stored = self._ops.get(step.after.op_id)
        if stored is None or stored.version != step.expected_version:
            return False
        # Only the mutable columns, as the SQL backends' UPDATE writes: the
        # identity and payload stored at intent stay as they were.
        fresh = {c: getattr(step.after, c) for c in MUTABLE_FIELDS}
        self._ops[step.after.op_id] = dataclasses.replace(stored, **fresh)
        self._append_audit(step.audit)
        return True

    def forget(self, step: Forget) -> list[str]:
        deleted = []
        for op_id in step.op_ids:
            op = self._ops.get(op_id)
            if op is None or op.state.value not in step.states:
                continue
            if step.updated_before is not None and not op.updated_at < step.updated_before:
                continue
            del self._ops[op_id]
            self._keys.discard((op.tenant, op.provider_key))
            self._by_thread.get(op.thread_id, {}).pop(op_id, None)
            self._audit.pop(op_id, None)
            self._controls.pop(("hold", op_id), None)
            deleted.append(op_id)
        return deleted

    def erase(self, step: Erase) -> bool:
        stored = self._ops.get(step.after.op_id)
        if stored is None or stored.version != step.expected_version:
            return False
        fresh = {c: getattr(step.after, c) for c in (*MUTABLE_FIELDS, "args", "extra")}
        self._ops[step.after.op_id] = from_row(to_row(dataclasses.replace(stored, **fresh)))
        mark = step.after.extra["erased"]
        self._audit[stored.op_id] = [
            dataclasses.replace(entry, evidence=erased_evidence(entry.evidence, mark))
            for entry in self._audit.get(stored.op_id, [])
        ]
        self._append_audit(step.audit)
        return True

    def lock_controls(self, step: LockControls) -> dict[tuple[str, str], ControlRow]:
        return {k: self._controls[k] for k in step.keys if k in self._controls}  # the plan holds the lock

    def write_controls(self, step: WriteControls) -> None:
        for row in step.rows:
            self._controls[row.key] = row

    def list_controls(self, step: ListControls) -> list[ControlRow]:
        return [row for key, row in sorted(self._controls.items()) if row.control != "hold"]

    def record_deletion(self, step: RecordDeletion) -> None:
        self._deletions.append(dict(step.row))

    def list_deletions(self, step: ListDeletions) -> list[dict[str, Any]]:
        return [dict(r) for r in self._deletions if step.thread_id in (None, r["thread_id"])]

    def our_tables(self, step: OurTables) -> set[str]:
        return set(LEDGER_TABLES) if self._migrations is not None else set()

    def count_migrations(self, step: CountMigrations) -> int:
        return self._migrations or 0

    def create_ledger(self, step: CreateLedger) -> None:
        self._migrations = 0

    def apply_migration(self, step: ApplyMigration) -> None:
        # The dictionaries need no schema: a migration is only recorded.
        self._migrations = max(self._migrations or 0, step.index + 1)

    def _append_audit(self, row: dict[str, Any]) -> None:
        entry = audit_from_row(row)
        self._audit.setdefault(entry.op_id, []).append(entry)

    async def renew_lease(self, op_id: str, token: str, lease_expires_at: float) -> bool:
        async with self._lock:
            op = self._ops.get(op_id)
            if op is None or not may_renew(op, token):
                return False
            self._ops[op_id] = dataclasses.replace(op, lease_expires_at=lease_expires_at)
            return True

    async def list_operations(self, query: OperationQuery) -> list[Operation]:
        return query.select(self._ops.values())

    async def audit(self, op_id: str) -> list[AuditEntry]:
        return list(self._audit.get(op_id, []))
