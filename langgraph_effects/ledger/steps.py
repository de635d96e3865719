"""The storage steps a ledger plan asks, and the one table that sends each to its method.

A plan (`Plan`) yields these requests; a backend answers each with one
method of the same name in snake case (`StepRunner`). `answer` is the
only dispatch: it looks the step's type up in `STEP_METHODS`, so a backend
never tests step types itself. No step carries SQL: the schema steps name what to
do (count, create, apply migration *n*), and each backend says how.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, Protocol

from ..core.controls import ControlRow
from ..core.operation import Operation

#: The tables of a SQL ledger (what `OurTables` is answered with once set up).
LEDGER_TABLES: tuple[str, ...] = (
    "effect_operations", "effect_audit", "effect_controls", "effect_migrations", "effect_deletions"
)


@dataclass(frozen=True)
class Lock:
    """Load one row and hold it until the transaction ends; answered with the
    [`Operation`][langgraph_effects.Operation] or ``None``."""

    op_id: str
    writes: ClassVar[bool] = False


@dataclass(frozen=True)
class Load:
    """Load rows without locking them; answered with ``{op_id: Operation}``."""

    op_ids: tuple[str, ...]
    writes: ClassVar[bool] = False


@dataclass(frozen=True)
class Find:
    """The rows with any of ``op_ids``, and the rows of ``thread_id`` with any of the
    (tool, args hash) ``pairs`` (with ``origin``: only those whose ``extra`` records
    that origin): one query for both (no lock); answered with a list of
    [`Operation`][langgraph_effects.Operation] (each row once, in any order)."""

    op_ids: tuple[str, ...]
    thread_id: str
    pairs: tuple[tuple[str, str], ...]
    origin: str | None = None
    writes: ClassVar[bool] = False


@dataclass(frozen=True)
class InsertWithAudit:
    """Insert each row unless its ``op_id`` or its ``(tenant, provider_key)`` is taken,
    and the audit row (``audit[i]`` for ``ops[i]``) of each row actually inserted;
    answered with the ids inserted. Atomic on its own."""

    ops: tuple[Operation, ...]
    audit: tuple[dict[str, Any], ...]
    writes: ClassVar[bool] = True


@dataclass(frozen=True)
class FindOrInsert:
    """`Find`, and `InsertWithAudit` only if it found nothing, atomic on
    its own: calls never stored before are opened by this one step. Answered with
    (rows found, ids inserted); nothing is inserted when any row is found."""

    find: Find
    insert: InsertWithAudit
    writes: ClassVar[bool] = True


@dataclass(frozen=True)
class CasWithAudit:
    """Write ``after``'s mutable columns (`MUTABLE_COLUMNS`: never its
    identity or payload) if the row is still at ``expected_version``, and append
    ``audit`` only if it was; answered with whether it was. Atomic on its own."""

    after: Operation
    expected_version: int
    audit: dict[str, Any]
    writes: ClassVar[bool] = True


@dataclass(frozen=True)
class CasEach:
    """Several `CasWithAudit` on distinct operations, as one step (for a plan that
    moves several rows at once); answered with whether each was written, in order.
    Each is atomic on its own, as alone."""

    items: tuple[CasWithAudit, ...]
    writes: ClassVar[bool] = True


@dataclass(frozen=True)
class Forget:
    """Delete the rows among ``op_ids`` whose state is one of ``states`` (and, with
    ``updated_before``, last changed before it), with their audit rows and their budget
    holds (control ``"hold"``, scope the op id); answered with the ids deleted. A row
    that moved since the caller chose it (another state, a later change) is kept.
    Atomic on its own."""

    op_ids: tuple[str, ...]
    states: tuple[str, ...]
    updated_before: float | None = None
    writes: ClassVar[bool] = True


@dataclass(frozen=True)
class Erase:
    """Write ``after``'s mutable columns and its ``args`` and ``extra`` (what an erasure
    replaces) if the row is still at ``expected_version``; if it was, replace the
    evidence of each of its earlier audit rows by `erased_evidence` of it, then append
    ``audit``. Answered with whether it was written. Atomic on its own."""

    after: Operation
    expected_version: int
    audit: dict[str, Any]
    writes: ClassVar[bool] = True


@dataclass(frozen=True)
class RecordDeletion:
    """Append ``row`` to the record of forced thread deletions (``effect_deletions``:
    ``thread_id``, ``at``, ``actor``, ``operations``, the JSON text of what was
    unresolved); answered with ``None``."""

    row: dict[str, Any]
    writes: ClassVar[bool] = True


@dataclass(frozen=True)
class ListDeletions:
    """The forced thread deletions recorded (of ``thread_id``, as stored, if given),
    oldest first; answered with a list of dicts with the columns of `RecordDeletion`,
    as stored."""

    thread_id: str | None = None
    writes: ClassVar[bool] = False


@dataclass(frozen=True)
class LockControls:
    """Load the control rows (`ControlRow`) with
    these (control, scope) ``keys``, given in sorted order, and hold them until the
    transaction ends; a key with no row yet is held too (a SQL backend inserts an
    empty row first), so two transactions charging the same new budget queue instead
    of both starting from zero. Answered with ``{key: ControlRow}`` (a key may be
    missing: no row)."""

    keys: tuple[tuple[str, str], ...]
    writes: ClassVar[bool] = True


@dataclass(frozen=True)
class WriteControls:
    """Store each control row (insert, or replace its ``state`` and ``updated_at``);
    answered with ``None``."""

    rows: tuple[ControlRow, ...]
    writes: ClassVar[bool] = True


@dataclass(frozen=True)
class ListControls:
    """Every control row but the operations' holds (control ``"hold"``), without a
    lock; answered with a list of ``ControlRow``, sorted by (control, scope)."""

    writes: ClassVar[bool] = False


@dataclass(frozen=True)
class OurTables:
    """Which of `LEDGER_TABLES` exist; answered with a ``set`` of names. A
    backend without tables answers all of them once `CreateLedger` ran, none before."""

    writes: ClassVar[bool] = False


@dataclass(frozen=True)
class CountMigrations:
    """How many of the backend's schema migrations are recorded as applied (an
    ``int``, 0 for none); asked only once ``effect_migrations`` exists."""

    writes: ClassVar[bool] = False


@dataclass(frozen=True)
class CreateLedger:
    """Create the (empty) record of applied migrations: ``effect_migrations``."""

    writes: ClassVar[bool] = True


@dataclass(frozen=True)
class ApplyMigration:
    """Apply the backend's own migration number ``index`` (0-based) and record it as
    applied, in the plan's transaction."""

    index: int
    writes: ClassVar[bool] = True


LedgerStep = (
    Lock
    | Load
    | Find
    | InsertWithAudit
    | FindOrInsert
    | CasWithAudit
    | CasEach
    | Forget
    | Erase
    | RecordDeletion
    | ListDeletions
    | LockControls
    | WriteControls
    | ListControls
    | OurTables
    | CountMigrations
    | CreateLedger
    | ApplyMigration
)

#: Steps that are a whole transaction by themselves: a backend may run one in
#: autocommit when it is the only write of a plan running alone.
ALONE: tuple[type, ...] = (InsertWithAudit, FindOrInsert, CasWithAudit)

#: The one dispatch table: each step type, and the `StepRunner` method answering it.
STEP_METHODS: dict[type, str] = {
    Lock: "lock",
    Load: "load",
    Find: "find",
    InsertWithAudit: "insert_with_audit",
    FindOrInsert: "find_or_insert",
    CasWithAudit: "cas_with_audit",
    CasEach: "cas_each",
    Forget: "forget",
    Erase: "erase",
    RecordDeletion: "record_deletion",
    ListDeletions: "list_deletions",
    LockControls: "lock_controls",
    WriteControls: "write_controls",
    ListControls: "list_controls",
    OurTables: "our_tables",
    CountMigrations: "count_migrations",
    CreateLedger: "create_ledger",
    ApplyMigration: "apply_migration",
}


class StepRunner(Protocol):
    """What a backend implements: one method per step, answering it inside the
    transaction the plan runs in. The methods may be coroutines (a backend whose
    plans run with `adrive_plan`); the answers are those the steps document.

    `StepDefaults` gives `find_or_insert` and `cas_each` in terms
    of the others, for a backend that has nothing faster.
    """

    def lock(self, step: Lock) -> Any: ...
    def load(self, step: Load) -> Any: ...
    def find(self, step: Find) -> Any: ...
    def insert_with_audit(self, step: InsertWithAudit) -> Any: ...
    def find_or_insert(self, step: FindOrInsert) -> Any: ...
    def cas_with_audit(self, step: CasWithAudit) -> Any: ...
    def cas_each(self, step: CasEach) -> Any: ...
    def forget(self, step: Forget) -> Any: ...
    def erase(self, step: Erase) -> Any: ...
    def record_deletion(self, step: RecordDeletion) -> Any: ...
    def list_deletions(self, step: ListDeletions) -> Any: ...
    def lock_controls(self, step: LockControls) -> Any: ...
    def write_controls(self, step: WriteControls) -> Any: ...
    def list_controls(self, step: ListControls) -> Any: ...
    def our_tables(self, step: OurTables) -> Any: ...
    def count_migrations(self, step: CountMigrations) -> Any: ...
    def create_ledger(self, step: CreateLedger) -> Any: ...
    def apply_migration(self, step: ApplyMigration) -> Any: ...


def answer(runner: Any, step: Any) -> Any:
    """``step`` answered by ``runner``'s method for it (see `STEP_METHODS`); a
    coroutine when that method is one."""
    try:
        name = STEP_METHODS[type(step)]
    except KeyError:
        raise TypeError(
            f"{step!r} is not a ledger step (known: {', '.join(t.__name__ for t in STEP_METHODS)}); "
            "a plan may only yield the steps of langgraph_effects.ledger.steps."
        ) from None
    return getattr(runner, name)(step)


def answerer(runner: Any) -> Callable[[Any], Any]:
    """``answer`` bound to ``runner``: what `drive_plan` and
    `adrive_plan` take."""
    return partial(answer, runner)


class StepDefaults:
    """`find_or_insert` and `cas_each` from a synchronous backend's other
    methods (inside the one transaction the plan runs in)."""

    def find_or_insert(self, step: FindOrInsert) -> tuple[list[Operation], list[str]]:
        found: list[Operation] = answer(self, step.find)
        return found, ([] if found else answer(self, step.insert))

    def cas_each(self, step: CasEach) -> list[bool]:
        return [bool(answer(self, item)) for item in step.items]


class AsyncStepDefaults:
    """`StepDefaults` for a backend whose step methods are coroutines."""

    async def find_or_insert(self, step: FindOrInsert) -> tuple[list[Operation], list[str]]:
        found: list[Operation] = await answer(self, step.find)
        return found, ([] if found else await answer(self, step.insert))

    async def cas_each(self, step: CasEach) -> list[bool]:
        return [bool(await answer(self, item)) for item in step.items]
