"""The backend kit: everything a new ledger backend is written against, in one import.

A backend stores; the ledger's rules (the state machine, who may renew a lease,
group commit, the migration order) are written once, as *plans* that yield storage
steps (`steps`). A backend answers each step with one method of its own
(``lock``, ``load``, ``find``, ``insert_with_audit``, ``find_or_insert``,
``cas_with_audit``, ``cas_each``, ``lock_controls``, ``write_controls``,
``list_controls``, ``our_tables``, ``count_migrations``,
``create_ledger``, ``apply_migration``), runs each plan as one transaction, and
answers three queries that are not plans (``list_operations``, ``audit``,
``renew_lease``). `LedgerBackend` does the running: subclass it, write the
methods, and register a URL scheme with `register_backend` so that
`open_ledger` (and the console's ``--db``) opens it. Prove it with
`langgraph_effects.testing.conformance`. See ``docs/backends.md``.
"""

from __future__ import annotations

import abc
import asyncio
from typing import Any

from ..core.controls import ControlRow
from ..core.operation import Operation
from ..errors import LedgerError, LedgerNotFoundError, LedgerUnavailableError
from .backend import Backend, LedgerOptions, OpenLedger
from .base import (
    DEFAULT_ACTOR,
    AuditEntry,
    Ledger,
    OperationQuery,
    Plan,
    T,
    adrive_plan,
    drive_plan,
    listing_order,
    may_renew,
    migrate_plan,
)
from .codec import (
    COLUMNS,
    ERASE_COLUMNS,
    MUTABLE_COLUMNS,
    audit_from_row,
    erased_audit_text,
    from_row,
    to_row,
)
from .registry import (
    ENTRY_POINT_GROUP,
    backend_for,
    open_checkpointer,
    open_ledger,
    register_backend,
    registered_schemes,
    setup_database,
    unregister_backend,
)
from .steps import (
    LEDGER_TABLES,
    STEP_METHODS,
    ApplyMigration,
    AsyncStepDefaults,
    CasEach,
    CasWithAudit,
    CountMigrations,
    CreateLedger,
    Erase,
    Find,
    FindOrInsert,
    Forget,
    InsertWithAudit,
    LedgerStep,
    ListControls,
    ListDeletions,
    Load,
    Lock,
    LockControls,
    OurTables,
    RecordDeletion,
    StepDefaults,
    StepRunner,
    WriteControls,
    answer,
    answerer,
)

__all__ = [
    "COLUMNS",
    "DEFAULT_ACTOR",
    "ENTRY_POINT_GROUP",
    "LEDGER_TABLES",
    "MUTABLE_COLUMNS",
    "STEP_METHODS",
    "ApplyMigration",
    "AsyncStepDefaults",
    "AuditEntry",
    "Backend",
    "CasEach",
    "CasWithAudit",
    "ControlRow",
    "CountMigrations",
    "CreateLedger",
    "ERASE_COLUMNS",
    "Erase",
    "Forget",
    "erased_audit_text",
    "Find",
    "FindOrInsert",
    "InsertWithAudit",
    "Ledger",
    "LedgerBackend",
    "LedgerError",
    "LedgerNotFoundError",
    "LedgerUnavailableError",
    "LedgerOptions",
    "ListControls",
    "ListDeletions",
    "Load",
    "Lock",
    "LockControls",
    "OpenLedger",
    "Operation",
    "OperationQuery",
    "OurTables",
    "RecordDeletion",
    "Plan",
    "LedgerStep",
    "StepDefaults",
    "StepRunner",
    "WriteControls",
    "adrive_plan",
    "answer",
    "answerer",
    "audit_from_row",
    "backend_for",
    "drive_plan",
    "from_row",
    "listing_order",
    "may_renew",
    "open_checkpointer",
    "open_ledger",
    "register_backend",
    "registered_schemes",
    "setup_database",
    "to_row",
    "unregister_backend",
]


class LedgerBackend(AsyncStepDefaults, Ledger):
    """A ledger backend whose steps are coroutines, one transaction at a time.

    Write the step methods (each receives its step and returns the answer the step
    documents, inside the current transaction), `begin`, `commit` and
    `rollback`, and the three queries. ``find_or_insert`` and ``cas_each``
    have defaults in terms of the others (`AsyncStepDefaults`); override them
    when the store does better in one request. Plans of one instance run one after
    the other (this class holds a lock from `begin` to the end); keeping other
    processes out of a transaction is `begin`'s job. A plan that wrote is
    committed, any other rolled back, a plan that raised too.

    `SCHEMA_VERSION` is how many migrations ``apply_migration`` knows;
    `setup` applies the missing ones through the shared migration plan.
    """

    #: How many migrations `apply_migration` knows (0-based indexes below it).
    SCHEMA_VERSION = 1

    def __init__(self) -> None:
        self._transaction_lock = asyncio.Lock()

    # -- transactions -----------------------------------------------------------------

    @abc.abstractmethod
    async def begin(self) -> None:
        """Start a transaction: from here until `commit` or `rollback`, the
        steps' reads and writes are one atomic unit no other writer interleaves with."""

    @abc.abstractmethod
    async def commit(self) -> None:
        """Make the transaction's writes durable (when this returns, they survive a crash)."""

    @abc.abstractmethod
    async def rollback(self) -> None:
        """Drop the transaction's writes, if any."""

    async def _transact(self, plan: Plan[T]) -> T:
        async with self._transaction_lock:
            await self.begin()
            try:
                result, wrote = await adrive_plan(plan, answerer(self))
            except BaseException:
                await self.rollback()
                raise
            await (self.commit() if wrote else self.rollback())
            return result

    async def setup(self) -> None:
        """Create or migrate the store (idempotent): the missing `apply_migration`s."""
        await self._transact(migrate_plan(self.SCHEMA_VERSION, self.where, "another store"))

    async def aclose(self) -> None:
        """Release what the backend holds (nothing by default)."""
        return None

    # -- the steps (answers as each step's docstring says) ------------------------------

    @abc.abstractmethod
    async def lock(self, step: Lock) -> Operation | None:
        """The row, held until the transaction ends."""

    @abc.abstractmethod
    async def load(self, step: Load) -> dict[str, Operation]:
        """The rows found among ``step.op_ids``."""

    @abc.abstractmethod
    async def find(self, step: Find) -> list[Operation]:
        """The rows by id (any thread) and by payload (``step.thread_id`` only)."""

    @abc.abstractmethod
    async def insert_with_audit(self, step: InsertWithAudit) -> list[str]:
        """The ids inserted (a row whose id or (tenant, provider_key) is taken is skipped)."""

    @abc.abstractmethod
    async def cas_with_audit(self, step: CasWithAudit) -> bool:
        """Whether the row was at ``expected_version`` (then its mutable columns and the
        audit row are written)."""

    async def forget(self, step: Forget) -> list[str]:
        """Delete the rows `Forget` names (with their audit rows and holds); the ids
        deleted. Optional: without it the ledger cannot purge, delete a thread's
        operations or erase (see docs/lifecycle.md)."""
        raise self._no_lifecycle("forget")

    async def erase(self, step: Erase) -> bool:
        """Erase one row's payload and its audit evidence (see `Erase`). Optional."""
        raise self._no_lifecycle("erase")

    async def record_deletion(self, step: RecordDeletion) -> None:
        """Keep the record of a forced thread deletion (see `RecordDeletion`). Optional:
        without it a thread with unresolved operations cannot be deleted by force."""
        raise self._no_lifecycle("record_deletion")

    async def list_deletions(self, step: ListDeletions) -> list[dict[str, Any]]:
        """The forced thread deletions recorded (see `ListDeletions`). Optional."""
        raise self._no_lifecycle("list_deletions")

    def _no_lifecycle(self, step: str) -> LedgerError:
        return LedgerError(
            f"the ledger backend at {self.where} has no {step} step: it cannot remove or erase "
            "operations (purge, a thread's deletion, erase). Add the forget and erase steps to "
            "the backend (see docs/backends.md); nothing was written."
        )

    async def lock_controls(self, step: LockControls) -> dict[tuple[str, str], ControlRow]:
        """The control rows stored under ``step.keys``, held until the transaction ends
        (budgets and circuit breakers; see `LockControls`)."""
        raise self._no_controls()

    async def write_controls(self, step: WriteControls) -> None:
        """Store each of ``step.rows`` (insert, or replace its state)."""
        raise self._no_controls()

    async def list_controls(self, step: ListControls) -> list[ControlRow]:
        """Every control row but the holds (control ``"hold"``), sorted by key."""
        raise self._no_controls()

    @property
    def stores_controls(self) -> bool:
        """Whether this backend writes the control steps (overrides `lock_controls`)."""
        return type(self).lock_controls is not LedgerBackend.lock_controls

    def _no_controls(self) -> LedgerError:
        return LedgerError(
            f"the ledger backend at {self.where} stores no budgets or circuit breakers (it has "
            "no lock_controls/write_controls/list_controls): declare none on its tools, or "
            "add those three steps to the backend (see docs/backends.md)."
        )

    @abc.abstractmethod
    async def our_tables(self, step: OurTables) -> set[str]:
        """`LEDGER_TABLES` once `create_ledger` ran, an empty set before."""

    @abc.abstractmethod
    async def count_migrations(self, step: CountMigrations) -> int:
        """How many migrations are recorded as applied."""

    @abc.abstractmethod
    async def create_ledger(self, step: CreateLedger) -> None:
        """Create the empty record of applied migrations."""

    @abc.abstractmethod
    async def apply_migration(self, step: ApplyMigration) -> None:
        """Apply migration ``step.index`` and record it."""
