"""Every string a model or an operator can produce is stored and read back exactly,
on every backend (memory, SQLite, Postgres).

Measured: Postgres ``text`` refuses NUL (``DataError``) and ``jsonb`` refuses ``\\u0000``
and lone surrogates; psycopg and sqlite3 cannot encode a surrogate code point at all
(``UnicodeEncodeError`` before sending). So a NUL in a model's tool_call_id used to
wedge a thread on Postgres (every resume raised) while SQLite stored it. The codec now
escapes such text reversibly (``codec.stored_text``), the same way for every backend.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from langgraph_effects.core.operation import Change, Event, Operation, Owner, State, decision_digest
from langgraph_effects.ledger.base import Ledger, OperationQuery
from langgraph_effects.ledger.codec import ESCAPED, read_text, stored_text

#: What a backend refuses (NUL, lone and split surrogates), and what looks like the
#: codec's own escaped form (it must not be mistaken for one).
AWKWARD = [
    "a\x00b",
    "\x00",
    "a\ud800b",
    "\udc00",
    "\ud83d\ude00",  # a surrogate pair as two code points (not an emoji)
    ESCAPED + "plain",
    ESCAPED + "a\\u0000b",  # what "a\x00b" is stored as: a different string
    "ok-\u00e9-\U0001f600",
]

#: Every text field of an operation, and how each test value is spelt in it.
TEXT_FIELDS = (
    "op_id",
    "thread_id",
    "checkpoint_ns",
    "tenant",
    "tool",
    "tool_call_id",
    "message_id",
    "task_id",
    "checkpoint_id",
    "args_hash",
    "provider_key",
    "policy_version",
)


def awkward_op(bad: str) -> Operation:
    """An operation whose every text field holds ``bad`` (and its name, so each differs)."""
    fields: dict[str, Any] = {name: f"{name}:{bad}" for name in TEXT_FIELDS}
    return Operation(
        **fields,
        contract="blind",
        args={bad: bad, "nested": [bad, {"k": bad}]},
        extra={"origin": f"origin:{bad}", "note": bad},
    )


def owner() -> Owner:
    return Owner(host="host-a", pid=4242, started=1.0, token="tok-1")


@pytest.mark.parametrize("bad", AWKWARD, ids=lambda s: s.encode("utf-8", "backslashreplace").decode())
async def test_every_text_field_round_trips(ledger: Ledger, bad: str) -> None:
    op = awkward_op(bad)
    change = Change(Event.DISPATCH, owner=owner(), lease_expires_at=time.time() + 60)
    [stored] = await ledger.record_intents([op], change=change, actor=f"worker:{bad}")
    assert stored == await ledger.get(op.op_id)
    for name in TEXT_FIELDS:
        assert getattr(stored, name) == f"{name}:{bad}", name
    assert stored.args == op.args and stored.extra == op.extra
    assert await ledger.renew_lease(op.op_id, "tok-1", time.time() + 120)

    evidence = {"kind": "result", "text": bad, bad: [bad]}
    done = await ledger.transition(
        op.op_id,
        Change(Event.LOSE, evidence=evidence),
        expected_version=1,
        actor=f"worker:{bad}",
    )
    note = {"verdict": "landed", "note": f"operator note {bad}", "by": bad}
    verdict = Change(
        Event.LANDED,
        evidence={"kind": "verdict", "by": bad, "note": bad},
        decision_id=f"dec:{bad}",
        decision=note,
        result=b"\x00" + bad.encode("utf-8", "surrogatepass"),
        result_type=f"type:{bad}",
    )
    landed = await ledger.transition(op.op_id, verdict, expected_version=done.version, actor=f"op:{bad}")
    assert landed.decisions == ((f"dec:{bad}", decision_digest(note)),)
    # The same decision again is recognised (its id read back exactly): nothing changes.
    again = await ledger.apply(op.op_id, verdict, expected_version=done.version, actor=f"op:{bad}")
    assert (again.op, again.applied) == (landed, False)

    read = await ledger.get(op.op_id)
    assert read == landed and read.state is State.CONFIRMED
    assert read.result_type == f"type:{bad}" and read.result == verdict.result
    assert read.evidence == verdict.evidence
    assert read == dataclasses.replace(stored, **{f.name: getattr(read, f.name) for f in _mutable()})

    trail = await ledger.audit(op.op_id)
    assert [(e.actor, e.event) for e in trail] == [
        (f"worker:{bad}", "intent"),
        (f"worker:{bad}", "lose"),
        (f"op:{bad}", "landed"),
    ]
    assert trail[1].evidence == evidence and trail[2].evidence == verdict.evidence

    # Found by every filter a caller can spell with the raw text.
    for query in (
        OperationQuery(thread_id=op.thread_id),
        OperationQuery(tenant=op.tenant),
        OperationQuery(tool=op.tool),
    ):
        assert await ledger.list_operations(query) == [read], query
    assert await ledger.find_by_payload(op.thread_id, [(op.tool, op.args_hash)]) == [read]
    assert await ledger.get_many([op.op_id, "op-missing"]) == {op.op_id: read}


def _mutable() -> list[dataclasses.Field[Any]]:
    fixed = {*TEXT_FIELDS, "contract", "args", "extra", "created_at"}
    return [f for f in dataclasses.fields(Operation) if f.name not in fixed]


async def test_texts_that_differ_only_in_awkward_characters_stay_apart(ledger: Ledger) -> None:
    """The escaping is one-to-one: a raw string that looks escaped, the string it
    would be the escape of, and the string without its NUL are three operations (the
    unique ``(tenant, provider_key)`` included), each found by its own thread."""
    keys = ["k\x00", ESCAPED + stored_text("k\x00")[1:], "k"]
    assert len({stored_text(k) for k in keys}) == 3
    ops = [
        dataclasses.replace(awkward_op("x"), op_id=f"op-{i}", thread_id=key, provider_key=key, tenant="t")
        for i, key in enumerate(keys)
    ]
    stored = await ledger.record_intents(ops)
    assert [op.op_id for op in stored] == ["op-0", "op-1", "op-2"]
    for op in ops:
        [found] = await ledger.list_operations(OperationQuery(thread_id=op.thread_id))
        assert (found.op_id, found.provider_key) == (op.op_id, op.provider_key)


async def test_plain_text_is_stored_as_it_is() -> None:
    """Ordinary text (any valid Unicode, NUL aside, not starting with the mark) is not
    touched: existing rows and hand-written SQL keep working."""
    for text in ("call_0", "ünïcode \U0001f4e7", "a\u2400b", ""):
        assert stored_text(text) == text
    assert stored_text("a\x00b\\") == ESCAPED + "a\\u0000b\\\\"


#: Any code point, surrogates included (hypothesis leaves them out by default).
ANY_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()))


@given(ANY_TEXT, ANY_TEXT)
def test_stored_text_is_reversible_one_to_one_and_storable(a: str, b: str) -> None:
    stored = stored_text(a)
    assert read_text(stored) == a
    stored.encode("utf-8")  # no surrogate left: every driver can send it
    assert "\x00" not in stored  # Postgres text takes it
    assert (stored_text(b) == stored) == (a == b)


@given(st.dictionaries(ANY_TEXT, st.one_of(ANY_TEXT, st.lists(ANY_TEXT, max_size=3)), max_size=4))
def test_json_columns_read_back_exactly(doc: dict[str, Any]) -> None:
    """A surrogate pair split in two code points, in a key or a value, stays split."""
    from langgraph_effects.ledger.codec import _dumps, _loads

    stored = _dumps(doc)
    assert stored is not None and "\x00" not in stored
    stored.encode("utf-8")
    assert _loads(stored) == doc
