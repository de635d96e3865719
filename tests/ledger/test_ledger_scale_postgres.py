"""The Postgres half of ``tests/test_ledger_scale.py``: the plans of the key queries read
the indexes (sequential scans disabled, so a query no index can answer shows a
``Seq Scan`` and fails), and the migration from the previous schema."""

from __future__ import annotations

import time

import psycopg
import pytest

from langgraph_effects.core.operation import UNRESOLVED, Change, Event, State
from langgraph_effects.ledger import postgres as pg_ledger
from langgraph_effects.ledger.base import OperationQuery
from langgraph_effects.ledger.postgres import PostgresLedger
from langgraph_effects.ledger.query import listing_sql
from langgraph_effects.testing.conformance import make_op

from .conftest import require_postgres
from .test_postgres import dispatch

pytestmark = pytest.mark.postgres

DECIDED = frozenset({State.CONFIRMED, State.ABANDONED})

#: query -> the index its plan must read.
KEY_QUERIES: dict[str, tuple[OperationQuery, str]] = {
    "recover: unresolved work": (OperationQuery(states=UNRESOLVED), "effect_operations_unresolved"),
    "list --state dispatched": (
        OperationQuery(states=frozenset({State.DISPATCHED})),
        "effect_operations_unresolved",
    ),
    "recover: verdicts of the last 7 days": (
        OperationQuery(states=DECIDED, updated_after=time.time() - 7 * 86400, verdicts=True),
        "effect_operations_verdicts",
    ),
    "recover: verdicts ever, next page": (
        OperationQuery(states=DECIDED, verdicts=True, after=(1.0, "op")),
        "effect_operations_verdicts",
    ),
    "a thread's operations": (OperationQuery(thread_id="t-1"), "effect_operations_payload"),
    "list --all, next page": (
        OperationQuery(states=frozenset(State), after=(1.0, "op")),
        "effect_operations_changed",
    ),
}


async def test_postgres_plans_read_the_index(pg_schema: str) -> None:
    dsn = require_postgres()
    async with PostgresLedger.from_conn_string(dsn, schema=pg_schema) as ledger:
        await ledger.setup()
        for i in range(20):
            [op] = await ledger.record_intents([make_op(thread_id=f"t-{i % 5}")], change=dispatch())
            if i % 4:
                await ledger.transition(
                    op.op_id, Change(Event.SUCCEED, evidence={"kind": "result"}), expected_version=op.version
                )
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("SET enable_seqscan = off")
        for name, (query, index) in KEY_QUERIES.items():
            sql, params = listing_sql(f'"{pg_schema}".effect_operations', query, "%s")
            plan = "\n".join(
                row[0] for row in await (await conn.execute("EXPLAIN " + sql, params)).fetchall()
            )
            assert index in plan and "Seq Scan" not in plan, (name, plan)


async def test_migration_from_the_previous_schema(pg_schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    dsn = require_postgres()
    with monkeypatch.context() as previous:
        previous.setattr(pg_ledger, "MIGRATIONS", pg_ledger.MIGRATIONS[:3])
        async with PostgresLedger.from_conn_string(dsn, schema=pg_schema) as ledger:
            await ledger.setup()
            assert await ledger.schema_version() == 3
            [stored] = await ledger.record_intents([make_op(thread_id="t-old")])
    async with PostgresLedger.from_conn_string(dsn, schema=pg_schema) as ledger:
        await ledger.setup()
        assert await ledger.schema_version() == pg_ledger.SCHEMA_VERSION == 5
        assert await ledger.get(stored.op_id) == stored
        abandon = Change(Event.ABANDON, decision_id="dec-1", decision={"verdict": "abandon"})
        decided = await ledger.transition(stored.op_id, abandon, expected_version=stored.version)
        assert await ledger.list_operations(OperationQuery(verdicts=True)) == [decided]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s", [pg_schema])
        names = {row[0] for row in await cur.fetchall()}
    assert {
        "effect_operations_changed",
        "effect_operations_verdicts",
        "effect_operations_unresolved",
        "effect_deletions_thread",
    } <= names


async def test_unfinished_threads_reads_only_the_open_threads(pg_schema: str) -> None:
    """The plan of ``unfinished_threads()`` starts from ``effect_open_threads`` and
    reaches the checkpoints and writes of those threads by index (sequential scans
    disabled: a part no index can answer shows a ``Seq Scan`` and fails)."""
    import json

    from langgraph_effects.checkpoint import _unfinished
    from langgraph_effects.checkpoint.postgres import AsyncEffectPostgresSaver

    base = require_postgres()
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{pg_schema}"')
    dsn = base + ("&" if "?" in base else "?") + f"options=-csearch_path%3D{pg_schema}"
    async with AsyncEffectPostgresSaver.from_conn_string(dsn) as saver:
        await saver.setup()
    with psycopg.connect(dsn, autocommit=True) as conn:
        copying = "COPY checkpoints (thread_id, checkpoint_id, checkpoint, metadata) FROM STDIN"
        with conn.cursor().copy(copying) as copy:
            for t in range(500):
                for k in range(5):
                    source = "input" if k == 0 else "loop"
                    copy.write_row((f"t-{t}", f"{k:08d}", "{}", json.dumps({"source": source})))
            copy.write_row(("input-only", "00000001", "{}", json.dumps({"source": "input"})))
            copy.write_row(("mid-step", "00000002", "{}", json.dumps({"source": "loop"})))
        conn.execute(
            "INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, "
            "blob) VALUES ('mid-step', '', '00000002', 'task', 0, 'messages', '')"
        )
        conn.execute("ANALYZE")
    async with AsyncEffectPostgresSaver.from_conn_string(dsn) as saver:
        assert await saver.unfinished_threads() == ["input-only", "mid-step"]
    sql = _unfinished.unfinished_sql("checkpoint_writes", "c.metadata ->> 'source'", "%s", "OFFSET 0")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")
        rows = conn.execute("EXPLAIN (COSTS OFF) " + sql, _unfinished.PARAMS).fetchall()
    plan = "\n".join(str(row[0]) for row in rows)
    assert "effect_open_threads" in plan and "Seq Scan" not in plan, plan
    assert "Hash Join" not in plan and "Merge Join" not in plan, plan  # neither reads a table whole
    assert plan.count("Index Cond: ((thread_id = o.thread_id)") == 2, plan  # the newest, and its row
    assert plan.count("Index Cond: (thread_id = c.thread_id)") == 2, plan  # its writes
