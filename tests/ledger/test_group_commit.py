"""Group commit and optimistic transitions, on every backend; commits and round trips
counted on the SQL backends (from the statements the connection really sends)."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import psycopg
import pytest
from psycopg.pq import Trace

from langgraph_effects._private import run_in_connection_thread
from langgraph_effects.core.operation import Change, Event, Operation, State
from langgraph_effects.errors import IllegalTransitionError, LedgerError, StaleVersionError
from langgraph_effects.ledger.base import Ledger
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.ledger.postgres import PostgresLedger
from langgraph_effects.ledger.sqlite import SqliteLedger

from .conftest import OpFactory, require_postgres, terminate
from .test_contract import LOSE, dispatch, succeed


async def seed(ledger: Ledger, make_op: OpFactory, n: int) -> list[Operation]:
    """``n`` dispatched operations (version 1)."""
    return await ledger.record_intents([make_op() for _ in range(n)], change=dispatch())


async def outcomes(
    ledger: Ledger, ops: Sequence[Operation], versions: Sequence[int]
) -> list[Operation | Exception]:
    """The outcome transitions of ``ops``, all started together."""
    return await asyncio.gather(
        *(
            ledger.transition(op.op_id, succeed(i=i), expected_version=v, actor=f"w{i}")
            for i, (op, v) in enumerate(zip(ops, versions, strict=True))
        ),
        return_exceptions=True,
    )


# -- group commit: each caller hears only its own outcome ---------------------------------


async def test_one_stale_outcome_among_eight_fails_alone(ledger: Ledger, make_op: OpFactory) -> None:
    ops = await seed(ledger, make_op, 8)
    results = await outcomes(ledger, ops, [1, 1, 1, 7, 1, 1, 1, 1])

    stale = results[3]
    assert isinstance(stale, StaleVersionError) and (stale.expected, stale.actual) == (7, 1)
    for i, op in enumerate(ops):
        trail = await ledger.audit(op.op_id)
        stored = await ledger.get(op.op_id)
        assert stored is not None
        if i == 3:  # nothing of it was written
            assert stored == op and [e.event for e in trail] == ["intent"]
        else:
            assert results[i] == stored and stored.state is State.CONFIRMED
            assert [(e.event, e.version, e.actor) for e in trail][1:] == [("succeed", 2, f"w{i}")]


async def test_mixed_errors_in_one_group(ledger: Ledger, make_op: OpFactory) -> None:
    [a, b, c] = await seed(ledger, make_op, 3)
    results = await asyncio.gather(
        ledger.transition(a.op_id, succeed(), expected_version=1),
        ledger.transition("op-missing", succeed(), expected_version=1),
        ledger.transition(b.op_id, Change(Event.ESCALATE), expected_version=1),  # illegal
        ledger.record_intents([make_op()]),
        ledger.transition(c.op_id, succeed(), expected_version=1),
        return_exceptions=True,
    )
    assert isinstance(results[0], Operation) and results[0].state is State.CONFIRMED
    assert type(results[1]).__name__ == "OperationNotFoundError"
    assert isinstance(results[2], IllegalTransitionError)
    assert isinstance(results[3], list) and results[3][0].state is State.PENDING
    assert isinstance(results[4], Operation) and results[4].state is State.CONFIRMED
    assert await ledger.get(b.op_id) == b


async def test_two_outcomes_of_one_operation_in_one_group(ledger: Ledger, make_op: OpFactory) -> None:
    # In arrival order, as if one after the other: the second sees the first's write.
    [op] = await seed(ledger, make_op, 1)
    first, second = await asyncio.gather(
        ledger.transition(op.op_id, succeed(), expected_version=1),
        ledger.transition(op.op_id, succeed(), expected_version=1),
        return_exceptions=True,
    )
    assert isinstance(first, Operation) and first.version == 2
    assert isinstance(second, StaleVersionError) and second.actual == 2
    assert len(await ledger.audit(op.op_id)) == 2


async def _plant_audit_row(ledger: Ledger, op_id: str, seq: int) -> None:
    """An audit row the ledger did not write, so its next audit insert collides."""
    values = (op_id, seq, time.time(), "planted", "dispatched", "confirmed", "succeed", seq)
    if isinstance(ledger, SqliteLedger):
        sql = "INSERT INTO effect_audit (op_id, seq, at, actor, from_state, to_state, event, version)"
        await ledger.conn.execute(sql + " VALUES (?, ?, ?, ?, ?, ?, ?, ?)", values)
    else:
        assert isinstance(ledger, PostgresLedger)
        async with ledger.pool.connection() as conn:
            await conn.execute(
                f'INSERT INTO "{ledger.schema}".effect_audit (op_id, seq, at, actor, from_state, '
                "to_state, event, version) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                values,
            )


async def test_a_database_error_fails_only_its_own_plan(ledger: Ledger, make_op: OpFactory) -> None:
    if isinstance(ledger, InMemoryLedger):
        pytest.skip("no database to fail")
    ops = await seed(ledger, make_op, 8)
    await _plant_audit_row(ledger, ops[5].op_id, 2)
    results = await outcomes(ledger, ops, [1] * 8)

    assert isinstance(results[5], LedgerError)
    bad = await ledger.get(ops[5].op_id)
    assert bad == ops[5]  # its row update was rolled back with its audit insert
    assert [e.actor for e in await ledger.audit(ops[5].op_id)] == ["langgraph-effects", "planted"]
    for i, op in enumerate(ops):
        if i != 5:
            assert isinstance(results[i], Operation) and results[i] == await ledger.get(op.op_id)
            assert len(await ledger.audit(op.op_id)) == 2


# -- optimistic transitions: the same results without the locking read ------------------


async def test_optimistic_outcome_equals_the_locking_one(ledger: Ledger, make_op: OpFactory) -> None:
    [a, b] = await seed(ledger, make_op, 2)
    fast = await ledger.apply(a.op_id, succeed(), expected_version=1, before=a)
    slow = await ledger.apply(b.op_id, succeed(), expected_version=1)
    assert fast.applied and fast.op == await ledger.get(a.op_id)
    assert dataclasses.replace(fast.op, op_id="x", updated_at=0, tool_call_id="", provider_key="") == (
        dataclasses.replace(slow.op, op_id="x", updated_at=0, tool_call_id="", provider_key="")
    )
    fast_trail, slow_trail = await ledger.audit(a.op_id), await ledger.audit(b.op_id)
    assert [(e.event, e.from_state, e.to_state, e.version, e.evidence) for e in fast_trail] == [
        (e.event, e.from_state, e.to_state, e.version, e.evidence) for e in slow_trail
    ]


async def test_optimistic_on_a_stale_read_is_refused(ledger: Ledger, make_op: OpFactory) -> None:
    [op] = await seed(ledger, make_op, 1)
    moved = await ledger.transition(op.op_id, LOSE, expected_version=1)
    with pytest.raises(StaleVersionError) as caught:  # the caller still holds version 1
        await ledger.transition(op.op_id, succeed(), expected_version=1, before=op)
    assert (caught.value.expected, caught.value.actual) == (1, 2)
    # Illegal from the row the caller holds, but the error is the stored row's: stale.
    with pytest.raises(StaleVersionError):
        await ledger.transition(op.op_id, Change(Event.CONFIRM), expected_version=1, before=op)
    with pytest.raises(IllegalTransitionError):
        await ledger.transition(op.op_id, succeed(), expected_version=2, before=moved)
    assert await ledger.get(op.op_id) == moved
    assert len(await ledger.audit(op.op_id)) == 2


async def test_optimistic_takeover_still_sees_a_renewed_lease(ledger: Ledger, make_op: OpFactory) -> None:
    # A heartbeat renews the lease without a new version: the caller's row is not
    # the stored one, and a takeover that compares the lease must notice.
    [op] = await ledger.record_intents([make_op()], change=dispatch("tok-A", time.time() - 1))
    assert await ledger.renew_lease(op.op_id, "tok-A", time.time() + 30)
    lose = Change(Event.LOSE, evidence={"kind": "lease"}, lease_seen=op.lease_expires_at)
    with pytest.raises(StaleVersionError):
        await ledger.transition(op.op_id, lose, expected_version=1, before=op)
    assert (await ledger.get(op.op_id)).state is State.DISPATCHED  # type: ignore[union-attr]


async def test_optimistic_verdict_replay_is_still_recognised(ledger: Ledger, make_op: OpFactory) -> None:
    [op] = await seed(ledger, make_op, 1)
    lost = await ledger.transition(op.op_id, LOSE, expected_version=1, before=op)
    verdict = Change(Event.LANDED, evidence={"kind": "verdict"}, decision_id="d-1", decision={"v": 1})
    landed = await ledger.apply(op.op_id, verdict, expected_version=2, before=lost)
    again = await ledger.apply(op.op_id, verdict, expected_version=2, before=lost)
    assert landed.applied and (again.op, again.applied) == (landed.op, False)
    assert len(await ledger.audit(op.op_id)) == 3


# -- counted on the SQL backends ------------------------------------------------------------


class SqliteCommits:
    """Counts COMMITs the ledger's own sqlite3 connection executes."""

    def __init__(self) -> None:
        self.commits = 0

    def __call__(self, sql: str) -> None:
        self.commits += sql.strip().upper().startswith("COMMIT")


async def test_sqlite_eight_outcomes_share_one_commit(tmp_path: Path, make_op: OpFactory) -> None:
    async with SqliteLedger.from_conn_string(tmp_path / "l.sqlite") as ledger:
        await ledger.setup()
        ops = await seed(ledger, make_op, 8)
        counter = SqliteCommits()
        await run_in_connection_thread(ledger.conn, lambda db: db.set_trace_callback(counter))
        results = await outcomes(ledger, ops, [1, 1, 9, 1, 1, 1, 1, 1])
        assert counter.commits <= 2  # one starts at once, the rest queue behind it
        assert sum(isinstance(r, Operation) for r in results) == 7
        counter.commits = 0
        await ledger.record_intents([make_op()])
        await ledger.transition(ops[2].op_id, succeed(), expected_version=1, before=ops[2])
        assert counter.commits == 2  # one call alone: two durable commits, as before
    with sqlite3.connect(tmp_path / "l.sqlite") as db:
        assert db.execute("SELECT count(*) FROM effect_audit").fetchone() == (8 + 8 + 1,)


class PgTrace:
    """What one pooled connection sends, from libpq's own trace: round trips (a burst
    of messages sent, then waited for) and durable commits (``COMMIT``, or a write
    statement outside a transaction that changed rows: it commits by itself)."""

    def __init__(self, conn: psycopg.AsyncConnection[object]) -> None:
        self.conn = conn
        conn.prepare_threshold = None  # every statement's text stays in the trace
        self._start()

    def _start(self) -> None:
        self.file = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed in take())
        self.conn.pgconn.trace(self.file.fileno())
        self.conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)

    def take(self) -> tuple[int, int]:
        """(round trips, commits) since the last call."""
        self.conn.pgconn.untrace()  # flushes libpq's buffer
        self.file.seek(0)
        lines = self.file.read().splitlines()
        self.file.close()
        self._start()
        trips, commits, in_tx, alone, last = 0, 0, False, False, ""
        for line in lines:
            direction, _, kind, *rest = [*line.split("\t"), "", ""][:4]
            if direction == "F" and last != "F":
                trips += 1
            last = direction or last
            if direction == "F" and kind in ("Parse", "Query"):
                sql = rest[0].split('"')[3 if kind == "Parse" else 1].strip().upper()
                if sql.startswith("BEGIN"):
                    in_tx = True
                elif sql.startswith(("COMMIT", "ROLLBACK")):
                    commits += sql.startswith("COMMIT")
                    in_tx = False
                else:
                    alone = sql.startswith(("INSERT", "UPDATE", "WITH")) and not in_tx
            elif direction == "B" and kind == "CommandComplete" and alone:
                # A write statement alone commits by itself, if it changed any row
                # (one that matched nothing writes no commit record).
                commits += rest[0].strip().strip('"').split()[-1] != "0"
                alone = False
        return trips, commits


@pytest.fixture
async def traced(pg_schema: str) -> AsyncIterator[tuple[PostgresLedger, PgTrace]]:
    dsn = require_postgres()
    async with PostgresLedger.from_conn_string(dsn, schema=pg_schema, min_size=1, max_size=1) as ledger:
        await ledger.setup()
        async with ledger.pool.connection() as conn:
            trace = PgTrace(conn)
        yield ledger, trace


@pytest.mark.postgres
async def test_postgres_round_trips_per_plan(
    traced: tuple[PostgresLedger, PgTrace], make_op: OpFactory
) -> None:
    ledger, trace = traced
    check = 0  # the pool checks a connection on checkout only when the server spoke on it
    trace.take()
    [op] = await ledger.record_intents([make_op()], change=dispatch())
    assert trace.take() == (check + 1, 1)  # insert and audit: one statement, its own transaction
    assert await ledger.record_intents([op]) == [op]
    assert trace.take() == (check + 2, 0)  # nothing inserted, then the stored row read
    done = await ledger.transition(op.op_id, succeed(), expected_version=1, before=op)
    assert trace.take() == (check + 1, 1)  # compare-and-set with its audit row: one statement
    assert await ledger.get_many([op.op_id]) == {op.op_id: done}
    assert trace.take() == (check + 1, 0)
    [other] = await ledger.record_intents([make_op()], change=dispatch())
    trace.take()
    await ledger.transition(other.op_id, succeed(), expected_version=1)  # no row in hand
    assert trace.take() == (check + 3, 1)  # BEGIN + lock, compare-and-set + audit, COMMIT
    with pytest.raises(StaleVersionError):
        await ledger.transition(op.op_id, succeed(), expected_version=1, before=op)
    assert trace.take() == (check + 2, 0)  # the miss, then the stored version for the error
    batch = await ledger.record_intents([make_op() for _ in range(8)], change=dispatch())
    assert trace.take() == (check + 1, 1)
    results = await outcomes(ledger, batch, [1] * 8)
    assert all(isinstance(r, Operation) for r in results)
    # Arrived together: one transaction, a lock and a compare-and-set each, one COMMIT.
    assert trace.take() == (check + 2 * 8 + 1, 1)
    assert await ledger.renew_lease(op.op_id, "nobody", time.time()) is False
    assert trace.take() == (check + 1, 0)


@pytest.mark.postgres
async def test_postgres_optimistic_outcomes_share_one_commit(
    traced: tuple[PostgresLedger, PgTrace], make_op: OpFactory
) -> None:
    ledger, trace = traced
    ops = await seed(ledger, make_op, 8)
    trace.take()
    results = await asyncio.gather(
        *(ledger.transition(op.op_id, succeed(), expected_version=1, before=op) for op in ops[:7]),
        ledger.transition(ops[7].op_id, succeed(), expected_version=3, before=ops[7]),
        return_exceptions=True,
    )
    # One transaction: the seven compare-and-sets one by one (BEGIN rides with the
    # first), the locking read of the eighth (its row is not at the version it expects:
    # it fails alone), COMMIT.
    assert trace.take() == (7 + 1 + 1, 1)
    assert isinstance(results[7], StaleVersionError)
    assert all(isinstance(r, Operation) and r.state is State.CONFIRMED for r in results[:7])


@pytest.mark.postgres
async def test_a_terminated_connection_is_replaced_before_a_write(
    pg_schema: str, make_op: OpFactory
) -> None:
    # The pool's check on checkout finds it closed by the server and hands out a new one.
    dsn = require_postgres()
    async with PostgresLedger.from_conn_string(dsn, schema=pg_schema, min_size=1, max_size=1) as ledger:
        await ledger.setup()
        [op] = await ledger.record_intents([make_op()], change=dispatch())
        async with ledger.pool.connection() as conn:
            pid = conn.info.backend_pid
        await terminate(pid)
        done = await ledger.transition(op.op_id, succeed(), expected_version=1, before=op)
        assert done.state is State.CONFIRMED
        async with ledger.pool.connection() as conn:
            assert conn.info.backend_pid != pid
