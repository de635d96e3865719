"""An in-memory ledger for tests and notebooks. It survives nothing: never for production."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

from ..errors import OperationNotFoundError
from ..operation import Change, Operation, advance, create
from .base import DEFAULT_ACTOR, AuditEntry, Ledger, OperationQuery, audit_from_row, audit_row, now


class InMemoryLedger(Ledger):
    """The ledger protocol on dictionaries, with the same semantics as the durable ones."""

    where = "memory"

    def __init__(self) -> None:
        self._ops: dict[str, Operation] = {}
        self._audit: dict[str, list[AuditEntry]] = {}
        self._keys: set[tuple[str, str]] = set()
        self._lock = asyncio.Lock()
        #: Transactions that would be durable commits in a real backend.
        self.commits = 0

    async def setup(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    def _append_audit(
        self, before: Operation | None, after: Operation, change: Change | None, actor: str
    ) -> None:
        row = audit_row(before, after, change, actor)
        self._audit.setdefault(after.op_id, []).append(audit_from_row(row))

    async def record_intents(
        self,
        operations: Sequence[Operation],
        *,
        change: Change | None = None,
        actor: str = DEFAULT_ACTOR,
    ) -> list[Operation]:
        async with self._lock:
            stamp = now()
            out = []
            for op in operations:
                stored = self._ops.get(op.op_id)
                if stored is None:
                    if (op.tenant, op.provider_key) in self._keys:
                        continue  # UNIQUE (tenant, provider_key), as in the SQL backends
                    stored = create(op, now=stamp, change=change)
                    self._ops[op.op_id] = stored
                    self._keys.add((op.tenant, op.provider_key))
                    self._append_audit(None, stored, change, actor)
                out.append(stored)
            self.commits += 1
            return out

    async def get_many(self, op_ids: Sequence[str]) -> dict[str, Operation]:
        return {i: self._ops[i] for i in op_ids if i in self._ops}

    async def transition(
        self,
        op_id: str,
        change: Change,
        *,
        expected_version: int | None,
        actor: str = DEFAULT_ACTOR,
    ) -> Operation:
        async with self._lock:
            before = self._ops.get(op_id)
            if before is None:
                raise OperationNotFoundError(op_id)
            after = advance(before, change, expected_version=expected_version, now=now())
            if after is None:
                return before
            self._ops[op_id] = after
            self._append_audit(before, after, change, actor)
            self.commits += 1
            return after

    async def renew_lease(self, op_id: str, token: str, lease_expires_at: float) -> bool:
        async with self._lock:
            op = self._ops.get(op_id)
            if op is None or not op.lease_live(0) or op.owner is None or op.owner.token != token:
                return False
            self._ops[op_id] = dataclasses.replace(op, lease_expires_at=lease_expires_at)
            return True

    async def list_operations(self, query: OperationQuery) -> list[Operation]:
        ops = [
            op
            for op in self._ops.values()
            if (query.states is None or op.state in query.states)
            and (query.thread_id is None or op.thread_id == query.thread_id)
            and (query.tenant is None or op.tenant == query.tenant)
            and (query.tool is None or op.tool == query.tool)
            and (query.updated_before is None or op.updated_at < query.updated_before)
            and (query.updated_after is None or op.updated_at > query.updated_after)
        ]
        ops.sort(key=lambda o: (o.updated_at, o.op_id))
        return ops[: query.limit]

    async def audit(self, op_id: str) -> list[AuditEntry]:
        return list(self._audit.get(op_id, []))

    async def find_by_payload(
        self, thread_id: str, payloads: Sequence[tuple[str, str]]
    ) -> list[Operation]:
        wanted = set(payloads)
        return [
            op
            for op in self._ops.values()
            if op.thread_id == thread_id and (op.tool, op.args_hash) in wanted
        ]
