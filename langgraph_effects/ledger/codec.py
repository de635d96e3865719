"""The row codec shared by the SQL backends: an operation (and an audit entry) as
column values and back. The in-memory ledger uses it too, so every backend hands
back the same values."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.operation import Change, Operation, Owner, State


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


def _encode(value: Any) -> str:
    """``value`` as JSON text: keys sorted, ASCII only, anything else as ``str()``."""
    return json.dumps(value, sort_keys=True, default=str)


#: What marks a stored text as `stored_text`'s escaped form: U+2400 SYMBOL FOR
#: NULL, then the original with ``\\`` and each unstorable code point escaped.
ESCAPED = "\u2400"
#: What no backend stores as text: NUL (Postgres ``text`` refuses it) and any UTF-16
#: surrogate code point (no UTF-8 encoder takes one: psycopg and sqlite3 raise before
#: sending), plus the escape mark at the start, so escaping stays reversible.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]|^\u2400")
_TO_ESCAPE = re.compile("[\\\\\x00\ud800-\udfff]")
_ESCAPES = re.compile(r"\\(\\|u([0-9a-f]{4}))")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return "\\\\" if char == "\\" else f"\\u{ord(char):04x}"


def _unescape(match: re.Match[str]) -> str:
    code = match.group(2)
    return "\\" if code is None else chr(int(code, 16))


def stored_text(text: str) -> str:
    """``text`` as a text column of every backend holds it: unchanged, unless it holds
    something a backend refuses (NUL, a surrogate code point) or starts with
    `ESCAPED`; then `ESCAPED` and the text with ``\\`` doubled and each of
    those code points as ``\\uXXXX`` (one by one: a surrogate pair stays two code
    points). Reversible (`read_text`) and one-to-one, so equality and uniqueness
    still hold."""
    if _UNSTORABLE.search(text) is None:
        return text
    return ESCAPED + _TO_ESCAPE.sub(_escape, text)


def read_text(text: str) -> str:
    """The inverse of `stored_text`."""
    return _ESCAPES.sub(_unescape, text[1:]) if text[:1] == ESCAPED else text


def _text(value: str | None) -> str | None:
    return None if value is None else stored_text(value)


def _read(value: str | None) -> str | None:
    return None if value is None else read_text(value)


def _dumps(value: Any) -> str | None:
    """``value`` as JSON text. JSON keeps NUL and a lone surrogate exactly (as ``\\u``
    escapes, ASCII only), but a high surrogate followed by a low one reads back as one
    code point: a document with any surrogate escape stores every string in it through
    `stored_text` instead, marked by a leading `ESCAPED` (JSON text never
    starts with one), so `_loads` gives back exactly what was stored."""
    if value is None:
        return None
    text = _encode(value)
    if "\\ud" not in text:  # no surrogate escape (a false alarm only escapes more)
        return text
    return ESCAPED + _encode(_walk(value, stored_text))


def _walk(value: Any, convert: Callable[[str], str]) -> Any:
    """``value`` with every string in it (keys too) converted."""
    if isinstance(value, str):
        return convert(value)
    if isinstance(value, Mapping):
        return {convert(k) if isinstance(k, str) else k: _walk(v, convert) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_walk(v, convert) for v in value]
    return value


def origin_text(origin: str | None) -> str | None:
    """What the ``extra`` column of a row with this origin holds, as text (``extra``
    is written once, by `to_row`): SQL finds candidates by it without decoding
    the column, which need not be valid JSON to every server (a lone surrogate)."""
    if origin is None:
        return None
    encoded = _encode(origin)  # an origin with a surrogate makes the column escaped
    return '"origin": ' + (_encode(stored_text(origin)) if "\\ud" in encoded else encoded)


def to_row(op: Operation) -> dict[str, Any]:
    """An operation as column values (JSON as text, result as bytes; every text
    through `stored_text`)."""
    return {
        "thread_id": stored_text(op.thread_id),
        "checkpoint_ns": stored_text(op.checkpoint_ns),
        "tenant": stored_text(op.tenant),
        "tool": stored_text(op.tool),
        "tool_call_id": stored_text(op.tool_call_id),
        "message_id": _text(op.message_id),
        "task_id": _text(op.task_id),
        "checkpoint_id": _text(op.checkpoint_id),
        "args": _dumps(dict(op.args)),
        "args_hash": stored_text(op.args_hash),
        "provider_key": stored_text(op.provider_key),
        "contract": stored_text(op.contract),
        "policy_version": _text(op.policy_version),
        "extra": _dumps(dict(op.extra)) or "{}",  # what `origin_text` is found in
        "created_at": op.created_at,
        **mutable_row(op),
    }


def mutable_row(op: Operation) -> dict[str, Any]:
    """`to_row`'s values of `MUTABLE_COLUMNS` only, plus ``op_id``: what a
    transition writes (the arguments, however large, are not encoded again)."""
    return {
        "op_id": stored_text(op.op_id),
        "state": op.state.value,
        "version": op.version,
        "attempts": op.attempts,
        "owner": _dumps(op.owner.to_json()) if op.owner else None,
        "lease_expires_at": op.lease_expires_at,
        "dispatched_at": op.dispatched_at,
        "result_type": _text(op.result_type),
        "result": op.result,
        "evidence": _dumps(dict(op.evidence)) if op.evidence is not None else None,
        "decisions": _dumps([list(d) for d in op.decisions]) if op.decisions else "[]",
        "updated_at": op.updated_at,
    }


def _loads(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, str) and value[:1] == ESCAPED:
        return _walk(json.loads(value[1:]), read_text)
    if isinstance(value, (str, bytes, bytearray)):
        return json.loads(value)
    return value  # already decoded (Postgres jsonb)


def from_row(row: Mapping[str, Any]) -> Operation:
    """The inverse of `to_row`."""
    owner = _loads(row["owner"])
    result = row["result"]
    return Operation(
        op_id=read_text(row["op_id"]),
        thread_id=read_text(row["thread_id"]),
        checkpoint_ns=read_text(row["checkpoint_ns"]),
        tenant=read_text(row["tenant"]),
        tool=read_text(row["tool"]),
        tool_call_id=read_text(row["tool_call_id"]),
        message_id=_read(row["message_id"]),
        task_id=_read(row["task_id"]),
        checkpoint_id=_read(row["checkpoint_id"]),
        args=_loads(row["args"]) or {},
        args_hash=read_text(row["args_hash"]),
        provider_key=read_text(row["provider_key"]),
        contract=read_text(row["contract"]),
        policy_version=_read(row["policy_version"]),
        state=State(row["state"]),
        version=int(row["version"]),
        attempts=int(row["attempts"]),
        owner=Owner.from_json(owner) if owner else None,
        lease_expires_at=row["lease_expires_at"],
        dispatched_at=row["dispatched_at"],
        result_type=_read(row["result_type"]),
        result=bytes(result) if result is not None else None,
        evidence=_loads(row["evidence"]),
        decisions=tuple((str(a), str(b)) for a, b in _loads(row["decisions"]) or ()),
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
        "op_id": stored_text(after.op_id),
        "seq": after.version,
        "at": after.updated_at,
        "actor": stored_text(actor),
        "from_state": before.state.value if before else None,
        "to_state": after.state.value,
        "event": event,
        "version": after.version,
        "evidence": _dumps(dict(evidence)) if evidence is not None else None,
    }


def audit_from_row(row: Mapping[str, Any]) -> AuditEntry:
    """An `AuditEntry` from one stored audit row (op_id, seq, at, actor,
    from_state, to_state, event, version, evidence; text read back through
    `read_text`)."""
    return AuditEntry(
        op_id=read_text(row["op_id"]),
        seq=int(row["seq"]),
        at=float(row["at"]),
        actor=read_text(row["actor"]),
        from_state=State(row["from_state"]) if row["from_state"] else None,
        to_state=State(row["to_state"]),
        event=row["event"],
        version=int(row["version"]),
        evidence=_loads(row["evidence"]),
    )


#: The columns an erasure writes (`Erase`): a transition's, and the payload it replaces.
ERASE_COLUMNS: tuple[str, ...] = (*MUTABLE_COLUMNS, "args", "extra")

#: Evidence keys an erasure keeps: what the evidence was (its kind) and the ids that
#: link an operation to another (an undo it was marked for), never a person's data.
ERASURE_KEEPS: tuple[str, ...] = ("kind", "compensated_by")


def erased_evidence(evidence: Any, erased: Mapping[str, Any]) -> dict[str, Any] | None:
    """``evidence`` (a mapping, or ``None``) with everything but `ERASURE_KEEPS`
    removed and ``erased`` (who erased it, when) put in its place."""
    if evidence is None:
        return None
    return {**{k: evidence[k] for k in ERASURE_KEEPS if k in evidence}, "erased": dict(erased)}


def erased_audit_text(stored: Any, erased: Mapping[str, Any]) -> str | None:
    """One stored audit row's evidence column after an erasure (`erased_evidence`)."""
    return _dumps(erased_evidence(_loads(stored), erased))
