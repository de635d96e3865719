"""The row codec shared by the SQL backends: an operation (and an audit entry) as
column values and back. The in-memory ledger uses it too, so every backend hands
back the same values."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..operation import Change, Operation, Owner, State


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


#: ``json.dumps(value, sort_keys=True, default=str)``, without building an encoder for
#: every call (``json.dumps`` makes a new one whenever it is given options); the
#: encoder keeps no state between calls, so threads may share it.
_ENCODE = json.JSONEncoder(sort_keys=True, default=str).encode


def _dumps(value: Any) -> str | None:
    return None if value is None else _ENCODE(value)


def origin_text(origin: str | None) -> str | None:
    """What the ``extra`` column of a row with this origin holds, as text (``extra``
    is written once, by :func:`to_row`): SQL finds candidates by it without decoding
    the column, which need not be valid JSON to every server (a lone surrogate)."""
    return None if origin is None else '"origin": ' + _ENCODE(origin)


def encoded_extra(op: Operation) -> str:
    """The ``extra`` column of ``op`` as stored (what :func:`origin_text` is found in)."""
    return _ENCODE(dict(op.extra))


def to_row(op: Operation) -> dict[str, Any]:
    """An operation as column values (JSON as text, result as bytes)."""
    return {
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
        "extra": encoded_extra(op),
        "created_at": op.created_at,
        **mutable_row(op),
    }


def mutable_row(op: Operation) -> dict[str, Any]:
    """:func:`to_row`'s values of :data:`MUTABLE_COLUMNS` only, plus ``op_id``: what a
    transition writes (the arguments, however large, are not encoded again)."""
    return {
        "op_id": op.op_id,
        "state": op.state.value,
        "version": op.version,
        "attempts": op.attempts,
        "owner": _dumps(op.owner.to_json()) if op.owner else None,
        "lease_expires_at": op.lease_expires_at,
        "dispatched_at": op.dispatched_at,
        "result_type": op.result_type,
        "result": op.result,
        "evidence": _dumps(dict(op.evidence)) if op.evidence is not None else None,
        "decisions": _dumps([list(d) for d in op.decisions]) if op.decisions else "[]",
        "updated_at": op.updated_at,
    }


def _loads(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, (str, bytes, bytearray)):
        return json.loads(value)
    return value  # already decoded (Postgres jsonb)


#: ``State(value)`` by a dict lookup (the enum's own lookup is a Python-level call).
_STATES: dict[Any, State] = {state.value: state for state in State}


def from_row(row: Mapping[str, Any]) -> Operation:
    """The inverse of :func:`to_row`.

    Every row a ledger reads is decoded here, on its thread, so the operation is
    built straight into its instance dict: ``Operation.__init__`` only assigns, one
    frozen ``object.__setattr__`` at a time (a third of the decoding), and every
    field is named below.
    """
    owner = _loads(row["owner"])
    result = row["result"]
    decisions = row["decisions"]
    state = row["state"]
    op = object.__new__(Operation)
    op.__dict__.update(
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
        state=_STATES.get(state) or State(state),
        version=int(row["version"]),
        attempts=int(row["attempts"]),
        owner=Owner.from_json(owner) if owner else None,
        lease_expires_at=row["lease_expires_at"],
        dispatched_at=row["dispatched_at"],
        result_type=row["result_type"],
        result=bytes(result) if result is not None else None,
        evidence=_loads(row["evidence"]),
        decisions=(
            tuple((str(a), str(b)) for a, b in _loads(decisions))
            if decisions and decisions != "[]"
            else ()
        ),
        extra=_loads(row["extra"]) or {},
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
    )
    return op


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
