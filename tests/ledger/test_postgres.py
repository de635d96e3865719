"""Postgres-only behaviour: migrations, errors, pools, and ``AsyncEffectPostgresSaver``.

The shared behaviour of every backend is in ``test_contract.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any, ClassVar, TypedDict

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from langgraph_effects.checkpoint.postgres import AsyncEffectPostgresSaver
from langgraph_effects.core.operation import Change, Event, Owner, State
from langgraph_effects.errors import (
    LedgerCorruptError,
    LedgerUnavailableError,
    SchemaTooNewError,
)
from langgraph_effects.ledger.pgsql import OP_TYPES
from langgraph_effects.ledger.postgres import SCHEMA_VERSION, PostgresLedger, _lock_key

from .conftest import OpFactory, require_postgres, terminate

pytestmark = pytest.mark.postgres


def dispatch(token: str = "tok-1") -> Change:
    return Change(
        Event.DISPATCH,
        owner=Owner(host="h", pid=1, started=1.0, token=token),
        lease_expires_at=time.time() + 60,
    )


async def fetch(sql: str, *params: Any) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(require_postgres(), autocommit=True) as c:
        cur = await c.execute(sql, params)
        return await cur.fetchall()


async def execute(sql: str, *params: Any) -> None:
    async with await psycopg.AsyncConnection.connect(require_postgres(), autocommit=True) as c:
        await c.execute(sql, params)


async def tables_in(schema: str) -> set[str]:
    rows = await fetch("SELECT tablename FROM pg_tables WHERE schemaname = %s", schema)
    return {r[0] for r in rows}


async def migrations_in(schema: str) -> list[int]:
    return [r[0] for r in await fetch(f'SELECT v FROM "{schema}".effect_migrations ORDER BY v')]


async def test_setup_twice_is_idempotent(pg_schema: str, make_op: OpFactory) -> None:
    async with PostgresLedger.from_conn_string(require_postgres(), schema=pg_schema) as ledger:
        await ledger.setup()
        [op] = await ledger.record_intents([make_op()])
        await ledger.setup()
        assert await ledger.get(op.op_id) == op
    assert await migrations_in(pg_schema) == list(range(SCHEMA_VERSION))
    assert await tables_in(pg_schema) == {
        "effect_operations", "effect_audit", "effect_controls", "effect_migrations", "effect_deletions"
    }


async def test_concurrent_setups_in_separate_pools(pg_schema: str) -> None:
    dsn = require_postgres()
    ledgers = [PostgresLedger(dsn, schema=pg_schema, max_size=2) for _ in range(4)]
    try:
        await asyncio.gather(*(ledger.setup() for ledger in ledgers))
    finally:
        await asyncio.gather(*(ledger.aclose() for ledger in ledgers))
    assert await migrations_in(pg_schema) == list(range(SCHEMA_VERSION))
    # The advisory lock is transaction-level: nothing is left behind.
    key = _lock_key(pg_schema) & 0xFFFFFFFFFFFFFFFF
    held = await fetch(
        "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND objid = %s",
        key >> 32,
        key & 0xFFFFFFFF,
    )
    assert held == []


async def test_data_survives_a_new_pool(pg_schema: str, make_op: OpFactory) -> None:
    dsn = require_postgres()
    op = make_op(args={"amount": 12.5, "items": [1, 2, 3]}, extra={"k": "v"})
    async with PostgresLedger.from_conn_string(dsn, schema=pg_schema) as first:
        await first.setup()
        [stored] = await first.record_intents([op], change=dispatch())
        done = await first.transition(
            op.op_id,
            Change(Event.SUCCEED, result=b"\x00bytes", result_type="raw", evidence={"k": 1}),
            expected_version=1,
        )
    async with PostgresLedger.from_conn_string(dsn, schema=pg_schema) as second:
        assert await second.get(op.op_id) == done
        assert [e.to_state for e in await second.audit(op.op_id)] == [
            stored.state,
            State.CONFIRMED,
        ]


async def test_column_types_and_partial_indexes(pg_schema: str) -> None:
    async with PostgresLedger.from_conn_string(require_postgres(), schema=pg_schema) as ledger:
        await ledger.setup()
    types = dict(
        await fetch(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'effect_operations'",
            pg_schema,
        )
    )
    # JSON as text, byte for byte what SQLite keeps (jsonb would refuse \u0000 and NaN).
    assert types["args"] == types["evidence"] == types["owner"] == "text"
    assert types["result"] == "bytea"
    assert types["updated_at"] == types["lease_expires_at"] == "double precision"
    # The casts of a conditional insert's typed rows (FindOrInsert) are these types.
    assert {c: OP_TYPES.get(c, "text") for c in types} == types
    indexes = dict(await fetch("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s", pg_schema))
    for name in ("effect_operations_unresolved", "effect_operations_unresolved_thread"):
        assert "WHERE" in indexes[name]
        for state in ("pending", "dispatched", "unknown", "review"):
            assert state in indexes[name]
        assert "confirmed" not in indexes[name]
    assert "UNIQUE" in indexes["effect_operations_provider_key"]
    assert "(tenant, provider_key)" in indexes["effect_operations_provider_key"]
    assert "(thread_id, tool, args_hash)" in indexes["effect_operations_payload"]


async def test_schema_too_new_is_refused(pg_schema: str) -> None:
    dsn = require_postgres()
    async with PostgresLedger.from_conn_string(dsn, schema=pg_schema) as ledger:
        await ledger.setup()
    await execute(
        f'INSERT INTO "{pg_schema}".effect_migrations (v, applied_at) VALUES (%s, 0)',
        SCHEMA_VERSION,
    )
    async with PostgresLedger.from_conn_string(dsn, schema=pg_schema) as ledger:
        with pytest.raises(SchemaTooNewError) as caught:
            await ledger.setup()
    assert (caught.value.found, caught.value.supported) == (SCHEMA_VERSION + 1, SCHEMA_VERSION)
    assert "Upgrade langgraph-effects" in str(caught.value)
    assert await migrations_in(pg_schema) == list(range(SCHEMA_VERSION + 1))


async def test_foreign_tables_under_our_names_are_refused(pg_schema: str) -> None:
    await execute(f'CREATE SCHEMA "{pg_schema}"')
    await execute(f'CREATE TABLE "{pg_schema}".effect_operations (id int)')
    async with PostgresLedger.from_conn_string(require_postgres(), schema=pg_schema) as ledger:
        with pytest.raises(LedgerCorruptError, match="did not create"):
            await ledger.setup()
    assert await tables_in(pg_schema) == {"effect_operations"}  # nothing was changed


async def test_use_before_setup_says_what_to_do(pg_schema: str) -> None:
    async with PostgresLedger.from_conn_string(require_postgres(), schema=pg_schema) as ledger:
        with pytest.raises(LedgerUnavailableError, match=r"setup\(\)"):
            await ledger.get("op-1")


async def test_unreachable_server_is_unavailable_without_leaking_the_password() -> None:
    dsn = "postgresql://postgres:s3cret@127.0.0.1:1/test"
    ledger = PostgresLedger(dsn, timeout=1.0)
    assert ledger.where == "postgres:127.0.0.1/test"
    for _ in range(2):  # a failed start does not poison the ledger: it tries again
        with pytest.raises(LedgerUnavailableError) as caught:
            await ledger.get("op-1")
        message = str(caught.value)
        assert "postgres:127.0.0.1/test" in message
        assert "port 1 failed" in message  # the server's own reason, not just "timeout"
        assert "s3cret" not in message
        assert "server is running" in message
    await ledger.aclose()
    with pytest.raises(LedgerUnavailableError, match="was closed"):
        await ledger.get("op-1")
    with pytest.raises(LedgerUnavailableError):
        async with PostgresLedger.from_conn_string(dsn, timeout=1.0):
            pass


async def test_a_dropped_connection_is_replaced(pg_schema: str, make_op: OpFactory) -> None:
    dsn = require_postgres()
    async with PostgresLedger.from_conn_string(dsn, schema=pg_schema, min_size=1, max_size=1) as ledger:
        await ledger.setup()
        [op] = await ledger.record_intents([make_op()])
        async with ledger.pool.connection() as conn:
            pid = conn.info.backend_pid
        # What a server restart or a failover does to a pooled connection (the pool's
        # check on checkout finds it gone).
        await terminate(pid)
        assert await ledger.get(op.op_id) == op
        async with ledger.pool.connection() as conn:
            assert conn.info.backend_pid != pid


def test_where_and_schema_names() -> None:
    ledger = PostgresLedger("host=db.internal dbname=agents user=u password=pw", schema="s1")
    assert ledger.where == "postgres:db.internal/agents (schema s1)"
    with pytest.raises(ValueError):
        PostgresLedger("dbname=x", schema='bad"; DROP TABLE x; --')


async def test_a_pool_passed_in_is_not_closed(pg_schema: str, make_op: OpFactory) -> None:
    dsn = require_postgres()
    async with AsyncConnectionPool(dsn, min_size=1, max_size=2, open=False) as pool:
        ledger = PostgresLedger(pool, schema=pg_schema)
        assert ledger.where == f"postgres:127.0.0.1/test (schema {pg_schema})"
        await ledger.setup()
        [op] = await ledger.record_intents([make_op()])
        await ledger.aclose()
        assert not pool.closed
        assert await PostgresLedger(pool, schema=pg_schema).get(op.op_id) == op
        # The pool is not in autocommit mode: the ledger's writes still committed.
        async with pool.connection() as conn:
            cur = await conn.execute(
                f'SELECT count(*) FROM "{pg_schema}".effect_audit WHERE op_id = %s', [op.op_id]
            )
            assert await cur.fetchone() == (1,)


async def test_commits_stay_durable(pg_schema: str) -> None:
    async with (
        PostgresLedger.from_conn_string(require_postgres(), schema=pg_schema) as ledger,
        ledger.pool.connection() as conn,
    ):
        cur = await conn.execute("SHOW synchronous_commit")
        row = await cur.fetchone()
    assert row is not None and row[0] != "off"


class Counter(TypedDict):
    n: int


async def test_effect_postgres_saver_in_a_graph(pg_schema: str, make_op: OpFactory) -> None:
    await execute(f'CREATE SCHEMA "{pg_schema}"')
    # Checkpoints and ledger in one database, both in the test's own schema.
    dsn = make_conninfo(require_postgres(), options=f"-c search_path={pg_schema}")

    async with AsyncEffectPostgresSaver.from_conn_string(dsn) as saver:
        await saver.setup()
        await saver.setup()  # idempotent, both halves
        assert saver.ledger.pool is not saver.conn

        async def bump(state: Counter, config: RunnableConfig) -> Counter:
            thread_id = config["configurable"]["thread_id"]
            await saver.ledger.record_intents([make_op(thread_id=thread_id)], change=dispatch())
            return {"n": state["n"] + 1}

        builder = StateGraph(Counter)
        builder.add_node("bump", bump)
        builder.add_edge(START, "bump")
        builder.add_edge("bump", END)
        graph = builder.compile(checkpointer=saver)
        config: RunnableConfig = {"configurable": {"thread_id": "thread-pg"}}

        assert await graph.ainvoke({"n": 1}, config) == {"n": 2}
        snapshot = await graph.aget_state(config)
        assert snapshot.values == {"n": 2}
        [op] = await saver.ledger.unresolved(thread_id="thread-pg")
        assert op.state is State.DISPATCHED

    tables = await tables_in(pg_schema)
    assert {"checkpoints", "checkpoint_writes", "checkpoint_migrations"} <= tables
    assert {"effect_operations", "effect_audit", "effect_migrations"} <= tables
    in_public = "SELECT 1 FROM pg_tables WHERE schemaname = 'public' AND tablename = %s"
    assert await fetch(in_public, "effect_operations") == []


def test_unreachable_postgres_skips_locally_but_fails_in_ci(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LANGGRAPH_EFFECTS_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:1/test")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="not reachable"):
        require_postgres()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        require_postgres()


@dataclasses.dataclass(frozen=True)
class _Pause:
    """A step of this test only: the server sleeps inside the plan's transaction."""

    writes: ClassVar[bool] = False


async def test_two_workers_locking_rows_in_opposite_orders_both_land(
    pg_schema: str, make_op: OpFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two ledgers (two processes' pools) whose transactions lock the same rows in
    opposite orders deadlock; the server rolls one back, and the ledger runs it again
    (nothing of it had landed) instead of failing the caller."""
    from langgraph_effects.ledger import postgres, steps
    from langgraph_effects.ledger.base import CasWithAudit, Lock, Plan, audit_row

    class Steps(postgres._Steps):
        async def pause(self, step: _Pause) -> None:
            await self.cur.execute("SELECT pg_sleep(0.3)")

    monkeypatch.setattr(postgres, "_Steps", Steps)
    monkeypatch.setitem(steps.STEP_METHODS, _Pause, "pause")

    dsn = require_postgres()
    deadlocks = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
    deadlocks_before = (await fetch(deadlocks))[0][0]
    async with (
        PostgresLedger.from_conn_string(dsn, schema=pg_schema) as a,
        PostgresLedger.from_conn_string(dsn, schema=pg_schema) as b,
    ):
        await a.setup()
        x, y = make_op(), make_op()
        await a.record_intents([x, y])
        await b.get_many([x.op_id])  # both pools connected: the two plans run side by side

        def bump(first: str, second: str) -> Plan[None]:
            one = yield Lock(first)
            yield _Pause()  # type: ignore[misc]  # both hold their first row before either asks
            two = yield Lock(second)
            for row in (one, two):
                after = dataclasses.replace(row, version=row.version + 1)
                yield CasWithAudit(after, row.version, audit_row(row, after, None, "test"))

        await asyncio.gather(
            a.transact(lambda: bump(x.op_id, y.op_id)), b.transact(lambda: bump(y.op_id, x.op_id))
        )
        stored = await a.get_many([x.op_id, y.op_id])
    assert [stored[i].version for i in (x.op_id, y.op_id)] == [3, 3]  # both plans landed, once each
    assert (await fetch(deadlocks))[0][0] > deadlocks_before  # the server did break a deadlock
