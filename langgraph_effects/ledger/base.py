"""The ledger protocol, written once over a few storage primitives (codec: `codec`).

Backends only store. Every write is a *plan* (a generator, in the style of a
sans-IO protocol) that yields `LedgerStep` requests (`steps`): lock a row,
load rows, insert-if-absent, compare-and-set, append audit rows. A backend runs a
plan inside one transaction of its own (`Ledger._transact`) by answering each
step with its method of the same name (one table dispatches, `steps.answer`;
the public kit for new backends is `kit`); the rules (the pure
`advance`, who may renew a lease, how migrations
are ordered) live here, once. Unresolved operations
are never expired or deleted by time: only `Forget` deletes, and only the
states its caller names (see `lifecycle`). Writes that arrive while
another is in flight share the next transaction (`group_commit`).
"""

from __future__ import annotations

import abc
import dataclasses
import sys
import time
from collections.abc import Awaitable, Callable, Collection, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from ..core.controls import ControlRow
from ..core.operation import TERMINAL, Change, Operation, State, advance, create
from ..errors import (
    LedgerCorruptError,
    LedgerError,
    OperationNotFoundError,
    SchemaTooNewError,
    StaleVersionError,
)
from .codec import COLUMNS as COLUMNS
from .codec import MUTABLE_COLUMNS as MUTABLE_COLUMNS
from .codec import AuditEntry as AuditEntry
from .codec import audit_from_row as audit_from_row
from .codec import audit_row as audit_row
from .codec import from_row as from_row
from .codec import to_row as to_row
from .group_commit import GroupCommit, PlanResult
from .lifecycle import deletions_plan, erase_plan, forget_plan
from .query import Cursor as Cursor
from .query import OperationCount as OperationCount
from .query import OperationQuery as OperationQuery
from .query import cursor as cursor
from .steps import ALONE as ALONE
from .steps import LEDGER_TABLES as LEDGER_TABLES
from .steps import ApplyMigration as ApplyMigration
from .steps import CasEach as CasEach
from .steps import CasWithAudit as CasWithAudit
from .steps import CountMigrations as CountMigrations
from .steps import CreateLedger as CreateLedger
from .steps import Erase as Erase
from .steps import Find as Find
from .steps import FindOrInsert as FindOrInsert
from .steps import Forget as Forget
from .steps import InsertWithAudit as InsertWithAudit
from .steps import LedgerStep as LedgerStep
from .steps import ListControls as ListControls
from .steps import Load as Load
from .steps import Lock as Lock
from .steps import LockControls as LockControls
from .steps import OurTables as OurTables
from .steps import WriteControls as WriteControls

T = TypeVar("T")

DEFAULT_ACTOR = "langgraph-effects"


Plan = Generator[LedgerStep, Any, T]
"""A unit of work that a backend runs as one transaction: it yields steps and
receives their answers."""


def step_wrote(step: LedgerStep, answer: Any) -> bool:
    """Whether ``step``, answered with ``answer``, changed a row: an insert that found
    every row taken, a compare-and-set (or an erasure) that missed, or a removal that
    found nothing to remove, did not."""
    if not step.writes:
        return False
    if isinstance(step, FindOrInsert):
        return bool(answer[1])
    if isinstance(step, CasEach):
        return any(answer)
    return bool(answer) or not isinstance(step, (InsertWithAudit, CasWithAudit, Forget, Erase))


class _Run:
    """A plan being run: hands out its steps, then keeps its result.

    ``wrote`` says whether any answered step changed a row (a compare-and-set that
    missed did not): a plan that raises with ``wrote`` false has written nothing.
    """

    def __init__(self, plan: Plan[Any]) -> None:
        self.plan, self.wrote, self.result = plan, False, None
        self._step: LedgerStep | None = None

    def send(self, reply: Any) -> LedgerStep | None:
        """The next step (``reply`` answers the previous one), or ``None`` once done."""
        last = self._step
        if last is not None and step_wrote(last, reply):
            self.wrote = True
        try:
            self._step = step = self.plan.send(reply)
        except StopIteration as done:
            self.result, self._step = done.value, None
            return None
        return step


def drive_plan(plan: Plan[T], answer: Callable[[LedgerStep], Any]) -> tuple[T, bool]:
    """Run ``plan``, answering each step with ``answer``; returns (result, wrote)."""
    run = _Run(plan)
    step = run.send(None)
    while step is not None:
        step = run.send(answer(step))
    return run.result, run.wrote  # type: ignore[return-value]


async def adrive_plan(plan: Plan[T], answer: Callable[[LedgerStep], Awaitable[Any]]) -> tuple[T, bool]:
    """`drive_plan` for a backend whose answers are awaited."""
    run = _Run(plan)
    step = run.send(None)
    while step is not None:
        step = run.send(await answer(step))
    return run.result, run.wrote  # type: ignore[return-value]


@dataclass(frozen=True)
class Transition:
    """What [`Ledger.apply`][langgraph_effects.Ledger.apply] did: the stored operation, and whether this call
    changed it (``False``: a verdict already applied with the same decision id)."""

    op: Operation
    applied: bool


def record_plan(
    operations: Sequence[Operation],
    change: Change | None,
    actor: str,
) -> Plan[list[Operation]]:
    """Insert every operation not stored yet (and audit it); the stored rows, in order.

    Each new row is created with ``change`` (see `create`)."""
    insert = insert_step(operations, change, actor)
    return (yield from recorded_plan(operations, insert, (yield insert)))


def insert_step(
    operations: Sequence[Operation],
    change: Change | None,
    actor: str,
    changes: Mapping[str, Change | None] | None = None,
) -> InsertWithAudit:
    """The insert of `record_plan` (for a plan that yields it inside another step).
    A new row is created with its own entry in ``changes`` (by op id) when given, else
    with ``change``: one insert for rows created ``pending`` and rows created ``dispatched``."""
    stamp = now()
    fresh: dict[str, Operation] = {}
    made: dict[str, Change | None] = {}
    for op in operations:  # a repeated id is inserted once, like the first occurrence
        if op.op_id not in fresh:
            made[op.op_id] = changes.get(op.op_id, change) if changes is not None else change
            fresh[op.op_id] = create(op, now=stamp, change=made[op.op_id])
    # In op_id order: two workers recording overlapping batches take row locks in
    # the same order (no deadlock), and every backend keeps the same row of a
    # (tenant, provider_key) that two new operations share.
    rows = tuple(sorted(fresh.values(), key=lambda op: op.op_id))
    return InsertWithAudit(rows, tuple(audit_row(None, op, made[op.op_id], actor) for op in rows))


def recorded_plan(
    operations: Sequence[Operation], insert: InsertWithAudit, inserted: Sequence[str]
) -> Plan[list[Operation]]:
    """The stored rows of ``operations`` in order, once ``insert`` inserted ``inserted``."""
    if len(inserted) == len(insert.ops):  # all new: stored as built (read back through the codec)
        stored = {op.op_id: from_row(to_row(op)) for op in insert.ops}
    else:
        stored = yield Load(tuple(op.op_id for op in insert.ops))
    return [stored[op.op_id] for op in operations if op.op_id in stored]


def transition_plan(
    op_id: str,
    change: Change,
    expected_version: int | None,
    actor: str,
    where: str,
    decidable_only: bool = False,
    seen: Operation | None = None,
) -> Plan[Transition]:
    """Lock the row, apply the state machine, compare-and-set, audit.

    With ``seen`` (the row as the caller last read it, at ``expected_version``) the
    lock is skipped when that is safe: see `optimistic_plan`.
    """
    if seen is not None and seen.op_id == op_id and expected_version == seen.version:
        done = yield from optimistic_plan(seen, change, actor, decidable_only)
        if done is not None:
            return done
    before = yield Lock(op_id)
    if before is None:
        raise OperationNotFoundError(op_id)
    after = advance(
        before, change, expected_version=expected_version, now=now(), decidable_only=decidable_only
    )
    if after is None:
        return Transition(before, applied=False)
    if not (yield CasWithAudit(after, before.version, audit_row(before, after, change, actor))):
        raise LedgerError(  # impossible under the row lock
            f"operation {op_id} changed under a row lock at {where}; nothing was written. "
            "Read it again."
        )
    return Transition(after, applied=True)


def optimistic_plan(
    seen: Operation, change: Change, actor: str, decidable_only: bool
) -> Plan[Transition | None]:
    """Apply the state machine to ``seen`` and compare-and-set it, without a lock read.

    Every change bumps the version, so a row still at ``seen.version`` is ``seen``,
    except for the lease a heartbeat renews in place: a change that reads the lease
    (``lease_seen``) or a verdict (whose replay needs the stored decisions) is left
    to the locking path (``None``), as is any change the state machine refuses for
    ``seen``: the error must be the one the stored row gives.
    """
    if change.decision_id is not None or change.lease_seen is not None:
        return None
    try:
        after = advance(
            seen, change, expected_version=seen.version, now=now(), decidable_only=decidable_only
        )
    except Exception:
        return None
    if after is None:
        return None
    if (yield CasWithAudit(after, seen.version, audit_row(seen, after, change, actor))):
        return Transition(after, applied=True)
    stored = (yield Load((seen.op_id,))).get(seen.op_id)  # nothing was written: say why
    if stored is None:
        raise OperationNotFoundError(seen.op_id)
    raise StaleVersionError(seen.op_id, seen.version, stored.version)


def load_plan(op_ids: Sequence[str]) -> Plan[dict[str, Operation]]:
    """Read rows (no lock)."""
    return (yield Load(tuple(op_ids)))  # type: ignore[no-any-return]


def lookup_plan(
    op_ids: Sequence[str], thread_id: str, pairs: Sequence[tuple[str, str]]
) -> Plan[tuple[dict[str, Operation], list[Operation]]]:
    """The stored rows among ``op_ids``, and the rows of ``thread_id`` with any of the
    ``pairs`` in `listing_order`, in one read (see `Find`)."""
    find = find_step(op_ids, thread_id, pairs)
    return split_found(find, (yield find))


def find_step(
    op_ids: Sequence[str], thread_id: str, pairs: Sequence[tuple[str, str]], origin: str | None = None
) -> Find:
    """The read of `lookup_plan` (for a plan that yields it inside another step)."""
    return Find(tuple(sorted(set(op_ids))), thread_id, tuple(sorted(set(pairs))), origin)


def split_found(find: Find, found: Sequence[Operation]) -> tuple[dict[str, Operation], list[Operation]]:
    """`lookup_plan`'s answer from what ``find`` found."""
    wanted, payloads = set(find.op_ids), set(find.pairs)
    by_id = {op.op_id: op for op in found if op.op_id in wanted}
    matching = [
        op
        for op in found
        if op.thread_id == find.thread_id
        and (op.tool, op.args_hash) in payloads
        and find.origin in (None, op.extra.get("origin"))
    ]
    return by_id, listing_order(matching)


def version_plan() -> Plan[int | None]:
    """The schema version recorded (migrations applied), ``None`` without a ledger."""
    if "effect_migrations" not in (yield OurTables()):
        return None
    return int((yield CountMigrations()))


def migrate_plan(migrations: int, where: str, elsewhere: str) -> Plan[None]:
    """The migration runner: apply the backend's ``migrations`` (how many it has, in
    order) not yet recorded, each with `ApplyMigration`.

    ``elsewhere`` says where to put the ledger instead when foreign tables are found.
    """
    tables = yield OurTables()
    if "effect_migrations" not in tables:
        foreign = sorted(set(tables) - {"effect_migrations"})
        if foreign:
            raise LedgerCorruptError(
                f"{where} has {'/'.join(foreign)} tables that langgraph-effects did not create "
                f"(no effect_migrations table). Use {elsewhere}; nothing was changed."
            )
        yield CreateLedger()
    done = (yield from version_plan()) or 0
    if done > migrations:
        raise SchemaTooNewError(done, migrations, where)
    for index in range(done, migrations):
        yield ApplyMigration(index)


def sql_statements(migration: str) -> list[str]:
    """A SQL backend's migration text as its statements (split on ``;``)."""
    return [statement for statement in migration.split(";") if statement.strip()]


def may_renew(op: Operation | None, token: str) -> bool:
    """The lease-renewal rule: only a ``dispatched`` operation, only by its owner's token.

    The SQL backends state the same rule in `renewal_sql`.
    """
    return (
        op is not None
        and op.state is State.DISPATCHED
        and op.owner is not None
        and op.owner.token == token
    )


def renewal_sql(table: str, owner_token: str, mark: str) -> str:
    """`may_renew` as one UPDATE (lease, op_id, token), for a heartbeat's thread.

    ``owner_token`` is the backend's expression for the owner JSON's ``token``.
    """
    return (
        f"UPDATE {table} SET lease_expires_at = {mark} WHERE op_id = {mark} "
        f"AND state = '{State.DISPATCHED.value}' AND {owner_token} = {mark}"
    )


def listing_order(ops: Sequence[Operation]) -> list[Operation]:
    """Rows in the one order every listing uses: least recently updated first, then id."""
    return sorted(ops, key=lambda op: (op.updated_at, op.op_id))


class Ledger(abc.ABC):
    """Durable store of operations and their transitions. Async first."""

    #: A name for messages ("sqlite:/path", "postgres:host/db", "memory").
    where: str = "ledger"

    #: How many schema migrations this code knows (what [`setup`][langgraph_effects.Ledger.setup] brings a
    #: ledger to, and what opening an existing one checks
    #: [`schema_version`][langgraph_effects.Ledger.schema_version] against).
    SCHEMA_VERSION: ClassVar[int] = 1

    @property
    def stores_controls(self) -> bool:
        """Whether this ledger keeps budget and circuit-breaker rows (every built-in
        one does; a backend kit backend only once it writes their steps)."""
        return True

    @abc.abstractmethod
    async def setup(self) -> None:
        """Create or migrate the schema. Idempotent; call once at start-up."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release connections. The ledger cannot be used afterwards."""

    @abc.abstractmethod
    async def _transact(self, plan: Plan[T]) -> T:
        """Run ``plan`` as one transaction: committed if it wrote, else rolled back."""

    async def schema_version(self) -> int | None:
        """The schema version recorded in this ledger, without writing anything.

        ``None``: the store holds no langgraph-effects ledger. Compare with
        `SCHEMA_VERSION`.
        """
        return await self._read(version_plan())

    async def _read(self, plan: Plan[T]) -> T:
        """Run a plan that only reads (backends may skip the write transaction)."""
        return await self._transact(plan)

    async def _write(self, make: Callable[[], Plan[T]]) -> T:
        """Run the plan ``make()`` builds, group-committed with the writes that arrive
        while another is in flight (`GroupCommit`)."""
        group = self.__dict__.get("_group")
        if group is None:
            group = self.__dict__["_group"] = GroupCommit(self._transact_group)
        return await group.submit(make)  # type: ignore[no-any-return]

    async def _transact_group(self, makers: Sequence[Callable[[], Plan[Any]]]) -> list[PlanResult[Any]]:
        """Run several plans in one transaction, a result each, each as if alone.

        This default gives each its own transaction; the SQL backends override it.
        """
        results: list[PlanResult[Any]] = []
        for make in makers:
            try:
                results.append(PlanResult(value=await self._transact(make())))
            except Exception as error:
                results.append(PlanResult(error=error))
        return results

    async def transact(self, make: Callable[[], Plan[T]]) -> T:
        """Run the plan ``make()`` builds (a generator of this module's steps, e.g.
        composed of `load_plan`, `lookup_plan` and `record_plan`)
        as **one** transaction, group-committed with concurrent writes: a caller that
        must read, decide and write does all three in one transaction, one commit.
        ``make`` may be called again (a group that had to be rolled back runs each
        plan on its own), so the plan must start from scratch each time."""
        return await self._write(make)

    async def record_intents(
        self,
        operations: Sequence[Operation],
        *,
        change: Change | None = None,
        actor: str = DEFAULT_ACTOR,
    ) -> list[Operation]:
        """Insert every operation that is not stored yet, in **one** commit.

        With ``change`` (a ``dispatch`` carrying an owner and lease) new rows are
        created already ``dispatched``: intent and dispatch marker in one commit.
        Returns the stored row of each operation, in order: the new one, or the one
        that already existed (whose owner then tells the caller it did not win).
        """
        if not operations:
            return []
        return await self._write(lambda: record_plan(operations, change, actor))

    async def get_many(self, op_ids: Sequence[str]) -> dict[str, Operation]:
        """The stored operations among ``op_ids`` (missing ids are left out)."""
        if not op_ids:
            return {}
        return await self._read(load_plan(op_ids))

    async def get(self, op_id: str) -> Operation | None:
        """One operation, or ``None``."""
        return (await self.get_many([op_id])).get(op_id)

    async def apply(
        self,
        op_id: str,
        change: Change,
        *,
        expected_version: int | None,
        actor: str = DEFAULT_ACTOR,
        decidable_only: bool = False,
        before: Operation | None = None,
    ) -> Transition:
        """Compare-and-set one transition and audit it, in one commit.

        ``expected_version=None`` skips the version check (the state machine still
        applies). A verdict whose decision id was already applied with the same
        content changes nothing: ``applied`` is then ``False`` and ``op`` the stored row.
        ``decidable_only`` (an operator's verdict) refuses states outside
        `DECIDABLE` (see ``advance``).
        ``before``: the row as the caller last read it. At ``expected_version`` it
        saves the locking read (same results and errors; see `optimistic_plan`).
        """
        where = self.where
        return await self._write(
            lambda: transition_plan(
                op_id, change, expected_version, actor, where, decidable_only, before
            )
        )

    async def transition(
        self,
        op_id: str,
        change: Change,
        *,
        expected_version: int | None,
        actor: str = DEFAULT_ACTOR,
        before: Operation | None = None,
    ) -> Operation:
        """[`apply`][langgraph_effects.Ledger.apply], returning only the operation as stored afterwards."""
        result = await self.apply(
            op_id, change, expected_version=expected_version, actor=actor, before=before
        )
        return result.op

    @abc.abstractmethod
    async def renew_lease(self, op_id: str, token: str, lease_expires_at: float) -> bool:
        """Extend a live dispatch lease held by ``token`` (a heartbeat; not audited).

        Returns ``False`` if the operation is no longer dispatched under that token.
        """

    def lease_renewer(self) -> Callable[[str, str, float], bool] | None:
        """A blocking [`renew_lease`][langgraph_effects.Ledger.renew_lease] usable from any thread, or
        ``None``.

        Heartbeats call it from a thread of their own, so a tool that blocks the
        event loop does not let its lease lapse. Backends bound to one event loop
        return a function that opens its own short connection per renewal; ``None``
        means heartbeats run on the event loop instead (in-process ledgers, where no
        other process can take the lease over).
        """
        return None

    @abc.abstractmethod
    async def list_operations(self, query: OperationQuery) -> list[Operation]:
        """Operations matching ``query``, in `listing_order`."""

    async def count_operations(self, query: OperationQuery) -> list[OperationCount]:
        """How many operations match ``query`` (its ``limit`` does not apply), by state
        and tool, sorted by (state, tool), each with its least recent ``updated_at``.

        This default reads every matching row through `list_operations`; the SQL
        backends count in the database (the unresolved states alone, from their partial
        index on them; settled states, from the whole table).
        """
        groups: dict[tuple[State, str], list[float]] = {}
        for op in await self.list_operations(dataclasses.replace(query, limit=sys.maxsize)):
            groups.setdefault((op.state, op.tool), []).append(op.updated_at)
        ordered = sorted(groups.items(), key=lambda item: (item[0][0].value, item[0][1]))
        return [OperationCount(state, tool, len(stamps), min(stamps)) for (state, tool), stamps in ordered]

    @abc.abstractmethod
    async def audit(self, op_id: str) -> list[AuditEntry]:
        """The audit trail of one operation, in order."""

    async def find_by_payload(
        self, thread_id: str, payloads: Sequence[tuple[str, str]]
    ) -> list[Operation]:
        """Operations of ``thread_id`` with any of the (tool, args hash) pairs, in
        `listing_order` on every backend.

        Used to recognise a re-planned duplicate: the same call minted again with a
        new tool_call_id after its first AIMessage was lost.
        """
        if not payloads:
            return []
        _, found = await self._read(lookup_plan((), thread_id, payloads))
        return found

    async def forget_operations(
        self,
        op_ids: Sequence[str],
        *,
        states: Collection[State] = TERMINAL,
        updated_before: float | None = None,
    ) -> list[str]:
        """Delete the operations among ``op_ids`` that are in ``states`` (settled ones by
        default) and, with ``updated_before``, last changed before it, with their audit
        rows and budget holds, in **one** short transaction; the ids deleted.

        A row that moved since the caller chose it is kept. Callers pass bounded
        batches (the operator's ``purge`` and a thread's deletion do). A backend of
        the kit answers the `Forget` step for it.
        """
        if not op_ids:
            return []
        return await self._write(lambda: forget_plan(op_ids, states, updated_before))

    async def erase_operations(self, op_ids: Sequence[str], *, actor: str = DEFAULT_ACTOR) -> list[str]:
        """Erase the arguments, result and notes of the settled operations among
        ``op_ids`` (ids, states and times stay), one audit row each (event ``erase``,
        ``actor``), in **one** transaction; the ids erased (unresolved or already
        erased ones are left as they are). A backend answers the `Erase` step."""
        if not op_ids:
            return []
        return await self._write(lambda: erase_plan(op_ids, actor))

    async def deletion_rows(self, thread_id: str | None = None) -> list[dict[str, Any]]:
        """The forced thread deletions recorded (of ``thread_id``, if given), oldest
        first, without a write lock (see `deletions_plan`)."""
        return await self._read(deletions_plan(thread_id))

    async def control_rows(self) -> list[ControlRow]:
        """Every budget and circuit-breaker row (not the operations' holds), sorted by
        (control, scope): what the console shows."""
        return await self._read(_list_controls())

    async def unresolved(
        self, *, thread_id: str | None = None, tenant: str | None = None, limit: int = 1000
    ) -> list[Operation]:
        """Operations not yet ``confirmed``, ``failed`` or ``abandoned``."""
        return await self.list_operations(
            OperationQuery.unresolved(thread_id=thread_id, tenant=tenant, limit=limit)
        )

    async def __aenter__(self) -> Ledger:
        await self.setup()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _list_controls() -> Plan[list[ControlRow]]:
    return (yield ListControls())  # type: ignore[no-any-return]


def now() -> float:
    return time.time()
