"""The row codec: an operation survives ``to_row``/``from_row`` whole, every field.

``from_row`` builds the operation straight into its instance dict (not through
``Operation.__init__``), so a field it forgot would only show as an attribute error
later: this checks every field of the dataclass comes back, with its type.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3

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


# The codec encodes with the C encoder ``json.JSONEncoder.encode`` would build, made once
# per thread, and decodes with ``json``'s scanner directly: both are ``json``'s own
# pieces (``json.encoder.c_make_encoder``, ``JSONDecoder.scan_once``), so these tests
# fail loudly if a Python release changes them.

ENCODED = [
    {"b": 1, "a": [1.5, None, True, "x"], "c": {"z": "é", "y": "\u2400"}},
    ["nested", {"k": {"k": [{"k": 0}]}}],
    {"nan": float("nan"), "inf": float("inf"), "big": 10**30, "neg": -0.0},
    "a plain string",
    {"lone": "\ud800", "nul": "\x00", "emoji": "\U0001f600"},
    {"not json": OWNER, "path": __import__("pathlib").Path("/tmp")},  # default=str
    {2: "int key", 1.5: "float key", None: "null key"},
    {2: "int key", "1": "str key"},  # sort_keys refuses to compare them
    [],
    {},
]


@pytest.mark.parametrize("value", ENCODED, ids=range(len(ENCODED)))
def test_the_codec_encodes_as_json_dumps_does(value: object) -> None:
    from langgraph_effects.ledger import codec

    try:
        expected = json.dumps(value, sort_keys=True, default=str)
    except TypeError:
        with pytest.raises(TypeError):
            codec._encode({"inside": value})
        assert codec._encode({"after": [1]}) == '{"after": [1]}'  # nothing left behind
        return
    assert codec._encode(value) == expected


def test_a_circular_value_is_refused_and_the_encoder_still_works_after() -> None:
    from langgraph_effects.ledger import codec

    loop: list[object] = []
    loop.append({"again": loop})
    with pytest.raises(ValueError, match="Circular reference"):
        codec._encode({"outer": loop})
    assert codec._encode({"outer": [1]}) == '{"outer": [1]}'


@pytest.mark.parametrize(
    "text", ['{"a": [1, 2.5, null]}', '"s"', "  [1] ", "[1] trailing", "", "{", "NaN", '"\\ud800"']
)
def test_the_codec_decodes_as_json_loads_does(text: str) -> None:
    from langgraph_effects.ledger import codec

    try:
        expected = json.loads(text)
    except json.JSONDecodeError as error:
        with pytest.raises(json.JSONDecodeError) as raised:
            codec._json(text)
        assert raised.value.msg == error.msg and raised.value.pos == error.pos
        return
    got = codec._json(text)
    assert repr(got) == repr(expected)  # NaN != NaN: compare as written
