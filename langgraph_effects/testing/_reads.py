"""Conformance cases: leases, listings and payload finds, concurrency, the schema and the steps."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import pytest

from ..core.operation import TERMINAL, UNRESOLVED, Change, Event, Operation, State
from ..errors import StaleVersionError
from ..ledger.base import (
    DEFAULT_ACTOR,
    CasEach,
    CasWithAudit,
    FindOrInsert,
    Ledger,
    OperationQuery,
    audit_row,
    cursor,
    find_step,
    insert_step,
)
from ._cases import LOSE, dispatch, ids, make_op, populate, succeed, trail_len


class ReadCases:
    """Leases, queries and concurrency (part of `LedgerConformance`)."""

    async def test_renew_lease_only_for_the_owner_token(self, ledger: Ledger) -> None:
        op, idle = make_op(), make_op()
        lease = time.time() + 30
        [stored] = await ledger.record_intents([op], change=dispatch("tok-A", lease))
        await ledger.record_intents([idle])

        assert await ledger.renew_lease(op.op_id, "tok-B", lease + 100) is False
        assert (await ledger.get(op.op_id)) == stored

        assert await ledger.renew_lease(op.op_id, "tok-A", lease + 100) is True
        renewed = await ledger.get(op.op_id)
        assert renewed is not None
        assert renewed.lease_expires_at == lease + 100
        assert renewed.version == stored.version  # a heartbeat is not a transition
        assert await trail_len(ledger, op.op_id) == 1

        assert await ledger.renew_lease(idle.op_id, "tok-A", lease) is False  # pending: no lease
        assert await ledger.renew_lease("op-missing", "tok-A", lease) is False
        await ledger.transition(op.op_id, succeed(), expected_version=1)
        assert await ledger.renew_lease(op.op_id, "tok-A", lease + 200) is False  # settled

    async def test_lease_renewer_works_from_another_thread(self, ledger: Ledger) -> None:
        """Heartbeats renew from a thread of their own (the event loop may be blocked)."""
        renew = ledger.lease_renewer()
        if renew is None:  # in-process ledgers renew on the event loop: nothing to check
            return
        op = make_op()
        lease = time.time() + 30
        [stored] = await ledger.record_intents([op], change=dispatch("tok-A", lease))
        assert await asyncio.to_thread(renew, op.op_id, "tok-B", lease + 100) is False
        assert await asyncio.to_thread(renew, op.op_id, "tok-A", lease + 100) is True
        renewed = await ledger.get(op.op_id)
        assert renewed is not None and renewed.lease_expires_at == lease + 100
        assert renewed.version == stored.version

    async def test_takeover_loses_to_a_renewed_lease(self, ledger: Ledger) -> None:
        """A takeover compares the lease it saw: a heartbeat in between wins."""
        op = make_op()
        lease = time.time() - 1  # already expired by the clock
        [stored] = await ledger.record_intents([op], change=dispatch("tok-A", lease))
        lose = Change(Event.LOSE, evidence={"kind": "lease"}, lease_seen=stored.lease_expires_at)
        assert await ledger.renew_lease(op.op_id, "tok-A", time.time() + 30) is True
        with pytest.raises(StaleVersionError):
            await ledger.transition(op.op_id, lose, expected_version=stored.version)
        assert (await ledger.get(op.op_id)).state is State.DISPATCHED  # type: ignore[union-attr]
        fresh = await ledger.get(op.op_id)
        assert fresh is not None
        lose = dataclasses.replace(lose, lease_seen=fresh.lease_expires_at)
        lost = await ledger.transition(op.op_id, lose, expected_version=fresh.version)
        assert lost.state is State.UNKNOWN and lost.owner is None

    async def test_list_operations_filters(self, ledger: Ledger) -> None:
        ops, cut = await populate(ledger)

        async def listed(**query: Any) -> str:
            found = await ledger.list_operations(OperationQuery(**query))
            by_id = {op.op_id: k for k, op in ops.items()}
            return "".join(by_id[op.op_id] for op in found)

        assert await listed() == "abcdefg"  # oldest update first
        assert await listed(states=frozenset({State.PENDING})) == "a"
        assert await listed(states=frozenset({State.CONFIRMED, State.UNKNOWN})) == "cd"
        assert await listed(states=UNRESOLVED) == "abde"
        assert await listed(states=TERMINAL) == "cfg"
        assert await listed(thread_id="t-1") == "abe"
        assert await listed(tenant="globex") == "de"
        assert await listed(tool="charge_card") == "ef"
        assert await listed(tool="send_email", tenant="acme") == "acg"
        assert await listed(states=frozenset({State.CONFIRMED}), thread_id="t-1") == ""
        assert await listed(updated_before=cut) == "abc"
        assert await listed(updated_before=ops["a"].updated_at) == ""  # strictly before
        assert await listed(updated_after=ops["f"].updated_at) == "g"  # strictly after
        assert await listed(updated_after=ops["c"].updated_at, updated_before=ops["g"].updated_at) == "def"
        assert await listed(limit=3) == "abc"
        assert await listed(tenant="acme", limit=2) == "ab"
        assert await listed(thread_id="t-none") == ""
        # The rows come back whole.
        assert await ledger.list_operations(OperationQuery(thread_id="t-2")) == [ops["c"], ops["d"]]

    async def test_list_operations_pages_with_a_cursor(self, ledger: Ledger) -> None:
        ops, _ = await populate(ledger)
        by_id = {op.op_id: k for k, op in ops.items()}
        stored = {by_id[op.op_id]: op for op in await ledger.list_operations(OperationQuery())}

        async def listed(**query: Any) -> str:
            found = await ledger.list_operations(OperationQuery(**query))
            return "".join(by_id.get(op.op_id, "+") for op in found)

        assert await listed(after=cursor(stored["c"])) == "defg"  # strictly after
        assert await listed(after=cursor(stored["g"])) == ""
        assert await listed(after=(stored["c"].updated_at, "")) == "cdefg"  # the id breaks ties
        assert await listed(states=UNRESOLVED, after=cursor(stored["b"])) == "de"
        assert await listed(states=frozenset({State.DISPATCHED}), after=(0.0, "")) == "b"
        assert await listed(tenant="acme", after=cursor(stored["a"]), limit=2) == "bc"
        # Pages read one after the other see every row once, a row added meanwhile too.
        pages: list[str] = []
        after = None
        while not pages or len(pages[-1]) == 3:
            page = await ledger.list_operations(OperationQuery(limit=3, after=after))
            pages.append("".join(by_id.get(op.op_id, "+") for op in page))
            if len(pages) == 1:
                await ledger.record_intents([make_op(thread_id="t-late")])
            after = cursor(page[-1]) if page else after
        assert pages == ["abc", "def", "g+"]

    async def test_list_operations_with_a_verdict(self, ledger: Ledger) -> None:
        ops, _ = await populate(ledger)  # only g was decided by a verdict (a decision id)
        by_id = {op.op_id: k for k, op in ops.items()}

        async def listed(**query: Any) -> str:
            return "".join(by_id[op.op_id] for op in await ledger.list_operations(OperationQuery(**query)))

        assert await listed(verdicts=True) == "g"
        assert await listed(verdicts=True, states=TERMINAL, tenant="acme") == "g"
        assert await listed(verdicts=True, states=UNRESOLVED) == ""
        assert await listed(verdicts=True, updated_after=ops["g"].updated_at) == ""

    async def test_unresolved(self, ledger: Ledger) -> None:
        ops, _ = await populate(ledger)
        by_id = {op.op_id: k for k, op in ops.items()}

        async def unresolved(**kwargs: Any) -> str:
            return "".join(by_id[op.op_id] for op in await ledger.unresolved(**kwargs))

        assert await unresolved() == "abde"
        assert await unresolved(thread_id="t-1") == "abe"
        assert await unresolved(thread_id="t-3") == ""
        assert await unresolved(tenant="globex") == "de"
        assert await unresolved(limit=2) == "ab"

    async def test_count_operations(self, ledger: Ledger) -> None:
        """Counts by (state, tool), each with its least recent update; filters apply,
        the query's limit does not."""
        ops, _ = await populate(ledger)
        later = make_op(thread_id="t-4", tenant="acme", tool="send_email")
        [stored] = await ledger.record_intents([later])

        async def counted(**query: Any) -> list[tuple[str, str, int, float]]:
            found = await ledger.count_operations(OperationQuery(**query))
            return [(c.state.value, c.tool, c.count, c.least_recent_update) for c in found]

        assert await counted(states=UNRESOLVED, limit=1) == [
            ("dispatched", "open_ticket", 1, ops["b"].updated_at),
            ("pending", "send_email", 2, ops["a"].updated_at),  # a, and the later one
            ("review", "charge_card", 1, ops["e"].updated_at),
            ("unknown", "send_email", 1, ops["d"].updated_at),
        ]
        assert stored.updated_at > ops["a"].updated_at
        assert await counted(states=TERMINAL, tenant="acme") == [
            ("abandoned", "send_email", 1, ops["g"].updated_at),
            ("confirmed", "send_email", 1, ops["c"].updated_at),
            ("failed", "charge_card", 1, ops["f"].updated_at),
        ]
        everything = await counted()
        assert sum(n for _, _, n, _ in everything) == 8 and len(everything) == 7
        assert await counted(tenant="globex", tool="send_email") == [
            ("unknown", "send_email", 1, ops["d"].updated_at)
        ]
        assert await counted(thread_id="t-none") == []

    async def test_find_by_payload(self, ledger: Ledger) -> None:
        x = make_op(thread_id="t-1", tool="send_email", args_hash="h1")
        y = make_op(thread_id="t-1", tool="send_email", args_hash="h2")
        z = make_op(thread_id="t-1", tool="open_ticket", args_hash="h1")
        w = make_op(thread_id="t-2", tool="send_email", args_hash="h1")
        await ledger.record_intents([x, y, z, w], change=dispatch())
        confirmed = await ledger.transition(x.op_id, succeed(), expected_version=1)

        async def found(thread_id: str, pairs: list[tuple[str, str]]) -> list[str]:
            return sorted(ids(await ledger.find_by_payload(thread_id, pairs)))

        assert await found("t-1", [("send_email", "h1")]) == [x.op_id]  # terminal rows too
        assert await found("t-1", [("send_email", "h1"), ("open_ticket", "h1"), ("x", "h9")]) == (
            sorted([x.op_id, z.op_id])
        )
        assert await found("t-1", [("send_email", "h1"), ("send_email", "h1")]) == [x.op_id]
        assert await found("t-2", [("send_email", "h1")]) == [w.op_id]
        assert await found("t-3", [("send_email", "h1")]) == []
        assert await found("t-1", []) == []
        assert await ledger.find_by_payload("t-1", [("send_email", "h1")]) == [confirmed]

    async def test_find_by_payload_order_is_the_listing_order(self, ledger: Ledger) -> None:
        # Ids sorted against their update order, and pairs given in yet another order:
        # every backend answers least recently updated first, then by id.
        ops = [make_op(op_id=f"op-order-{c}", thread_id="t-o", args_hash=f"h{c}") for c in "dcba"]
        await ledger.record_intents(ops, change=dispatch())
        moved = await ledger.apply(ops[2].op_id, succeed(), expected_version=1)
        assert moved.applied
        pairs = [("send_email", f"h{c}") for c in "badc"]
        found = await ledger.find_by_payload("t-o", pairs)
        listed = await ledger.list_operations(OperationQuery(thread_id="t-o"))
        expected = sorted(listed, key=lambda o: (o.updated_at, o.op_id))
        assert ids(found) == ids(expected)
        assert ids(found)[-1] == ops[2].op_id  # the one changed last comes last
        assert ids(found)[:3] == sorted(ids(found)[:3])  # same stamp: by id

    async def test_racing_transitions_exactly_one_wins(self, ledger: Ledger) -> None:
        op = make_op()
        await ledger.record_intents([op], change=dispatch())

        async def attempt(i: int) -> Operation | StaleVersionError:
            try:
                return await ledger.transition(
                    op.op_id, succeed(worker=i), expected_version=1, actor=f"worker-{i}"
                )
            except StaleVersionError as error:
                return error

        results = await asyncio.gather(*(attempt(i) for i in range(20)))

        winners = [r for r in results if isinstance(r, Operation)]
        losers = [r for r in results if isinstance(r, StaleVersionError)]
        assert len(winners) == 1 and len(losers) == 19
        assert all((e.expected, e.actual) == (1, 2) for e in losers)
        [winner] = winners
        assert await ledger.get(op.op_id) == winner
        trail = await ledger.audit(op.op_id)
        assert len(trail) == 2
        assert winner.evidence is not None
        assert trail[-1].actor == f"worker-{winner.evidence['worker']}"

    async def test_overlapping_batches_in_opposite_orders(self, ledger: Ledger) -> None:
        # Two workers record the same sibling calls in opposite orders: no deadlock,
        # no error, and both see the same rows.
        for _ in range(5):
            x, y, z = make_op(), make_op(), make_op()
            results = await asyncio.gather(
                *(
                    ledger.record_intents(batch, change=dispatch(f"tok-{i}"))
                    for i, batch in enumerate([[x, y, z], [z, y, x]] * 3)
                )
            )
            stored = await ledger.get_many([x.op_id, y.op_id, z.op_id])
            for batch_result in results:
                assert {op.op_id: op for op in batch_result} == stored
            for op in (x, y, z):
                assert await trail_len(ledger, op.op_id) == 1

    async def test_racing_intents_store_one_owner(self, ledger: Ledger) -> None:
        op = make_op()
        results = await asyncio.gather(
            *(ledger.record_intents([op], change=dispatch(f"tok-{i}")) for i in range(20))
        )
        rows = [row for [row] in results]
        assert all(row == rows[0] for row in rows)  # every caller sees the same winner
        assert rows[0].owner is not None and rows[0].owner.token.startswith("tok-")
        assert await trail_len(ledger, op.op_id) == 1

    # -- the schema, and the steps plans ask directly ---------------------------------

    async def test_setup_is_idempotent_and_records_the_schema_version(self, ledger: Ledger) -> None:
        assert await ledger.schema_version() == type(ledger).SCHEMA_VERSION
        [stored] = await ledger.record_intents([make_op()])
        await ledger.setup()  # again, as every worker does at start: changes nothing
        assert await ledger.schema_version() == type(ledger).SCHEMA_VERSION
        assert await ledger.get(stored.op_id) == stored

    async def test_find_or_insert_inserts_only_when_nothing_is_found(self, ledger: Ledger) -> None:
        home = make_op(thread_id="t-f", args_hash="h-f")
        fresh = make_op(thread_id="t-f", args_hash="h-new")

        def plan(ops: list[Operation], pairs: list[tuple[str, str]]) -> Any:
            find = find_step([op.op_id for op in ops], "t-f", pairs)
            found, inserted = yield FindOrInsert(find, insert_step(ops, None, DEFAULT_ACTOR))
            return ids(found), list(inserted)

        assert await ledger.transact(lambda: plan([home], [])) == ([], [home.op_id])
        # ``fresh`` is new, but the find comes back with ``home`` (same payload): no insert.
        again = await ledger.transact(lambda: plan([fresh], [("send_email", "h-f")]))
        assert again == ([home.op_id], [])
        assert await ledger.get(fresh.op_id) is None
        assert await trail_len(ledger, fresh.op_id) == 0
        assert await trail_len(ledger, home.op_id) == 1

    async def test_cas_each_writes_only_rows_still_at_their_version(self, ledger: Ledger) -> None:
        """Each compare-and-set of a `CasEach` on its own; only the mutable columns
        are written (the identity and payload stored at intent stay as they were)."""
        a, b = make_op(), make_op()
        await ledger.record_intents([a, b], change=dispatch())
        moved = await ledger.transition(b.op_id, LOSE, expected_version=1)
        rows = await ledger.get_many([a.op_id, b.op_id])

        def cas(op_id: str) -> CasWithAudit:
            row = rows[op_id]
            after = dataclasses.replace(
                row, version=row.version + 1, attempts=7, args={"rewritten": True}, tool="other"
            )
            return CasWithAudit(after, 1, audit_row(row, after, None, "conformance"))

        def plan() -> Any:
            return (yield CasEach((cas(a.op_id), cas(b.op_id))))

        assert list(await ledger.transact(plan)) == [True, False]
        written = await ledger.get(a.op_id)
        assert written is not None and (written.version, written.attempts) == (2, 7)
        assert (written.args, written.tool) == (a.args, a.tool)  # not mutable: kept
        assert await ledger.get(b.op_id) == moved
        assert [await trail_len(ledger, i) for i in (a.op_id, b.op_id)] == [2, 2]
