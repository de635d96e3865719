"""``FindOrInsert``, the step that opens never-seen calls in one round trip: on every
backend it inserts (with audit) only when its read finds nothing, and answers with
what it found and what it inserted, as the separate ``Find`` and insert would."""

from __future__ import annotations

import time
from typing import Any

from langgraph_effects.core.operation import Change, Event, Operation, Owner, State
from langgraph_effects.ledger.base import (
    DEFAULT_ACTOR,
    FindOrInsert,
    Ledger,
    Plan,
    find_step,
    insert_step,
    recorded_plan,
)

from .conftest import OpFactory


def _dispatch() -> Change:
    owner = Owner(host="host-a", pid=4242, started=1_700_000_000.25, token="tok-1")
    return Change(Event.DISPATCH, owner=owner, lease_expires_at=time.time() + 60)


def _open(ops: list[Operation], pairs: list[tuple[str, str]] | None = None) -> Any:
    """A plan: FindOrInsert of ``ops`` (the first dispatched), then the rows as stored."""

    def plan() -> Plan[tuple[list[Operation], list[str], list[Operation]]]:
        find = find_step([op.op_id for op in ops], ops[0].thread_id, pairs or [])
        insert = insert_step(ops, None, DEFAULT_ACTOR, {ops[0].op_id: _dispatch()})
        found, inserted = yield FindOrInsert(find, insert)
        stored = (yield from recorded_plan(ops, insert, inserted)) if not found else []
        return found, inserted, stored

    return plan


async def test_nothing_found_inserts_every_row_with_its_audit(ledger: Ledger, make_op: OpFactory) -> None:
    ops = [make_op(result=None), make_op(args={"text": "héllo \udcff \x00", "big": "x" * 100_000})]
    found, inserted, stored = await ledger.transact(_open(ops, [("send_email", "hash-1")]))

    assert found == [] and sorted(inserted) == sorted(op.op_id for op in ops)
    assert await ledger.get_many([op.op_id for op in ops]) == {op.op_id: op for op in stored}
    first = await ledger.get(ops[0].op_id)
    assert first is not None and first.state is State.DISPATCHED and first.lease_expires_at is not None
    second = await ledger.get(ops[1].op_id)
    assert second is not None and second.state is State.PENDING and second.args == ops[1].args
    assert [len(await ledger.audit(op.op_id)) for op in ops] == [1, 1]


async def test_a_row_found_by_id_inserts_nothing(ledger: Ledger, make_op: OpFactory) -> None:
    old, new = make_op(), make_op()
    [kept] = await ledger.record_intents([old])

    found, inserted, _ = await ledger.transact(_open([new, old]))

    assert found == [kept] and inserted == []
    assert await ledger.get(new.op_id) is None and await ledger.audit(new.op_id) == []
    assert await ledger.get(old.op_id) == kept  # not dispatched by the step either


async def test_a_candidate_of_the_thread_inserts_nothing(ledger: Ledger, make_op: OpFactory) -> None:
    earlier = make_op(args_hash="hash-9")
    elsewhere = make_op(args_hash="hash-7", thread_id="thread-2")
    await ledger.record_intents([earlier, elsewhere])
    new = make_op(args_hash="hash-9")

    pairs = [("send_email", "hash-9"), ("send_email", "hash-7")]
    found, inserted, _ = await ledger.transact(_open([new], pairs))

    assert [op.op_id for op in found] == [earlier.op_id] and inserted == []
    assert await ledger.get(new.op_id) is None


async def test_a_taken_provider_key_is_left_out_and_read_back(ledger: Ledger, make_op: OpFactory) -> None:
    owner = make_op(thread_id="thread-2", provider_key="k-shared")
    await ledger.record_intents([owner])
    clash, fine = make_op(provider_key="k-shared"), make_op()

    found, inserted, stored = await ledger.transact(_open([clash, fine]))

    assert found == [] and inserted == [fine.op_id]
    assert [op.op_id for op in stored] == [fine.op_id]  # the clash is not stored
    assert await ledger.get(clash.op_id) is None and await ledger.audit(clash.op_id) == []


async def test_more_rows_than_one_statement_holds(ledger: Ledger, make_op: OpFactory) -> None:
    ops = [make_op() for _ in range(620)]  # Postgres: one statement, one array per column

    found, inserted, stored = await ledger.transact(_open(ops))

    assert found == [] and len(inserted) == len(stored) == 620
    assert len(await ledger.get_many([op.op_id for op in ops])) == 620
    again = await ledger.transact(_open(ops))
    assert len(again[0]) == 620 and again[1] == []


async def test_after_a_find_the_plan_inserts_what_is_new(ledger: Ledger, make_op: OpFactory) -> None:
    """What an open does when some calls are stored: the step wrote nothing, so the
    plan's own insert is its one write (Postgres: still a lone statement)."""
    old, new = make_op(), make_op()
    await ledger.record_intents([old])

    def plan() -> Plan[list[Operation]]:
        find = find_step([old.op_id, new.op_id], old.thread_id, [])
        found, _ = yield FindOrInsert(find, insert_step([old, new], None, DEFAULT_ACTOR))
        assert [op.op_id for op in found] == [old.op_id]
        insert = insert_step([new], None, DEFAULT_ACTOR)
        return (yield from recorded_plan([new], insert, (yield insert)))

    [stored] = await ledger.transact(plan)
    assert await ledger.get(new.op_id) == stored and len(await ledger.audit(new.op_id)) == 1


async def test_with_an_origin_only_candidates_asked_from_it_are_found(
    ledger: Ledger, make_op: OpFactory
) -> None:
    """An earlier turn's same call asked from another state is no re-plan candidate:
    the open still inserts in its one statement."""
    same = make_op(args_hash="hash-5", extra={"turn": "1", "origin": "state-a"})
    other = make_op(args_hash="hash-5", extra={"turn": "2", "origin": "state-b"})
    bare = make_op(args_hash="hash-5", extra={"note": "\udcff"})  # no origin at all
    await ledger.record_intents([same, other, bare])
    pairs = (("send_email", "hash-5"),)

    def find(origin: str | None) -> Any:
        def plan() -> Plan[list[Operation]]:
            return (yield find_step([], "thread-1", pairs, origin))

        return plan

    assert {op.op_id for op in await ledger.transact(find("state-a"))} == {same.op_id}
    assert {op.op_id for op in await ledger.transact(find(None))} == {same.op_id, other.op_id, bare.op_id}
    new = make_op(args_hash="hash-5", extra={"turn": "3", "origin": "state-c"})

    def open_new() -> Plan[tuple[list[Operation], list[str]]]:
        insert = insert_step([new], None, DEFAULT_ACTOR)
        return (yield FindOrInsert(find_step([new.op_id], "thread-1", pairs, "state-c"), insert))

    assert await ledger.transact(open_new) == ([], [new.op_id])


async def test_whole_and_fractional_times_in_one_insert(ledger: Ledger, make_op: OpFactory) -> None:
    """A float column given an int in one row and a float in another (Postgres sends
    each column as one array, which must not mix types)."""
    ops = [make_op(), make_op()]
    leases = {ops[0].op_id: 2_000_000_000, ops[1].op_id: 2_000_000_000.5}
    owner = Owner(host="h", pid=1, started=1.0, token="t")

    def plan() -> Plan[list[str]]:
        changes = {i: Change(Event.DISPATCH, owner=owner, lease_expires_at=at) for i, at in leases.items()}
        return (yield insert_step(ops, None, DEFAULT_ACTOR, changes))

    assert sorted(await ledger.transact(plan)) == sorted(leases)
    stored = await ledger.get_many(list(leases))
    assert {i: op.lease_expires_at for i, op in stored.items()} == leases
