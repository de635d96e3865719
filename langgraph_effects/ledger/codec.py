"""The row codec shared by the SQL backends: an operation (and an audit entry) as
column values and back. The in-memory ledger uses it too, so every backend hands
back the same values."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from operator import itemgetter
from typing import Any

from ..core.operation import Change, Event, Operation, Owner, State


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
#: every call (``json.dumps`` makes a new one whenever it is given options).
_ENCODER = json.JSONEncoder(sort_keys=True, default=str)


class _ThreadEncoder(threading.local):
    """What ``_ENCODER.encode`` builds on every call (the C encoder, and the record of
    the containers being encoded that its circular reference check keeps), made once
    per thread: that record is the encoder's only state."""

    def __init__(self) -> None:
        self.markers: dict[int, Any] = {}
        self.chunks = c_make_encoder(
            self.markers, str, encode_basestring_ascii, None, ": ", ", ", True, False, True
        )


_THREAD_ENCODER = _ThreadEncoder() if c_make_encoder is not None else None


def _encode(value: Any) -> str:
    """``_ENCODER.encode(value)``: the same text."""
    local = _THREAD_ENCODER
    if local is None or isinstance(value, str):
        return _ENCODER.encode(value)
    try:
        return "".join(local.chunks(value, 0))
    except BaseException:
        local.markers.clear()  # left behind by the containers it was inside of
        raise


#: The C scanner ``json.loads`` ends in (its one decoder's ``scan_once``).
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _json(text: str) -> Any:
    """``json.loads(text)``, scanned directly when the text is one JSON value and
    nothing else (what `_dumps` writes); anything else goes through
    ``json.loads``, which also says what is wrong with it."""
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


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
    if text.isascii() and "\x00" not in text:
        return text  # the common case, without the regular expression
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
    if "\\ud" not in text:  # no surrogate escape (a false alarm only costs a walk)
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


def encoded_extra(op: Operation) -> str:
    """The ``extra`` column of ``op`` as stored (what `origin_text` is found in)."""
    return _dumps(dict(op.extra)) or "{}"


#: The text columns written at intent (each goes through `stored_text`): the
#: fixed columns but the operation id and the JSON arguments.
_TEXT_COLUMNS: tuple[str, ...] = tuple(
    c for c in COLUMNS[: COLUMNS.index("state")] if c not in ("op_id", "args")
)
_TEXT_VALUES = itemgetter(*_TEXT_COLUMNS)


def _texts(values: Mapping[str, Any]) -> str:
    """The text columns of a row (or an operation's fields) in one string, to test once."""
    return "".join(filter(None, _TEXT_VALUES(values)))


def to_row(op: Operation) -> dict[str, Any]:
    """An operation as column values (JSON as text, result as bytes).

    A new intent is encoded twice in a row (the insert's parameters, then the row
    read back as stored): the last operation's row is kept and copied for a second
    call with the very same (immutable) operation."""
    last = _LAST_ROW[0]
    if last is not None and last[0] is op:
        return dict(last[1])
    row = _raw_row(op)
    probe = _texts(row)
    if not probe.isascii() or "\x00" in probe:  # else every one is stored as it is
        row.update({c: _text(row[c]) for c in _TEXT_COLUMNS})
    _LAST_ROW[0] = (op, row)
    return dict(row)


#: The last operation `to_row` encoded and its row (one slot, swapped whole).
_LAST_ROW: list[tuple[Operation, dict[str, Any]] | None] = [None]


def _raw_row(op: Operation) -> dict[str, Any]:
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
    """`to_row`'s values of `MUTABLE_COLUMNS` only, plus ``op_id``: what a
    transition writes (the arguments, however large, are not encoded again)."""
    return {
        "op_id": stored_text(op.op_id),
        "state": _STATE_TEXT[op.state],
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
        return _walk(_json(value[1:]), read_text)
    if isinstance(value, str):
        return _json(value)
    if isinstance(value, (bytes, bytearray)):
        return json.loads(value)
    return value  # already decoded (Postgres jsonb)


#: ``State(value)`` by a dict lookup (the enum's own lookup is a Python-level call).
_STATES: dict[Any, State] = {state.value: state for state in State}
#: ``state.value`` and ``event.value`` by a dict lookup (``.value`` is a Python-level
#: property of every enum member).
_STATE_TEXT: dict[State, str] = {state: state.value for state in State}
_EVENT_TEXT: dict[Event, str] = {event: event.value for event in Event}


def from_row(row: Mapping[str, Any]) -> Operation:
    """The inverse of `to_row`.

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
        op_id=read_text(row["op_id"]),
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
        result_type=_read(row["result_type"]),
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
    if ESCAPED in _texts(row):  # else none was escaped (see stored_text)
        op.__dict__.update({c: _read(row[c]) for c in _TEXT_COLUMNS})
    return op


def audit_row(
    before: Operation | None, after: Operation, change: Change | None, actor: str
) -> dict[str, Any]:
    """The audit-table values for one transition, or for creation (``before=None``).

    The evidence is the step's own (``change.evidence``), not whatever the operation
    carried from an earlier step; ``seq`` is the version the step produced.
    """
    event = _EVENT_TEXT[change.event] if change is not None and before is not None else "intent"
    evidence = change.evidence if change is not None else after.evidence
    return {
        "op_id": stored_text(after.op_id),
        "seq": after.version,
        "at": after.updated_at,
        "actor": stored_text(actor),
        "from_state": _STATE_TEXT[before.state] if before else None,
        "to_state": _STATE_TEXT[after.state],
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
