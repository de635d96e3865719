"""A ledger backend written only against the public kit (``langgraph_effects.ledger.kit``):
the ledger in one JSON file, registered under the ``jsonfile`` scheme.

What a third party writes to add a backend, and nothing more: one method per storage
step, a transaction (the whole file is read at ``begin`` and replaced atomically at
``commit``), the three queries, and a factory for :func:`register_backend`. One
process at a time: it takes no lock that other processes would see.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

from langgraph_effects.ledger.kit import (
    ERASE_COLUMNS,
    LEDGER_TABLES,
    MUTABLE_COLUMNS,
    ApplyMigration,
    AuditEntry,
    CasWithAudit,
    ControlRow,
    CountMigrations,
    CreateLedger,
    Erase,
    Find,
    Forget,
    InsertWithAudit,
    LedgerBackend,
    LedgerOptions,
    ListControls,
    Load,
    Lock,
    LockControls,
    Operation,
    OperationQuery,
    OurTables,
    WriteControls,
    audit_from_row,
    erased_audit_text,
    from_row,
    may_renew,
    register_backend,
    to_row,
    unregister_backend,
)

SCHEME = "jsonfile"


def _empty() -> dict[str, Any]:
    return {"migrations": None, "ops": {}, "audit": {}, "controls": {}}


def _encode(value: Any) -> Any:
    return {"base64": base64.b64encode(value).decode()} if isinstance(value, bytes) else value


def _operation(row: dict[str, Any]) -> Operation:
    return from_row({k: base64.b64decode(v["base64"]) if isinstance(v, dict) else v for k, v in row.items()})


def _control(row: dict[str, Any]) -> ControlRow:
    return ControlRow(row["control"], row["scope"], row["state"], row["updated_at"])


class JsonFileLedger(LedgerBackend):
    """Operations and their audit rows in a JSON file, each commit an atomic replace."""

    SCHEMA_VERSION = 1

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self.where = f"{SCHEME}:{self.path}"
        self._tx: dict[str, Any] | None = None

    # -- transactions ---------------------------------------------------------------

    def _read_file(self) -> dict[str, Any]:
        if not self.path.exists():
            return _empty()
        return json.loads(self.path.read_text())  # type: ignore[no-any-return]

    async def begin(self) -> None:
        self._tx = self._read_file()

    async def commit(self) -> None:
        assert self._tx is not None
        temporary = self.path.with_name(self.path.name + ".tmp")
        with open(temporary, "w") as out:
            json.dump(self._tx, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.path)
        self._tx = None

    async def rollback(self) -> None:
        self._tx = None

    @property
    def _state(self) -> dict[str, Any]:
        assert self._tx is not None, "a step outside a transaction"
        return self._tx

    def _op(self, op_id: str) -> Operation | None:
        row = self._state["ops"].get(op_id)
        return _operation(row) if row is not None else None

    # -- the steps --------------------------------------------------------------------

    async def lock(self, step: Lock) -> Operation | None:
        return self._op(step.op_id)  # the whole file is this transaction's

    async def load(self, step: Load) -> dict[str, Operation]:
        found = {i: self._op(i) for i in step.op_ids}
        return {i: op for i, op in found.items() if op is not None}

    async def find(self, step: Find) -> list[Operation]:
        found = {i: op for i in step.op_ids if (op := self._op(i)) is not None}
        for op_id in self._state["ops"]:
            op = self._op(op_id)
            assert op is not None
            if (
                op.thread_id == step.thread_id
                and (op.tool, op.args_hash) in step.pairs
                and step.origin in (None, op.extra.get("origin"))
            ):
                found.setdefault(op.op_id, op)
        return list(found.values())

    async def insert_with_audit(self, step: InsertWithAudit) -> list[str]:
        ops = self._state["ops"]
        keys = {(row["tenant"], row["provider_key"]) for row in ops.values()}
        inserted = []
        for op, audit in zip(step.ops, step.audit, strict=True):
            row = to_row(op)
            key = (row["tenant"], row["provider_key"])
            if op.op_id in ops or key in keys:
                continue
            ops[op.op_id] = {k: _encode(v) for k, v in row.items()}
            keys.add(key)
            self._state["audit"].setdefault(op.op_id, []).append(audit)
            inserted.append(op.op_id)
        return inserted

    async def cas_with_audit(self, step: CasWithAudit) -> bool:
        row = self._state["ops"].get(step.after.op_id)
        if row is None or row["version"] != step.expected_version:
            return False
        fresh = to_row(step.after)
        row.update({c: _encode(fresh[c]) for c in MUTABLE_COLUMNS})
        self._state["audit"].setdefault(step.after.op_id, []).append(step.audit)
        return True

    async def lock_controls(self, step: LockControls) -> dict[tuple[str, str], ControlRow]:
        stored = self._state.setdefault("controls", {})  # the whole file is this transaction's
        found = (stored.get(json.dumps(list(key))) for key in step.keys)
        return {(c.control, c.scope): c for c in (_control(row) for row in found if row is not None)}

    async def forget(self, step: Forget) -> list[str]:
        ops, deleted = self._state["ops"], []
        for op_id in step.op_ids:
            op = self._op(op_id)
            if op is None or op.state.value not in step.states:
                continue
            if step.updated_before is not None and not op.updated_at < step.updated_before:
                continue
            del ops[op_id]
            self._state["audit"].pop(op_id, None)
            self._state.setdefault("controls", {}).pop(json.dumps(["hold", op_id]), None)
            deleted.append(op_id)
        return deleted

    async def erase(self, step: Erase) -> bool:
        row = self._state["ops"].get(step.after.op_id)
        if row is None or row["version"] != step.expected_version:
            return False
        fresh = to_row(step.after)
        row.update({c: _encode(fresh[c]) for c in ERASE_COLUMNS})
        mark = step.after.extra["erased"]
        trail = self._state["audit"].setdefault(step.after.op_id, [])
        for entry in trail:
            entry["evidence"] = erased_audit_text(entry["evidence"], mark)
        trail.append(step.audit)
        return True

    async def write_controls(self, step: WriteControls) -> None:
        stored = self._state.setdefault("controls", {})
        for row in step.rows:
            stored[json.dumps([row.control, row.scope])] = {
                "control": row.control,
                "scope": row.scope,
                "state": dict(row.state),
                "updated_at": row.updated_at,
            }

    async def list_controls(self, step: ListControls) -> list[ControlRow]:
        rows = [_control(row) for row in self._state.setdefault("controls", {}).values()]
        return sorted((r for r in rows if r.control != "hold"), key=lambda r: (r.control, r.scope))

    async def our_tables(self, step: OurTables) -> set[str]:
        return set(LEDGER_TABLES) if self._state["migrations"] is not None else set()

    async def count_migrations(self, step: CountMigrations) -> int:
        return int(self._state["migrations"] or 0)

    async def create_ledger(self, step: CreateLedger) -> None:
        self._state["migrations"] = 0

    async def apply_migration(self, step: ApplyMigration) -> None:
        self._state["migrations"] = step.index + 1  # a JSON file has no schema to change

    # -- the queries ------------------------------------------------------------------

    async def list_operations(self, query: OperationQuery) -> list[Operation]:
        return query.select(_operation(row) for row in self._read_file()["ops"].values())

    async def audit(self, op_id: str) -> list[AuditEntry]:
        return [audit_from_row(row) for row in self._read_file()["audit"].get(op_id, [])]

    async def renew_lease(self, op_id: str, token: str, lease_expires_at: float) -> bool:
        async with self._transaction_lock:
            await self.begin()
            op = self._op(op_id)
            if not may_renew(op, token):
                await self.rollback()
                return False
            self._state["ops"][op_id]["lease_expires_at"] = lease_expires_at
            await self.commit()
            return True


def open_jsonfile(url: str, options: LedgerOptions) -> JsonFileLedger:
    """The factory registered for ``jsonfile://PATH``: nothing is created until a commit."""
    return JsonFileLedger(url[len(f"{SCHEME}://") :])


def register() -> None:
    """Register the ``jsonfile`` scheme (what a package would do at import, or through
    the ``langgraph_effects.backends`` entry-point group)."""
    register_backend(SCHEME, open_jsonfile, replace=True)


def unregister() -> None:
    unregister_backend(SCHEME)
