"""The ledger protocol, written once over a few storage primitives, and the row codec.

Backends only store. Every write is a *plan* (a generator, in the style of a
sans-IO protocol) that yields :data:`Step` requests: lock a row, load rows,
insert-if-absent, compare-and-set, append audit rows. A backend runs a plan inside
one transaction of its own (:meth:`Ledger._transact`) by answering each step with
its SQL; the rules (the pure :func:`~langgraph_effects.operation.advance`, who may
renew a lease, how migrations are ordered) live here, once. Unresolved operations
are never expired or deleted by time: no step deletes.
"""

from __future__ import annotations

import abc
import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from ..errors import LedgerCorruptError, LedgerError, OperationNotFoundError, SchemaTooNewError
from ..operation import UNRESOLVED, Change, Operation, Owner, State, advance, create

T = TypeVar("T")

DEFAULT_ACTOR = "langgraph-effects"


@dataclass(frozen=True)
class AuditEntry:
    """One transition of one operation, as the audit table keeps it."""

    op_id: str
    seq: int
    at: float
    actor: str
    from_state: State | None
    to_state: State
    event: str
    version: int
    evidence: Mapping[str, Any] | None


@dataclass(frozen=True)
class OperationQuery:
    """A filter for :meth:`Ledger.list_operations`. Empty fields do not filter."""

    states: frozenset[State] | None = None
    thread_id: str | None = None
    tenant: str | None = None
    tool: str | None = None
    updated_before: float | None = None
    """Only operations not touched since this time (for "older than")."""
    updated_after: float | None = None
    """Only operations changed after this time (for "what changed since we last looked")."""
    limit: int = 100

    @classmethod
    def unresolved(
        cls, *, thread_id: str | None = None, tenant: str | None = None, limit: int = 1000
    ) -> OperationQuery:
        return cls(states=UNRESOLVED, thread_id=thread_id, tenant=tenant, limit=limit)


# -- the storage primitives a backend answers ----------------------------------------


@dataclass(frozen=True)
class Lock:
    """Load one row and hold it until the transaction ends; answered with the
    :class:`Operation` or ``None``."""

    op_id: str
    writes: ClassVar[bool] = False


@dataclass(frozen=True)
class Load:
    """Load rows without locking them; answered with ``{op_id: Operation}``."""

    op_ids: tuple[str, ...]
    writes: ClassVar[bool] = False


@dataclass(frozen=True)
class FindByPayload:
    """The rows of ``thread_id`` with any of the (tool, args hash) ``pairs``, in any
    order; answered with a list of :class:`Operation`."""

    thread_id: str
    pairs: tuple[tuple[str, str], ...]
    writes: ClassVar[bool] = False


@dataclass(frozen=True)
class InsertIfAbsent:
    """Insert each row unless its ``op_id`` or its ``(tenant, provider_key)`` is taken;
    answered with the ids actually inserted."""

    ops: tuple[Operation, ...]
    writes: ClassVar[bool] = True


@dataclass(frozen=True)
class CompareAndSet:
    """Write ``after``'s mutable columns if the row is still at ``expected_version``;
    answered with whether it was."""

    after: Operation
    expected_version: int
    writes: ClassVar[bool] = True


@dataclass(frozen=True)
class AppendAudit:
    """Append audit rows (values from :func:`audit_row`); answered with ``None``."""

    rows: tuple[dict[str, Any], ...]
    writes: ClassVar[bool] = True


@dataclass(frozen=True)
class OurTables:
    """Which of :data:`LEDGER_TABLES` exist; answered with a ``set`` of names."""

    writes: ClassVar[bool] = False


@dataclass(frozen=True)
class Fetch:
    """Run a query; answered with the first column of its first row (or ``None``)."""

    sql: str
    writes: ClassVar[bool] = False


@dataclass(frozen=True)
class Execute:
    """Run a statement (DDL, or an insert into the migrations table)."""

    sql: str
    params: tuple[Any, ...] = ()
    writes: ClassVar[bool] = True


Step = (
    Lock | Load | FindByPayload | InsertIfAbsent | CompareAndSet | AppendAudit | OurTables | Fetch
    | Execute
)
Plan = Generator[Step, Any, T]
"""A unit of work that a backend runs as one transaction: it yields steps and
receives their answers."""

LEDGER_TABLES: tuple[str, ...] = ("effect_operations", "effect_audit", "effect_migrations")


class _Run:
    """A plan being run: hands out its steps, then keeps its result."""

    def __init__(self, plan: Plan[Any]) -> None:
        self.plan, self.wrote, self.result = plan, False, None

    def send(self, reply: Any) -> Step | None:
        """The next step (``reply`` answers the previous one), or ``None`` once done."""
        try:
            step = self.plan.send(reply)
        except StopIteration as done:
            self.result = done.value
            return None
        self.wrote = self.wrote or step.writes
        return step


def drive(plan: Plan[T], answer: Callable[[Step], Any]) -> tuple[T, bool]:
    """Run ``plan``, answering each step with ``answer``; returns (result, wrote)."""
    run = _Run(plan)
    step = run.send(None)
    while step is not None:
        step = run.send(answer(step))
    return run.result, run.wrote  # type: ignore[return-value]


async def adrive(plan: Plan[T], answer: Callable[[Step], Awaitable[Any]]) -> tuple[T, bool]:
    """:func:`drive` for a backend whose answers are awaited."""
    run = _Run(plan)
    step = run.send(None)
    while step is not None:
        step = run.send(await answer(step))
    return run.result, run.wrote  # type: ignore[return-value]


@dataclass(frozen=True)
class Transition:
    """What :meth:`Ledger.apply` did: the stored operation, and whether this call
    changed it (``False``: a verdict already applied with the same decision id)."""

    op: Operation
    applied: bool


def record_plan(
    operations: Sequence[Operation], change: Change | None, actor: str
) -> Plan[list[Operation]]:
    """Insert every operation not stored yet (and audit it); the stored rows, in order."""
    stamp = now()
    fresh: dict[str, Operation] = {}
    for op in operations:  # a repeated id is inserted once, like the first occurrence
        if op.op_id not in fresh:
            fresh[op.op_id] = create(op, now=stamp, change=change)
    # In op_id order: two workers recording overlapping batches take row locks in
    # the same order (no deadlock), and every backend keeps the same row of a
    # (tenant, provider_key) that two new operations share.
    rows = tuple(sorted(fresh.values(), key=lambda op: op.op_id))
    inserted = yield InsertIfAbsent(rows)
    if inserted:
        yield AppendAudit(tuple(audit_row(None, fresh[i], change, actor) for i in inserted))
    stored = yield Load(tuple(fresh))
    return [stored[op.op_id] for op in operations if op.op_id in stored]


def transition_plan(
    op_id: str,
    change: Change,
    expected_version: int | None,
    actor: str,
    where: str,
    decidable_only: bool = False,
) -> Plan[Transition]:
    """Lock the row, apply the state machine, compare-and-set, audit."""
    before = yield Lock(op_id)
    if before is None:
        raise OperationNotFoundError(op_id)
    after = advance(
        before, change, expected_version=expected_version, now=now(), decidable_only=decidable_only
    )
    if after is None:
        return Transition(before, applied=False)
    if not (yield CompareAndSet(after, before.version)):  # impossible under the row lock
        raise LedgerError(
            f"operation {op_id} changed under a row lock at {where}; nothing was written. "
            "Read it again."
        )
    yield AppendAudit((audit_row(before, after, change, actor),))
    return Transition(after, applied=True)


def load_plan(op_ids: Sequence[str]) -> Plan[dict[str, Operation]]:
    """Read rows (no lock)."""
    return (yield Load(tuple(op_ids)))  # type: ignore[no-any-return]


def payload_plan(thread_id: str, pairs: Sequence[tuple[str, str]]) -> Plan[list[Operation]]:
    """Rows of ``thread_id`` with any of the (tool, args hash) ``pairs``, in
    :func:`listing_order` (no lock)."""
    found = yield FindByPayload(thread_id, tuple(sorted(set(pairs))))
    return listing_order(found)


def version_plan(migrations_table: str) -> Plan[int | None]:
    """The schema version recorded (migrations applied), ``None`` without a ledger."""
    if "effect_migrations" not in (yield OurTables()):
        return None
    latest = yield Fetch(f"SELECT MAX(v) FROM {migrations_table}")
    return int(latest) + 1 if latest is not None else 0


def migrate_plan(
    migrations: Sequence[str], migrations_table: str, ddl: str, mark: str, where: str, elsewhere: str
) -> Plan[None]:
    """The migration runner: apply the ordered ``migrations`` not yet recorded.

    ``ddl`` creates the version table; ``mark`` is the driver's placeholder;
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
        yield Execute(ddl)
    done = (yield from version_plan(migrations_table)) or 0
    if done > len(migrations):
        raise SchemaTooNewError(done, len(migrations), where)
    for v in range(done, len(migrations)):
        for statement in migrations[v].split(";"):
            if statement.strip():
                yield Execute(statement)
        yield Execute(
            f"INSERT INTO {migrations_table} (v, applied_at) VALUES ({mark}, {mark})", (v, now())
        )


def may_renew(op: Operation | None, token: str) -> bool:
    """The lease-renewal rule: only a ``dispatched`` operation, only by its owner's token.

    The SQL backends state the same rule in :func:`renewal_sql`.
    """
    return (
        op is not None
        and op.state is State.DISPATCHED
        and op.owner is not None
        and op.owner.token == token
    )


def renewal_sql(table: str, owner_token: str, mark: str) -> str:
    """:func:`may_renew` as one UPDATE (lease, op_id, token), for a heartbeat's thread.

    ``owner_token`` is the backend's expression for the owner JSON's ``token``.
    """
    return (
        f"UPDATE {table} SET lease_expires_at = {mark} WHERE op_id = {mark} "
        f"AND state = '{State.DISPATCHED.value}' AND {owner_token} = {mark}"
    )


def listing_order(ops: Sequence[Operation]) -> list[Operation]:
    """Rows in the one order every listing uses: least recently updated first, then id."""
    return sorted(ops, key=lambda op: (op.updated_at, op.op_id))


@dataclass(frozen=True)
class Settled:
    """What one plan of a group transaction gave: its result, or its own error."""

    value: Any = None
    error: BaseException | None = None


@dataclass(eq=False)
class _Group:
    """The write plans waiting for the next group commit (one per event loop)."""

    queue: list[tuple[Plan[Any], asyncio.Future[Any]]] = field(default_factory=list)
    flushing: bool = False


class Ledger(abc.ABC):
    """Durable store of operations and their transitions. Async first.

    Writes are group-committed (:meth:`_write`); a backend runs one plan as one
    transaction (:meth:`_transact`) and may run several in one
    (:meth:`_transact_many`).
    """

    #: Pending group commits by event loop (set on first write; backends need not
    #: call an ``__init__`` here).
    _group_of: dict[asyncio.AbstractEventLoop, _Group] | None = None

    @property
    def _groups(self) -> dict[asyncio.AbstractEventLoop, _Group]:
        if self._group_of is None:
            self._group_of = {}
        return self._group_of

    #: A name for messages ("sqlite:/path", "postgres:host/db", "memory").
    where: str = "ledger"

    @abc.abstractmethod
    async def setup(self) -> None:
        """Create or migrate the schema. Idempotent; call once at start-up."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release connections. The ledger cannot be used afterwards."""

    @abc.abstractmethod
    async def _transact(self, plan: Plan[T]) -> T:
        """Run ``plan`` as one transaction: committed if it wrote, else rolled back."""

    async def _read(self, plan: Plan[T]) -> T:
        """Run a plan that only reads (backends may skip the write transaction)."""
        return await self._transact(plan)

    async def _transact_many(self, plans: Sequence[Plan[Any]]) -> list[Settled]:
        """Run ``plans`` in **one** transaction, each isolated from the others' failure
        (a savepoint each): a plan that raises leaves nothing written and its error
        is its own; the rest commit together. An error of the transaction itself
        (its commit) is every plan's. Default: one transaction each."""
        settled: list[Settled] = []
        for plan in plans:
            try:
                settled.append(Settled(await self._transact(plan)))
            except Exception as error:
                settled.append(Settled(error=error))
        return settled

    async def _write(self, plan: Plan[T]) -> T:
        """Run ``plan`` as a write transaction, group-committed: plans that arrive
        while a commit is in flight (or in the same event-loop turn as the first)
        share the next transaction. Nobody's await returns before its commit did."""
        loop = asyncio.get_running_loop()
        group = self._groups.get(loop)
        if group is None:
            group = self._groups[loop] = _Group()
        done: asyncio.Future[Any] = loop.create_future()
        group.queue.append((plan, done))
        if not group.flushing:
            group.flushing = True
            # Started on the next turn: calls released together (parallel tool
            # tasks, outcomes arriving at once) join the very first commit.
            loop.call_soon(lambda: asyncio.ensure_future(self._flush(loop, group)))
        return await asyncio.shield(done)

    async def _flush(self, loop: asyncio.AbstractEventLoop, group: _Group) -> None:
        try:
            while group.queue:
                batch, group.queue = group.queue, []
                try:
                    if len(batch) == 1:
                        settled = [Settled(await self._transact(batch[0][0]))]
                    else:
                        settled = await self._transact_many([plan for plan, _ in batch])
                except BaseException as error:  # the transaction itself: everyone's
                    settled = [Settled(error=error)] * len(batch)
                for (_, done), outcome in zip(batch, settled, strict=True):
                    if done.done():
                        continue
                    if outcome.error is not None:
                        done.set_exception(outcome.error)
                    else:
                        done.set_result(outcome.value)
        finally:
            group.flushing = False
            if not group.queue:
                self._groups.pop(loop, None)

    async def transact(self, plan: Plan[T]) -> T:
        """Run ``plan`` (a generator of this module's steps, e.g. composed of
        :func:`load_plan`, :func:`payload_plan` and :func:`record_plan`) as **one**
        transaction: committed if any step wrote, else rolled back. One round trip
        to the database's connection where the backend can manage it, so a caller
        that needs to read, decide and write pays for one transaction, not three.
        Group-committed with concurrent writes (see :meth:`_write`)."""
        return await self._write(plan)

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
        return await self._write(record_plan(operations, change, actor))

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
    ) -> Transition:
        """Compare-and-set one transition and audit it, in one commit.

        ``expected_version=None`` skips the version check (the state machine still
        applies). A verdict whose decision id was already applied with the same
        content changes nothing: ``applied`` is then ``False`` and ``op`` the stored row.
        ``decidable_only`` (an operator's verdict) refuses states outside
        :data:`~langgraph_effects.operation.DECIDABLE` (see ``advance``).
        """
        plan = transition_plan(op_id, change, expected_version, actor, self.where, decidable_only)
        return await self._write(plan)

    async def transition(
        self,
        op_id: str,
        change: Change,
        *,
        expected_version: int | None,
        actor: str = DEFAULT_ACTOR,
    ) -> Operation:
        """:meth:`apply`, returning only the operation as stored afterwards."""
        result = await self.apply(op_id, change, expected_version=expected_version, actor=actor)
        return result.op

    @abc.abstractmethod
    async def renew_lease(self, op_id: str, token: str, lease_expires_at: float) -> bool:
        """Extend a live dispatch lease held by ``token`` (a heartbeat; not audited).

        Returns ``False`` if the operation is no longer dispatched under that token.
        """

    def lease_renewer(self) -> Callable[[str, str, float], bool] | None:
        """A blocking :meth:`renew_lease` usable from any thread, or ``None``.

        Heartbeats call it from a thread of their own, so a tool that blocks the
        event loop does not let its lease lapse. Backends bound to one event loop
        return a function that opens its own short connection per renewal; ``None``
        means heartbeats run on the event loop instead (in-process ledgers, where no
        other process can take the lease over).
        """
        return None

    @abc.abstractmethod
    async def list_operations(self, query: OperationQuery) -> list[Operation]:
        """Operations matching ``query``, in :func:`listing_order`."""

    @abc.abstractmethod
    async def audit(self, op_id: str) -> list[AuditEntry]:
        """The audit trail of one operation, in order."""

    async def find_by_payload(
        self, thread_id: str, payloads: Sequence[tuple[str, str]]
    ) -> list[Operation]:
        """Operations of ``thread_id`` with any of the (tool, args hash) pairs, in
        :func:`listing_order` on every backend.

        Used to recognise a re-planned duplicate: the same call minted again with a
        new tool_call_id after its first AIMessage was lost.
        """
        if not payloads:
            return []
        return await self._read(payload_plan(thread_id, payloads))

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


def now() -> float:
    return time.time()


# -- the row codec shared by the SQL backends ------------------------------------

COLUMNS: tuple[str, ...] = (
    "op_id",
    "thread_id",
    "checkpoint_ns",
    "tenant",
    "tool",
    "tool_call_id",
    "message_id",
    "task_id",
    "checkpoint_id",
    "args",
    "args_hash",
    "provider_key",
    "contract",
    "policy_version",
    "state",
    "version",
    "attempts",
    "owner",
    "lease_expires_at",
    "dispatched_at",
    "result_type",
    "result",
    "evidence",
    "decisions",
    "extra",
    "created_at",
    "updated_at",
)

#: Columns written once, when the intent is recorded: the call's identity and payload.
_FIXED_COLUMNS = frozenset(COLUMNS[: COLUMNS.index("state")]) | {"extra", "created_at"}
#: The columns a transition may change (in table order).
MUTABLE_COLUMNS: tuple[str, ...] = tuple(c for c in COLUMNS if c not in _FIXED_COLUMNS)


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, default=str)


def to_row(op: Operation) -> dict[str, Any]:
    """An operation as column values (JSON as text, result as bytes)."""
    return {
        "op_id": op.op_id,
        "thread_id": op.thread_id,
        "checkpoint_ns": op.checkpoint_ns,
        "tenant": op.tenant,
        "tool": op.tool,
        "tool_call_id": op.tool_call_id,
        "message_id": op.message_id,
        "task_id": op.task_id,
        "checkpoint_id": op.checkpoint_id,
        "args": _dumps(dict(op.args)),
        "args_hash": op.args_hash,
        "provider_key": op.provider_key,
        "contract": op.contract,
        "policy_version": op.policy_version,
        "state": op.state.value,
        "version": op.version,
        "attempts": op.attempts,
        "owner": _dumps(op.owner.to_json()) if op.owner else None,
        "lease_expires_at": op.lease_expires_at,
        "dispatched_at": op.dispatched_at,
        "result_type": op.result_type,
        "result": op.result,
        "evidence": _dumps(dict(op.evidence)) if op.evidence is not None else None,
        "decisions": _dumps([list(d) for d in op.decisions]),
        "extra": _dumps(dict(op.extra)),
        "created_at": op.created_at,
        "updated_at": op.updated_at,
    }


def _loads(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, str | bytes | bytearray):
        return json.loads(value)
    return value  # already decoded (Postgres jsonb)


def from_row(row: Mapping[str, Any]) -> Operation:
    """The inverse of :func:`to_row`."""
    owner = _loads(row["owner"])
    result = row["result"]
    return Operation(
        op_id=row["op_id"],
        thread_id=row["thread_id"],
        checkpoint_ns=row["checkpoint_ns"],
        tenant=row["tenant"],
        tool=row["tool"],
        tool_call_id=row["tool_call_id"],
        message_id=row["message_id"],
        task_id=row["task_id"],
        checkpoint_id=row["checkpoint_id"],
        args=_loads(row["args"]) or {},
        args_hash=row["args_hash"],
        provider_key=row["provider_key"],
        contract=row["contract"],
        policy_version=row["policy_version"],
        state=State(row["state"]),
        version=int(row["version"]),
        attempts=int(row["attempts"]),
        owner=Owner.from_json(owner) if owner else None,
        lease_expires_at=row["lease_expires_at"],
        dispatched_at=row["dispatched_at"],
        result_type=row["result_type"],
        result=bytes(result) if result is not None else None,
        evidence=_loads(row["evidence"]),
        decisions=tuple((str(a), str(b)) for a, b in (_loads(row["decisions"]) or [])),
        extra=_loads(row["extra"]) or {},
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
    )


def audit_row(
    before: Operation | None, after: Operation, change: Change | None, actor: str
) -> dict[str, Any]:
    """The audit-table values for one transition, or for creation (``before=None``).

    The evidence is the step's own (``change.evidence``), not whatever the operation
    carried from an earlier step; ``seq`` is the version the step produced.
    """
    event = change.event.value if change is not None and before is not None else "intent"
    evidence = change.evidence if change is not None else after.evidence
    return {
        "op_id": after.op_id,
        "seq": after.version,
        "at": after.updated_at,
        "actor": actor,
        "from_state": before.state.value if before else None,
        "to_state": after.state.value,
        "event": event,
        "version": after.version,
        "evidence": _dumps(dict(evidence)) if evidence is not None else None,
    }


def audit_from_row(row: Mapping[str, Any]) -> AuditEntry:
    return AuditEntry(
        op_id=row["op_id"],
        seq=int(row["seq"]),
        at=float(row["at"]),
        actor=row["actor"],
        from_state=State(row["from_state"]) if row["from_state"] else None,
        to_state=State(row["to_state"]),
        event=row["event"],
        version=int(row["version"]),
        evidence=_loads(row["evidence"]),
    )


def unresolved_values() -> list[str]:
    """The unresolved states' names, in a fixed order (for SQL ``IN`` lists)."""
    return sorted(s.value for s in UNRESOLVED)



#: The unresolved states as a SQL list literal: a query spelled with it matches the
#: partial indexes both SQL backends create on it.
UNRESOLVED_SQL = ", ".join(f"'{s}'" for s in unresolved_values())


def where_clause(query: OperationQuery, mark: str) -> tuple[str, list[Any]]:
    """``query``'s filters as a SQL ``WHERE`` (or ``""``) and its parameters."""
    clauses: list[str] = []
    params: list[Any] = []
    if query.states is not None:
        values = sorted(s.value for s in query.states)
        if values == unresolved_values():
            clauses.append(f"state IN ({UNRESOLVED_SQL})")
        else:
            clauses.append(f"state IN ({', '.join([mark] * len(values))})")
            params.extend(values)
    for column in ("thread_id", "tenant", "tool"):
        value = getattr(query, column)
        if value is not None:
            clauses.append(f"{column} = {mark}")
            params.append(value)
    if query.updated_before is not None:
        clauses.append(f"updated_at < {mark}")
        params.append(query.updated_before)
    if query.updated_after is not None:
        clauses.append(f"updated_at > {mark}")
        params.append(query.updated_after)
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", params
