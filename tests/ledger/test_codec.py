"""The row codec: an operation survives ``to_row``/``from_row`` whole, every field,
and writes the very text earlier releases wrote (rows stored by either read back
the same in both)."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import PurePosixPath

import pytest

from langgraph_effects.core.operation import (
    Change,
    Event,
    EvidenceKind,
    Operation,
    Owner,
    State,
    advance,
    create,
)
from langgraph_effects.ledger.codec import COLUMNS, MUTABLE_COLUMNS, from_row, mutable_row, to_row

OWNER = Owner(host="h", pid=7, started=1.5, token="tok", lock="/tmp/lock")


def _ops() -> list[Operation]:
    op = Operation(
        op_id="op-1",
        thread_id="t",
        tool="send",
        tool_call_id="c1",
        args={"n": 1, "nested": {"a": [1, "x"]}},
        args_hash="h1:x",
        provider_key="pk",
        contract="dedup",
        message_id="m1",
        extra={"turn": "t:1", "origin": "o"},
    )
    intent = {"kind": EvidenceKind.INTENT}
    dispatched = create(
        op, now=1.0, change=Change(Event.DISPATCH, owner=OWNER, lease_expires_at=9.0, evidence=intent)
    )
    lost = advance(dispatched, Change(Event.LOSE, evidence={"kind": "error"}), expected_version=1, now=2.0)
    assert lost is not None
    landed = advance(
        lost,
        Change(
            Event.LANDED, evidence={"kind": "verdict"}, decision_id="d1", decision={"by": "me"}, result=b"r"
        ),
        expected_version=2,
        now=3.0,
    )
    assert landed is not None
    no_lock = dataclasses.replace(dispatched, owner=dataclasses.replace(OWNER, lock=None))
    return [create(op, now=1.0), dispatched, lost, landed, no_lock]


@pytest.mark.parametrize("op", _ops(), ids=lambda op: f"{op.state}-v{op.version}")
def test_round_trip_keeps_every_field(op: Operation) -> None:
    row = to_row(op)
    assert set(row) == set(COLUMNS)
    db = sqlite3.connect(":memory:")
    db.row_factory = sqlite3.Row
    db.execute(f"CREATE TABLE t ({', '.join(COLUMNS)})")
    db.execute(f"INSERT INTO t VALUES ({', '.join(':' + c for c in COLUMNS)})", row)
    # As the SQL backends hand rows over: SQLite rows, and decoded JSON (Postgres jsonb).
    jsonb = ("owner", "args", "evidence", "decisions", "extra")
    decoded = {c: json.loads(v) if c in jsonb and v else v for c, v in row.items()}
    for read in (from_row(row), from_row(db.execute("SELECT * FROM t").fetchone()), from_row(decoded)):
        assert read == op
        assert set(vars(read)) == {f.name for f in dataclasses.fields(Operation)}
        assert type(read.state) is State and type(read.decisions) is tuple


def test_a_state_it_does_not_know_is_refused() -> None:
    row = to_row(_ops()[0]) | {"state": "elsewhere"}
    with pytest.raises(ValueError):
        from_row(row)


@pytest.mark.parametrize("op", _ops())
def test_a_transition_writes_exactly_the_mutable_columns(op: Operation) -> None:
    """``mutable_row`` (what a compare-and-set writes) holds every mutable column, as
    ``to_row`` encodes it, and nothing else but the id it is keyed by."""
    full, mutable = to_row(op), mutable_row(op)
    assert set(mutable) == {*MUTABLE_COLUMNS, "op_id"}
    assert mutable == {c: full[c] for c in mutable}


def _golden_ops() -> list[Operation]:
    """Two calls, dispatched and then confirmed: one as most are, one whose strings
    no backend stores as they are (NUL, lone and paired surrogates, the escape mark)."""
    plain = Operation(
        op_id="op-1", thread_id="t", tool="send", tool_call_id="c1",
        args={"to": "ann@example.com", "n": [1, 2.5, None, True], "\u00e9": "\u00fc"},
        args_hash="h1", provider_key="pk", contract="dedup", message_id="m1",
        extra={"turn": "t:1", "origin": "o"},
    )
    odd = Operation(
        op_id="op-\x00\ud800", thread_id="t\u2400", tool="send", tool_call_id="c\ud83d\ude00",
        args={
            "b": 1, "a": [1.5, None, True, "x"], "c": {"z": "\u00e9", "y": "\u2400"}, "big": 10**30,
            "lone": "\ud800", "pair": "\ud83d\ude00", "nul": "\x00",
        },
        args_hash="h", provider_key="pk\\", contract="blind", message_id="m\x00",
        policy_version="\ud800", extra={"origin": "o\ud800", "turn": "t:1"},
    )
    made = []
    for op in (plain, odd):
        evidence = {"kind": "intent", "path": "/tmp"}
        send = Change(Event.DISPATCH, owner=OWNER, lease_expires_at=9.0, evidence=evidence)
        sent = create(op, now=1.0, change=send)
        succeed = Change(Event.SUCCEED, evidence={"kind": "result"}, result=b"r")
        done = advance(sent, succeed, expected_version=1, now=2.0)
        assert done is not None
        made += [sent, done]
    return made


_OWNER_TEXT = '{"host": "h", "lock": "/tmp/lock", "pid": 7, "started": 1.5, "token": "tok"}'
_PLAIN_TEXT = {
    "thread_id": "t", "checkpoint_ns": "", "tenant": "", "tool": "send", "tool_call_id": "c1",
    "message_id": "m1", "task_id": None, "checkpoint_id": None,
    "args": '{"n": [1, 2.5, null, true], "to": "ann@example.com", "\\u00e9": "\\u00fc"}',
    "args_hash": "h1", "provider_key": "pk", "contract": "dedup", "policy_version": None,
    "extra": '{"origin": "o", "turn": "t:1"}', "created_at": 1.0, "op_id": "op-1",
}
_ODD_TEXT = {
    "thread_id": "t\u2400", "checkpoint_ns": "", "tenant": "", "tool": "send",
    "tool_call_id": "\u2400c\\ud83d\\ude00", "message_id": "\u2400m\\u0000", "task_id": None,
    "checkpoint_id": None,
    "args": '\u2400{"a": [1.5, null, true, "x"], "b": 1, "big": 1000000000000000000000000000000, '
    '"c": {"y": "\\u2400\\u2400", "z": "\\u00e9"}, "lone": "\\u2400\\\\ud800", '
    '"nul": "\\u2400\\\\u0000", "pair": "\\u2400\\\\ud83d\\\\ude00"}',
    "args_hash": "h", "provider_key": "pk\\", "contract": "blind", "policy_version": "\u2400\\ud800",
    "extra": '\u2400{"origin": "\\u2400o\\\\ud800", "turn": "t:1"}', "created_at": 1.0,
    "op_id": "\u2400op-\\u0000\\ud800",
}
_SENT = {
    "state": "dispatched", "version": 1, "attempts": 1, "owner": _OWNER_TEXT, "lease_expires_at": 9.0,
    "dispatched_at": 1.0, "result_type": None, "result": None,
    "evidence": '{"kind": "intent", "path": "/tmp"}', "decisions": "[]", "updated_at": 1.0,
}
_DONE = _SENT | {
    "state": "confirmed", "version": 2, "owner": None, "lease_expires_at": None, "result": b"r",
    "evidence": '{"kind": "result"}', "updated_at": 2.0,
}
#: The rows of `_golden_ops` as the codec wrote them with its own JSON encoder and
#: scanner (built from ``json``'s C parts), before it used ``json.dumps``/``json.loads``:
#: copied from that code's output (commit d342d89).
STORED = [_PLAIN_TEXT | _SENT, _PLAIN_TEXT | _DONE, _ODD_TEXT | _SENT, _ODD_TEXT | _DONE]


@pytest.mark.parametrize("i", range(len(STORED)))
def test_rows_are_the_text_earlier_releases_stored(i: int) -> None:
    """Same text written, so a ledger written before reads back the same, and one
    written now reads the same with the earlier code."""
    op, stored = _golden_ops()[i], STORED[i]
    assert to_row(op) == stored
    assert from_row(stored) == op


def test_what_json_cannot_hold_is_stored_as_its_str() -> None:
    op = dataclasses.replace(_golden_ops()[0], evidence={"path": PurePosixPath("/tmp"), "n": 1})
    assert to_row(op)["evidence"] == '{"n": 1, "path": "/tmp"}'
