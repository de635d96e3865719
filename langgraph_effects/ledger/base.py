"""The ledger protocol every backend implements, and the row codec they share.

Backends only store. Each transition is one transaction that loads the row,
calls :func:`langgraph_effects.operation.advance` (pure), writes the result under
a compare-and-set on the version, and appends an audit row. Unresolved
operations are never expired or deleted by time: no method here deletes.
"""

from __future__ import annotations

import abc
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..operation import UNRESOLVED, Change, Operation, Owner, State

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


class Ledger(abc.ABC):
    """Durable store of operations and their transitions. Async first."""

    #: A name for messages ("sqlite:/path", "postgres:host/db", "memory").
    where: str = "ledger"

    @abc.abstractmethod
    async def setup(self) -> None:
        """Create or migrate the schema. Idempotent; call once at start-up."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release connections. The ledger cannot be used afterwards."""

    @abc.abstractmethod
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

    @abc.abstractmethod
    async def get_many(self, op_ids: Sequence[str]) -> dict[str, Operation]:
        """The stored operations among ``op_ids`` (missing ids are left out)."""

    async def get(self, op_id: str) -> Operation | None:
        """One operation, or ``None``."""
        return (await self.get_many([op_id])).get(op_id)

    @abc.abstractmethod
    async def transition(
        self,
        op_id: str,
        change: Change,
        *,
        expected_version: int | None,
        actor: str = DEFAULT_ACTOR,
    ) -> Operation:
        """Compare-and-set one transition and audit it, in one commit.

        ``expected_version=None`` skips the version check (the state machine still
        applies). A verdict whose decision id was already applied with the same
        content changes nothing and returns the stored operation.
        """

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
        """Operations matching ``query``, oldest update first."""

    @abc.abstractmethod
    async def audit(self, op_id: str) -> list[AuditEntry]:
        """The audit trail of one operation, in order."""

    @abc.abstractmethod
    async def find_by_payload(
        self, thread_id: str, payloads: Sequence[tuple[str, str]]
    ) -> list[Operation]:
        """Operations of ``thread_id`` with any of the (tool, args hash) pairs.

        Used to recognise a re-planned duplicate: the same call minted again with a
        new tool_call_id after its first AIMessage was lost.
        """

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

MUTABLE_COLUMNS: tuple[str, ...] = (
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
    "updated_at",
)


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

